"""The SQL archive against the real PostgreSQL and MariaDB of this machine (and CI's):
records are copied exactly once per destination, also when the archiver is killed between
its commit and its cursor's update, and Redis keeps its own history.

The databases (docs/observability.md, "Where the test databases come from"): PostgreSQL on
127.0.0.1:5432 (trust auth, user postgres, database test) and MariaDB on 127.0.0.1:3306
(root, no password, database test); ``DELAYQ_TEST_POSTGRES_URL`` and
``DELAYQ_TEST_MYSQL_URL`` override them.  Each test uses a table of its own, dropped after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ResponseError
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from delayq import Queue
from delayq.archive import ArchiveFailed, Archiver, DestinationError, history_table
from delayq.redis.source import lua_source
from delayq.task import Envelope
from tests.apps.runner import module_command, run_cli

DATABASES = {
    "postgresql": os.environ.get(
        "DELAYQ_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("DELAYQ_TEST_MYSQL_URL", "mysql+asyncmy://root@127.0.0.1:3306/test"),
}
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=sorted(DATABASES))
def database(request: pytest.FixtureRequest) -> str:
    return DATABASES[request.param]


@pytest.fixture
async def engine(database: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database)
    yield engine
    await engine.dispose()


async def drop(engine: AsyncEngine, name: str) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(history_table(name).metadata.drop_all)


@pytest.fixture
async def table(engine: AsyncEngine) -> AsyncIterator[str]:
    name = f"dq_hist_{uuid.uuid4().hex[:10]}"
    yield name
    await drop(engine, name)


async def finish(
    queue: Queue, topic: str, count: int, history: int = 1000, body: Any = None, start: int = 0
) -> list[str]:
    """Send ``count`` tasks and ack them as a history topic's worker would, 7 per call."""
    numbers = range(start, start + count)
    ids = await queue.send_many(
        topic, [{"n": n} if body is None else body for n in numbers],
        task_ids=[f"{topic}-{n:03}" for n in numbers], headers={"traceparent": "00-abc"},
    )  # fmt: skip
    for keys in await queue.shards.every(topic):
        while True:
            _, _, items = await queue.scripts.reserve(
                keys, limit=7, reclaim=10, ttr_ms=60_000, max_attempts=3, history=history
            )
            if not items:
                break
            leases = [(i, Envelope.parse(raw).token, "1000,1500") for i, raw in items]
            await queue.scripts.ack(keys, leases, history=history)
    return ids


async def rows(engine: AsyncEngine, name: str) -> list[dict[str, Any]]:
    archived = history_table(name)
    async with engine.connect() as connection:
        ordered = archived.c.topic, archived.c.shard, archived.c.seq
        result = await connection.execute(select(archived).order_by(*ordered))
        return [dict(row._mapping) for row in result]


def keys_of(stored: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(r["topic"], r["shard"], r["seq"]) for r in stored]


