"""The SQL archive against the real PostgreSQL and MariaDB of this machine (and CI's):
records move exactly once, also when the archiver is killed between insert and delete.

The databases (docs/observability.md, "Where the test databases come from"): PostgreSQL on
127.0.0.1:5432 (trust auth, user postgres, database test) and MariaDB on 127.0.0.1:3306
(root, no password, database test); ``DELAYQ_TEST_POSTGRES_URL`` and
``DELAYQ_TEST_MYSQL_URL`` override them.  Each test uses a table of its own, dropped after.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from delayq import Queue
from delayq.archive import Archiver, history_table
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


@pytest.fixture
async def table(engine: AsyncEngine) -> AsyncIterator[str]:
    name = f"dq_hist_{uuid.uuid4().hex[:10]}"
    yield name
    async with engine.begin() as connection:
        await connection.run_sync(history_table(name).metadata.drop_all)


async def finish(queue: Queue, topic: str, count: int, history: int = 1000) -> list[str]:
    """Send ``count`` tasks and ack them as a history topic's worker would, 7 per call."""
    ids = await queue.send_many(
        topic, [{"n": n} for n in range(count)], task_ids=[f"{topic}-{n:03}" for n in range(count)],
        headers={"traceparent": "00-abc"},
    )  # fmt: skip
    keys = queue.keys(topic)
    while True:
        _, _, items = await queue.scripts.reserve(
            keys, limit=7, reclaim=10, ttr_ms=60_000, max_attempts=3, history=history
        )
        if not items:
            return ids
        leases = [(i, Envelope.parse(raw).token, "1000,1500") for i, raw in items]
        await queue.scripts.ack(keys, leases, history=history)


async def rows(engine: AsyncEngine, name: str) -> list[dict[str, object]]:
    archived = history_table(name)
    async with engine.connect() as connection:
        result = await connection.execute(select(archived).order_by(archived.c.seq))
        return [dict(row._mapping) for row in result]


async def test_records_move_exactly_once_in_batches(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    ids = await finish(queue, "a", 25)
    await finish(queue, "b", 3)
    archiver = Archiver(queue, engine, table=table, batch=10)
    assert await archiver.archive_all() == {"a": 25, "b": 3}
    assert await queue.history("a") == [] and await queue.history("b") == []
    stored = await rows(engine, table)
    assert len(stored) == 28
    mine = [r for r in stored if r["topic"] == "a"]
    assert [r["task_id"] for r in mine] == ids and [r["seq"] for r in mine] == list(range(1, 26))
    first = mine[0]
    assert (first["queue"], first["outcome"], first["attempts"]) == (queue.name, "acked", 1)
    assert json.loads(str(first["body"])) == {"n": 0}
    assert json.loads(str(first["headers"])) == {"traceparent": "00-abc"}
    assert first["lateness_ms"] is not None and first["error"] is None
    # Nothing left: a second run moves nothing and adds no row.
    assert await archiver.archive("a") == 0
    assert len(await rows(engine, table)) == 28


async def test_a_batch_inserted_twice_is_stored_once(
    queue: Queue, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 12)
    archiver = Archiver(queue, engine, table=table, batch=5)
    # As after a crash between the commit and the delete: the first batch is in SQL and
    # still in Redis.
    entries = await archiver._oldest("a")
    from delayq.history import parse_entry

    await archiver._insert([r for e, f in entries for r in parse_entry("a", e, f)])
    assert await archiver.archive("a") == 12
    assert [r["seq"] for r in await rows(engine, table)] == list(range(1, 13))


CRASHING_ARCHIVER = """
import asyncio, os, signal, sys
from delayq import Queue
from delayq.archive import Archiver

async def main(url, name, db, table):
    queue = Queue.from_url(url, name=name)
    archiver = Archiver(queue, db, table=table, batch=5)
    async def die(topic, entry_ids):
        os.kill(os.getpid(), signal.SIGKILL)  # committed, not yet deleted from Redis
    archiver._delete = die
    await archiver.archive("a")

asyncio.run(main(*sys.argv[1:]))
"""


async def test_an_archiver_killed_between_insert_and_delete_loses_and_repeats_nothing(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str, tmp_path: Path
) -> None:
    await finish(queue, "a", 12)
    script = tmp_path / "crash.py"
    script.write_text(CRASHING_ARCHIVER)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), redis_url, queue.name, database, table, cwd=ROOT
    )
    assert await asyncio.wait_for(process.wait(), 60) == -9  # SIGKILLed after its commit
    committed = await rows(engine, table)
    assert len(committed) == 7  # the first batch (one entry of 7 records) is in SQL...
    assert len(await queue.history("a", limit=100)) == 12  # ...and still in Redis
    archiver = Archiver(queue, engine, table=table, batch=5)
    assert await archiver.archive("a") == 12
    assert [r["seq"] for r in await rows(engine, table)] == list(range(1, 13))
    assert await queue.history("a") == []


async def test_delayq_archive_moves_records(
    queue: Queue, redis_url: str, database: str, engine: AsyncEngine, table: str
) -> None:
    await finish(queue, "a", 4)
    result = await run_cli(
        module_command("archive", "--url", redis_url, "--name", queue.name, "--to", database,
                       "--table", table, "--topics", "a"),
        {},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "archived 4 record(s) of a" in result.stdout
    async with engine.connect() as connection:
        count = await connection.execute(select(func.count()).select_from(history_table(table)))
        assert count.scalar() == 4
