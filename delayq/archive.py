"""Moving history records from Redis into a SQL table (``pip install delayq[archive]``).

    archiver = Archiver(queue, "postgresql+asyncpg://user@db/app")   # or mysql+asyncmy://
    moved = await archiver.archive("order.close")
    # delayq archive app.tasks:queue --to postgresql+asyncpg://... [--every 60]

Records move in batches, exactly once: a batch is inserted and committed, and only then
deleted from Redis.  The table's primary key is (queue, topic, seq), the record's number
(``_history.lua``), so a batch inserted again after a crash between the commit and the
delete inserts nothing (PostgreSQL ``ON CONFLICT DO NOTHING``, MySQL/MariaDB ``ON
DUPLICATE KEY UPDATE`` of the key itself) and is then deleted.  Uses SQLAlchemy's async
engine: any dialect with an async driver works; PostgreSQL and MariaDB are tested.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

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
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from delayq.bounds import bounded_int
from delayq.errors import InvalidInputError
from delayq.history import HistoryRecord, parse_entry
from delayq.redis.translate import redis_errors

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from delayq.queue import Queue

DEFAULT_TABLE = "delayq_history"
MAX_BATCH = 5_000


def history_table(name: str = DEFAULT_TABLE, metadata: MetaData | None = None) -> Table:
    """The archive's table: one row per record, keyed by (queue, topic, seq)."""
    return Table(
        name, metadata or MetaData(),
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


def _row(queue: str, record: HistoryRecord) -> dict[str, Any]:
    return {
        "queue": queue, "topic": record.topic, "seq": record.seq, "task_id": record.id,
        "outcome": record.outcome, "attempts": record.attempts, "error": record.error,
        "body": json.dumps(record.body), "headers": json.dumps(record.headers),
        "enqueued_at": record.enqueued_at, "due_at": record.due_at,
        "started_at": record.started_at, "finished_at": record.finished_at,
        "lateness_ms": None if record.lateness is None else record.lateness * 1000,
    }  # fmt: skip


class Archiver:
    """Moves a queue's history records into a SQL table.

    Args:
        queue: the queue whose topics' history to move.
        engine: an ``AsyncEngine`` or a database URL (``postgresql+asyncpg://...``,
            ``mysql+asyncmy://...``); an engine made from a URL is disposed by :meth:`close`.
        table: the table's name; created if missing.
        batch: records per transaction (1-5,000).
    """

    def __init__(
        self,
        queue: Queue,
        engine: AsyncEngine | str,
        *,
        table: str = DEFAULT_TABLE,
        batch: int = 500,
    ) -> None:
        bounded_int(batch, "batch", 1, MAX_BATCH)
        self.queue = queue
        self._owns_engine = isinstance(engine, str)
        self.engine = create_async_engine(engine) if isinstance(engine, str) else engine
        self.table = history_table(table)
        self.batch = batch
        self._created = False

    async def close(self) -> None:
        """Dispose of the engine if this archiver made it."""
        if self._owns_engine:
            await self.engine.dispose()

    async def create_table(self) -> None:
        """Create the table if it does not exist (done before the first insert)."""
        async with self.engine.begin() as connection:
            await connection.run_sync(self.table.metadata.create_all)
        self._created = True

    async def archive(self, topic: str) -> int:
        """Move every record of ``topic`` present now, batch by batch; returns how many."""
        moved = 0
        while True:
            entries = await self._oldest(topic)
            if not entries:
                return moved
            records = [
                r for entry_id, fields in entries for r in parse_entry(topic, entry_id, fields)
            ]
            await self._insert(records)
            await self._delete(topic, [entry_id for entry_id, _ in entries])
            moved += len(records)

    async def archive_all(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Archive each topic (default: every topic of the queue); records moved per topic."""
        names = list(topics) if topics is not None else await self.queue.topic_names()
        return {topic: await self.archive(topic) for topic in names}

    async def _oldest(self, topic: str) -> list[tuple[Any, Any]]:
        """The oldest entries, up to about ``batch`` records (at least one entry)."""
        key = self.queue.keys(topic).history
        entries: list[tuple[Any, Any]] = []
        count = 0
        start = "-"
        async with redis_errors():
            while count < self.batch:
                page: Sequence[Any] = await self.queue.redis.xrange(key, start, "+", count=16) or []
                for entry_id, fields in page:
                    if entries and count + len(fields) > self.batch:
                        return entries
                    entries.append((entry_id, fields))
                    count += len(fields)
                if len(page) < 16:
                    break
                last = page[-1][0]
                start = f"({last.decode() if isinstance(last, bytes) else last}"
        return entries

    async def _insert(self, records: list[HistoryRecord]) -> None:
        """Insert the records in one transaction; rows already there are left as they are."""
        if not self._created:
            await self.create_table()
        rows = [_row(self.queue.name, r) for r in records]
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            statement: Any = pg_insert(self.table).on_conflict_do_nothing(
                index_elements=["queue", "topic", "seq"]
            )
        elif dialect in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import insert as my_insert

            statement = my_insert(self.table)
            statement = statement.on_duplicate_key_update(seq=statement.inserted.seq)
        else:
            raise InvalidInputError(
                f"archiving to {dialect!r} is not supported (PostgreSQL, MySQL)"
            )
        async with self.engine.begin() as connection:
            await connection.execute(statement, rows)

    async def _delete(self, topic: str, entry_ids: list[Any]) -> None:
        """Delete archived entries from Redis (only after their insert committed)."""
        async with redis_errors():
            await self.queue.redis.xdel(self.queue.keys(topic).history, *entry_ids)