def aware(value: datetime) -> datetime:
    """MariaDB's DATETIME(6) holds UTC without a zone."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def test_records_are_copied_exactly_once_and_redis_keeps_its_history(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    ids = await finish(queue, "a", 25)
    await finish(queue, "b", 3)
    archiver = Archiver(queue, engine, table=table, batch=10)
    assert await archiver.archive_all() == {"a": 25, "b": 3}
    # Copied, not moved: the dashboard and `delayq history` still find them.
    assert len(await queue.history("a")) == 25 and len(await queue.history("b")) == 3
    assert await queue.history.find("a", ids[0]) is not None
    stored = await rows(engine, table)
    assert keys_of(stored) == [("a", 0, n) for n in range(1, 26)] + [("b", 0, n) for n in (1, 2, 3)]
    first = stored[0]
    assert [r["task_id"] for r in stored[:25]] == ids
    assert (first["queue"], first["outcome"], first["attempts"]) == (queue.name, "acked", 1)
    assert first["body"] == {"n": 0} and first["headers"] == {"traceparent": "00-abc"}
    assert first["lateness_ms"] is not None and first["error"] is None
    assert await archiver.cursor(queue.keys("a")) == 25
    # Nothing new: a second run copies nothing; new records are copied by the next run.
    assert await archiver.archive("a") == 0
    await finish(queue, "a", 4, start=25)
    assert await archiver.archive("a") == 4
    assert keys_of(await rows(engine, table))[:29] == [("a", 0, n) for n in range(1, 30)]


async def test_the_table_has_json_columns_microsecond_times_and_an_index_on_task_id(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    await Archiver(queue, engine, table=table).create_table()

    def layout(connection: Any) -> tuple[dict[str, Any], list[list[str]]]:
        inspector = inspect(connection)
        columns = {c["name"]: c["type"] for c in inspector.get_columns(table)}
        return columns, [i["column_names"] for i in inspector.get_indexes(table)]

    async with engine.connect() as connection:
        columns, indexes = await connection.run_sync(layout)
    assert ["task_id"] in indexes
    if engine.dialect.name == "postgresql":
        assert (str(columns["body"]), str(columns["headers"])) == ("JSONB", "JSONB")
        assert columns["finished_at"].timezone  # timestamptz: microseconds
    else:  # MariaDB's JSON is LONGTEXT checked by json_valid
        assert str(columns["body"]) in ("JSON", "LONGTEXT") and str(columns["error"]) == "LONGTEXT"
        assert columns["finished_at"].fsp == 6


async def test_a_400_kb_body_and_millisecond_times_survive(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    blob = {"blob": "é" * 200_000}  # 400 KB of UTF-8, inside the 512 KiB body limit
    # 45 of them, 18 MB in one batch: more than MySQL's default max_allowed_packet (the
    # driver splits a many-row INSERT into statements under it).
    await finish(queue, "big", 45, body=blob)
    records = sorted(await queue.history("big"), key=lambda r: r.seq)
    assert await Archiver(queue, engine, table=table).archive("big") == 45
    stored = await rows(engine, table)
    assert [r["body"] for r in stored] == [blob] * 45
    for record, got in zip(records, stored, strict=True):
        for field in ("enqueued_at", "due_at", "started_at", "finished_at"):
            assert aware(got[field]) == getattr(record, field)
    # The times are Redis milliseconds: the equalities above hold only if they survive.
    times = ("enqueued_at", "due_at", "started_at", "finished_at")
    assert any(getattr(r, field).microsecond for r in records for field in times)


async def test_a_batch_committed_again_is_stored_once(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 12)
    first = Archiver(queue, engine, table=table, batch=5, name="first")
    assert await first.archive("a") == 12
    # Another cursor on the same table, as after a crash between commit and cursor update:
    # every record is inserted again, and the table's key absorbs them.
    again = Archiver(queue, engine, table=table, batch=5, name="second")
    assert await again.archive("a") == 12
    assert keys_of(await rows(engine, table)) == [("a", 0, n) for n in range(1, 13)]


KILLED_ARCHIVER = """
import os, signal, sys
from delayq.archive import Archiver
from delayq.cli import main

point = sys.argv[1]
if point == "before-commit":
    async def die(connection, statement, rows):
        async with connection.begin():
            await connection.execute(statement, rows)
            os.kill(os.getpid(), signal.SIGKILL)  # inserted, not committed
    Archiver._commit = staticmethod(die)
else:
    async def die(self, keys, seq):
        os.kill(os.getpid(), signal.SIGKILL)  # committed, cursor not moved
    Archiver._advance = die
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("point", ["before-commit", "between-commit-and-cursor"])
async def test_an_archiver_killed_at_its_commit_loses_and_repeats_nothing(
    queue: Queue,
    redis_url: str,
    database: str,
    engine: AsyncEngine,
    table: str,
    tmp_path: Path,
    point: str,
) -> None:
    await finish(queue, "a", 12)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_ARCHIVER)
    args = ("archive", "--url", redis_url, "--name", queue.name, "--to", database,
            "--table", table, "--batch", "5")  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), point, *args, cwd=ROOT
    )
    assert await asyncio.wait_for(process.wait(), 60) == -9
    committed = await rows(engine, table)
    # The first batch (one entry of 7 records) is committed or not, and no cursor moved.
    assert len(committed) == (0 if point == "before-commit" else 7)
    assert await Archiver(queue, engine, table=table).cursor(queue.keys("a")) == 0
    result = await run_cli(module_command(*args), {})
    assert result.returncode == 0, result.stderr
    assert keys_of(await rows(engine, table)) == [("a", 0, n) for n in range(1, 13)]
    assert len(await queue.history("a")) == 12


