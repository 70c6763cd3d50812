"""The archiver: copies each topic's new history records into one SQL table, batch by batch."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from delayq.archive.errors import (
    ArchiveFailed,
    DestinationError,
    DestinationUnreachable,
    RecordNotArchived,
)
from delayq.archive.table import (
    DEFAULT_TABLE,
    history_table,
    insert_ignoring_duplicates,
    prepare,
    row,
)
from delayq.bounds import bounded_int

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.ext.asyncio import AsyncConnection

    from delayq.history import HistoryRecord
    from delayq.queue import Queue
    from delayq.redis.keys import TopicKeys

log = logging.getLogger("delayq.archive")
MAX_BATCH = 5_000


class Archiver:
    """Copies a queue's history records into a SQL table, exactly once per destination.

    Args:
        queue: the queue whose topics' history to copy.
        engine: an ``AsyncEngine`` or a database URL (``postgresql+asyncpg://...``,
            ``mysql+asyncmy://...``); an engine made from a URL is disposed by :meth:`close`.
        table: the table's name; created if missing.
        batch: records per transaction (1-5,000).
        name: the destination's name for its cursors in Redis (default: database backend,
            host, port, database and table, so two archivers of one table share them).
        migrate: migrate a table of delayq 0.1's layout (else it is refused, naming how).
    """

    def __init__(
        self,
        queue: Queue,
        engine: AsyncEngine | str,
        *,
        table: str = DEFAULT_TABLE,
        batch: int = 500,
        name: str | None = None,
        migrate: bool = False,
    ) -> None:
        bounded_int(batch, "batch", 1, MAX_BATCH)
        self.queue = queue
        self._owns_engine = isinstance(engine, str)
        self.engine = create_async_engine(engine) if isinstance(engine, str) else engine
        self.table = history_table(table)
        self.batch = batch
        url = self.engine.url
        self.name = name or (
            f"{url.get_backend_name()}://{url.host or ''}:{url.port or ''}/{url.database or ''}"
            f"/{table}"
        )
        self._migrate = migrate
        self._naive_utc = self.engine.dialect.name != "postgresql"
        self._prepared = False

    async def close(self) -> None:
        """Dispose of the engine if this archiver made it."""
        if self._owns_engine:
            await self.engine.dispose()

    async def create_table(self) -> None:
        """Create the table if missing, or check (and with ``migrate``, migrate) its layout;
        done before the first insert.

        Raises:
            DestinationError: the database is unreachable or its table's layout is refused.
        """
        async with self._connect() as connection:
            try:
                await connection.run_sync(prepare, self.table, self._migrate)
                await connection.commit()
            except DBAPIError as exc:  # e.g. no right to create or alter the table
                raise DestinationError(
                    f"cannot prepare table {self.table.name!r} in {self.name}: {_reason(exc)}"
                ) from exc
        self._prepared = True

    async def archive(self, topic: str) -> int:
        """Copy every record of ``topic`` (of each of its shards) not yet in the table.

        Returns:
            How many records were copied.

        Raises:
            RecordNotArchived: the table refused a record; the ones before it are copied.
            DestinationError: the database is unreachable or its table's layout is refused.
        """
        if not self._prepared:
            await self.create_table()
        copied = 0
        refused: RecordNotArchived | None = None
        for keys in await self.queue.shards.every(topic):
            try:
                copied += await self._archive_shard(topic, keys)
            except RecordNotArchived as exc:  # the topic's other shards still go on
                copied += exc.copied
                refused = refused or exc
        if refused is not None:
            refused.copied = copied
            raise refused
        return copied

    async def archive_all(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Archive each topic (default: every topic of the queue); a topic whose record is
        refused does not hold up the others.

        Returns:
            Records copied per topic.

        Raises:
            ArchiveFailed: after every topic was tried, if some record was refused.
            DestinationError: the database is unreachable or its table's layout is refused.
        """
        names = list(topics) if topics is not None else await self.queue.topic_names()
        copied: dict[str, int] = {}
        failures: list[RecordNotArchived] = []
        for topic in names:
            try:
                copied[topic] = await self.archive(topic)
            except RecordNotArchived as exc:
                copied[topic] = exc.copied
                failures.append(exc)
        if failures:
            raise ArchiveFailed(copied, failures)
        return copied

    async def cursor(self, keys: TopicKeys) -> int:
        """The ``seq`` of the last record of this shard's history the table holds."""
        return await self.queue.history.archive_cursor(keys, self.name)

    async def _archive_shard(self, topic: str, keys: TopicKeys) -> int:
        cursor = await self.cursor(keys)
        copied = 0
        while True:
            records = await self._after(topic, keys, cursor)
            if not records:
                return copied
            if cursor and records[0].seq > cursor + 1:
                log.warning(
                    "%d record(s) of topic %r left Redis's history before they were archived "
                    "to %s: archive more often or keep more history",
                    records[0].seq - cursor - 1, topic, self.name,
                )  # fmt: skip
            stored, refused = await self._insert(keys.shard, records)
            if stored:
                cursor = stored[-1].seq
                await self._advance(keys, cursor)
                copied += len(stored)
            if refused is not None:
                refused.copied = copied
                raise refused

    async def _after(self, topic: str, keys: TopicKeys, cursor: int) -> list[HistoryRecord]:
        """The oldest records after ``cursor``, up to about ``batch``."""
        return await self.queue.history.records_after(topic, keys, cursor, self.batch)

    async def _insert(
        self, shard: int, records: list[HistoryRecord]
    ) -> tuple[list[HistoryRecord], RecordNotArchived | None]:
        """Insert the records in one transaction (rows already there are left as they are).
        If the table refuses the batch, insert them one by one to find the record it
        refuses: returns the records stored and the refusal, if any."""
        statement = insert_ignoring_duplicates(self.table, self.engine.dialect)
        rows = [row(self.queue.name, shard, r, self._naive_utc) for r in records]
        async with self._connect() as connection:
            try:
                await self._commit(connection, statement, rows)
                return records, None
            except DBAPIError as exc:
                if exc.connection_invalidated:
                    raise self._unreachable(exc) from exc
            for n, (record, one) in enumerate(zip(records, rows, strict=True)):
                try:
                    await self._commit(connection, statement, [one])
                except DBAPIError as exc:
                    if exc.connection_invalidated:
                        raise self._unreachable(exc) from exc
                    refused = RecordNotArchived(record.topic, shard, record.seq, _reason(exc))
                    return records[:n], refused
        return records, None  # pragma: no cover (the batch failed, each record passed)

    @staticmethod
    async def _commit(connection: AsyncConnection, statement: Any, rows: list[Any]) -> None:
        async with connection.begin():
            await connection.execute(statement, rows)

    async def _advance(self, keys: TopicKeys, seq: int) -> None:
        """Move the cursor to ``seq`` (only after the records up to it were committed)."""
        await self.queue.history.advance_archive_cursor(keys, self.name, seq)

    def _connect(self) -> _Connecting:
        return _Connecting(self)

    def _unreachable(self, exc: BaseException) -> DestinationUnreachable:
        return unreachable(self.name, exc)