async def test_archivers_killed_wherever_they_are_leave_every_record_once(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    command = module_command("archive", "--url", redis_url, "--name", queue.name, "--to",
                             database, "--table", table, "--batch", "3", "--every", "0")  # fmt: skip
    await Archiver(queue, engine, table=table).create_table()
    sent = 0
    for _ in range(3):
        await finish(queue, "a", 20, start=sent)
        sent += 20
        before = len(await rows(engine, table))
        process = await asyncio.create_subprocess_exec(
            *command, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL
        )
        await wait_for_rows(engine, table, before + 1)  # mid-run, wherever it is
        process.kill()
        await process.wait()
    result = await run_cli(module_command(*command[3:-2]), {})
    assert result.returncode == 0, result.stderr
    assert keys_of(await rows(engine, table)) == [("a", 0, n) for n in range(1, sent + 1)]


async def test_one_history_feeds_two_databases_each_with_its_cursor(
    queue: Queue, redis_url: str
) -> None:
    engines = {kind: create_async_engine(url) for kind, url in DATABASES.items()}
    name = f"dq_two_{uuid.uuid4().hex[:10]}"
    try:
        await finish(queue, "a", 5)
        args = ("archive", "--url", redis_url, "--name", queue.name, "--table", name,
                "--to", DATABASES["postgresql"], "--to", DATABASES["mariadb"])  # fmt: skip
        result = await run_cli(module_command(*args), {})
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("archived 5 record(s) of a to ") == 2
        await finish(queue, "a", 3, start=5)
        # One destination behind the other: each cursor copies only what its table lacks.
        assert await Archiver(queue, engines["mariadb"], table=name).archive("a") == 3
        result = await run_cli(module_command(*args), {})
        assert result.returncode == 0, result.stderr
        assert "archived 3 record(s) of a to postgresql://" in result.stdout
        assert "to mysql://" not in result.stdout
        for engine in engines.values():
            assert keys_of(await rows(engine, name)) == [("a", 0, n) for n in range(1, 9)]
        cursors = await queue.redis.hgetall(queue.keys("a").archive)
        assert sorted(int(v) for v in cursors.values()) == [8, 8]
    finally:
        for engine in engines.values():
            await drop(engine, name)
            await engine.dispose()


async def refuse_seq_3_of_a(engine: AsyncEngine, name: str) -> None:
    """A trigger that rejects one record, as a constraint of the user's might."""
    async with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            await connection.exec_driver_sql(
                f"CREATE FUNCTION {name}_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.seq = 3 AND NEW.topic = 'a' THEN RAISE EXCEPTION 'refused by the test'; "
                f"END IF; RETURN NEW; END $$"
            )
            await connection.exec_driver_sql(
                f"CREATE TRIGGER {name}_refuse BEFORE INSERT ON {name} "
                f"FOR EACH ROW EXECUTE FUNCTION {name}_refuse()"
            )
        else:
            await connection.exec_driver_sql(
                f"CREATE TRIGGER {name}_refuse BEFORE INSERT ON {name} FOR EACH ROW BEGIN "
                f"IF NEW.seq = 3 AND NEW.topic = 'a' THEN SIGNAL SQLSTATE '45000' "
                f"SET MESSAGE_TEXT = 'refused by the test'; END IF; END"
            )


async def unrefuse(engine: AsyncEngine, name: str) -> None:
    async with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            await connection.exec_driver_sql(f"DROP FUNCTION {name}_refuse() CASCADE")
        else:
            await connection.exec_driver_sql(f"DROP TRIGGER {name}_refuse")


async def test_a_refused_record_is_named_and_holds_up_only_its_topic(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 6)
    await finish(queue, "b", 4)
    archiver = Archiver(queue, engine, table=table, batch=100)
    await archiver.create_table()
    await refuse_seq_3_of_a(engine, table)
    with pytest.raises(ArchiveFailed) as failed:
        await archiver.archive_all(["a", "b"])
    assert failed.value.copied == {"a": 2, "b": 4}
    [refused] = failed.value.failures
    assert (refused.topic, refused.seq) == ("a", 3) and "refused by the test" in refused.reason
    assert await archiver.cursor(queue.keys("a")) == 2
    args = ("archive", "--url", redis_url, "--name", queue.name, "--to", database,
            "--table", table)  # fmt: skip
    result = await run_cli(module_command(*args), {})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = "delayq: topic 'a': history record seq 3 cannot be archived: "
    assert result.stderr.startswith(line) and "refused by the test" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    # Once the database takes it, the topic goes on from that record.
    await unrefuse(engine, table)
    result = await run_cli(module_command(*args), {})
    assert result.returncode == 0, result.stderr
    assert "archived 4 record(s) of a" in result.stdout
    assert len(await rows(engine, table)) == 10


async def test_archive_every_logs_a_refused_record_and_keeps_archiving_other_topics(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 6)
    await finish(queue, "b", 2)
    await Archiver(queue, engine, table=table).create_table()
    await refuse_seq_3_of_a(engine, table)
    command = module_command("archive", "--url", redis_url, "--name", queue.name, "--to",
                             database, "--table", table, "--every", "0.1")  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        await wait_for_rows(engine, table, 4)  # a's first two and b's two
        await finish(queue, "b", 3, start=2)
        await wait_for_rows(engine, table, 7)  # b's new records, past a's refused one
        assert keys_of(await rows(engine, table)) == [("a", 0, 1), ("a", 0, 2)] + [
            ("b", 0, n) for n in range(1, 6)
        ]
    finally:
        process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 30)
    log = err.decode()
    assert "topic 'a': history record seq 3 cannot be archived" in log and "ERROR" in log
    assert "Traceback" not in log


async def wait_for_rows(engine: AsyncEngine, name: str, count: int) -> None:
    async with asyncio.timeout(30):
        while len(await rows(engine, name)) < count:
            await asyncio.sleep(0.05)


async def test_a_body_postgresql_cannot_store_is_refused_by_seq(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("jsonb refuses the NUL character; MariaDB's JSON keeps it")
    await finish(queue, "a", 1)
    await finish(queue, "a", 1, body={"s": "a\x00b"}, start=1)
    await finish(queue, "a", 1, start=2)
    refused = r"topic 'a': history record seq 2 cannot be archived: unsupported Unicode escape"
    with pytest.raises(ArchiveFailed, match=refused + r" sequence .*u0000"):
        await Archiver(queue, engine, table=table).archive_all(["a"])
    assert keys_of(await rows(engine, table)) == [("a", 0, 1)]


def table_of_0_1(name: str) -> Table:
    """The archive table delayq 0.1 created."""
    return Table(
        name, MetaData(),
        Column("queue", String(200), primary_key=True),
        Column("topic", String(200), primary_key=True),
        Column("seq", BigInteger, primary_key=True, autoincrement=False),
        Column("task_id", String(256), nullable=False),
        Column("outcome", String(16), nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("error", Text),
        Column("body", Text, nullable=False),
        Column("headers", Text, nullable=False),
        Column("enqueued_at", DateTime(timezone=True), nullable=False),
        Column("due_at", DateTime(timezone=True), nullable=False),
        Column("started_at", DateTime(timezone=True)),
        Column("finished_at", DateTime(timezone=True), nullable=False),
        Column("lateness_ms", Float),
    )  # fmt: skip


async def test_a_table_of_0_1_is_refused_with_how_to_migrate_then_migrated(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    old = table_of_0_1(table)
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    async with engine.begin() as connection:
        await connection.run_sync(old.metadata.create_all)
        await connection.execute(old.insert().values(
            queue=queue.name, topic="a", seq=1, task_id="old", outcome="acked", attempts=1,
            body='{"n": -1}', headers="{}", enqueued_at=when, due_at=when, finished_at=when,
        ))  # fmt: skip
    await finish(queue, "a", 3, start=1)  # seqs 1-3: seq 1 is already in the table
    with pytest.raises(DestinationError, match="--migrate"):
        await Archiver(queue, engine, table=table).archive("a")
    args = ("archive", "--url", redis_url, "--name", queue.name, "--to", database,
            "--table", table)  # fmt: skip
    result = await run_cli(module_command(*args), {})
    assert result.returncode == 2 and result.stderr.startswith("delayq: table ")
    assert "--migrate" in result.stderr and "Traceback" not in result.stderr
    result = await run_cli(module_command(*args, "--migrate"), {})
    assert result.returncode == 0, result.stderr
    stored = await rows(engine, table)
    assert keys_of(stored) == [("a", 0, 1), ("a", 0, 2), ("a", 0, 3)]
    assert stored[0]["task_id"] == "old" and stored[0]["body"] == {"n": -1}
    assert stored[1]["body"] == {"n": 2}
    async with engine.connect() as connection:
        indexes = await connection.run_sync(lambda c: inspect(c).get_indexes(table))
    assert ["task_id"] in [i["column_names"] for i in indexes]


async def test_every_shard_of_a_sharded_topic_is_archived(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    queue.topic("s", shards=3, history=100)(_handle)
    ids = await finish(queue, "s", 30, history=100)
    assert await Archiver(queue, engine, table=table).archive("s") == 30
    stored = await rows(engine, table)
    assert sorted(r["task_id"] for r in stored) == sorted(ids)
    assert {r["shard"] for r in stored} == {0, 1, 2}
    for keys in await queue.shards.every("s"):
        mine = [r["seq"] for r in stored if r["shard"] == keys.shard]
        assert await Archiver(queue, engine, table=table).cursor(keys) == max(mine)


async def _handle(body: Any) -> None:
    del body


async def test_sql_is_untouched_by_a_run_with_nothing_new(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 2)
    archiver = Archiver(queue, engine, table=table)
    assert await archiver.archive("a") == 2
    async with engine.begin() as connection:
        await connection.execute(text(f"DELETE FROM {table}"))
    # The cursor, not the table, says what is archived: nothing is copied again.
    assert await archiver.archive("a") == 0
    assert await rows(engine, table) == []


async def test_archived_lua_moves_a_cursor_only_forward_and_survives_script_flush(
    queue: Queue,
) -> None:
    cursors = queue.keys("a").archive
    script = queue.redis.register_script(lua_source("archived"))
    assert await script(keys=[cursors], args=["pg", 7]) == 7
    assert await script(keys=[cursors], args=["pg", 5]) == 7  # a stalled archiver's late call
    assert await script(keys=[cursors], args=["my", 2]) == 2
    await queue.redis.script_flush()
    assert await script(keys=[cursors], args=["pg", 9]) == 9
    assert await queue.redis.hgetall(cursors) == {b"pg": b"9", b"my": b"2"}
    await queue.redis.set(cursors, "x")
    with pytest.raises(ResponseError, match=r"WRONGTYPE delayq key .* not a hash"):
        await script(keys=[cursors], args=["pg", 10])


async def test_an_unreachable_database_is_named_with_exit_2(queue: Queue, redis_url: str) -> None:
    await finish(queue, "a", 1)
    nowhere = "postgresql+asyncpg://postgres@127.0.0.1:1/test"  # port 1: refused
    result = await run_cli(
        module_command("archive", "--url", redis_url, "--name", queue.name, "--to", nowhere), {}
    )
    assert result.returncode == 2
    assert result.stderr.startswith("delayq: archive destination postgresql://127.0.0.1:1/test/")
    assert "Traceback" not in result.stderr


async def test_records_trimmed_before_they_were_archived_are_counted_in_a_warning(
    queue: Queue, engine: AsyncEngine, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    archiver = Archiver(queue, engine, table=table)
    await finish(queue, "a", 3, history=10)
    assert await archiver.archive("a") == 3
    await finish(queue, "a", 14, history=10, start=3)  # seqs 4-17; Redis keeps about 10
    kept = sorted(r.seq for r in await queue.history("a"))
    with caplog.at_level(logging.WARNING, logger="delayq.archive"):
        assert await archiver.archive("a") == len(kept)
    missed = kept[0] - 4
    assert missed > 0
    assert f"{missed} record(s) of topic 'a' left Redis's history before" in caplog.text


async def test_archive_every_logs_an_unreachable_database_and_feeds_the_other(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 3)
    await Archiver(queue, engine, table=table).create_table()
    nowhere = "postgresql+asyncpg://postgres@127.0.0.1:1/test"
    command = module_command("archive", "--url", redis_url, "--name", queue.name, "--to",
                             nowhere, "--to", database, "--table", table, "--every", "0.1")  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        await wait_for_rows(engine, table, 3)
        await finish(queue, "a", 2, start=3)
        await wait_for_rows(engine, table, 5)
    finally:
        process.terminate()
        _, err = await asyncio.wait_for(process.communicate(), 30)
    assert (
        "ERROR delayq.archive: archive destination postgresql://127.0.0.1:1/test/" in err.decode()
    )
    assert "Traceback" not in err.decode()