def unreachable(destination: str, exc: BaseException) -> DestinationUnreachable:
    """The error for a destination that failed, naming it and the database's reason."""
    return DestinationUnreachable(f"archive destination {destination} failed: {_reason(exc)}")


class _Connecting:
    """``async with``: a connection to the destination, its failure to connect named as
    a :class:`DestinationError` rather than SQLAlchemy's traceback."""

    def __init__(self, archiver: Archiver) -> None:
        self._archiver = archiver
        self._connection: AsyncConnection | None = None

    async def __aenter__(self) -> AsyncConnection:
        try:
            self._connection = await self._archiver.engine.connect()
        except (SQLAlchemyError, OSError) as exc:
            raise unreachable(self._archiver.name, exc) from exc
        return self._connection

    async def __aexit__(self, *exc_info: object) -> None:
        if self._connection is not None:
            await self._connection.close()


def _reason(exc: BaseException) -> str:
    """The database's own message, one line (SQLAlchemy's adds the statement and every
    parameter: whole bodies)."""
    origin = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    # asyncpg keeps PostgreSQL's DETAIL (what exactly was wrong) apart from the message.
    detail = getattr(origin.__cause__, "detail", None) or getattr(origin, "detail", None)
    text = " ".join(f"{origin} ({detail})".split() if detail else str(origin).split())
    return (text[:500] + "...") if len(text) > 500 else text or type(origin).__name__
