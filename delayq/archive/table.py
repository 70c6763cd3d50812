"""The archive's table: its columns on each database, its rows, and the 0.1 layout's migration."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
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
)
from sqlalchemy.dialects import mysql, postgresql

from delayq.archive.errors import DestinationError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Dialect

    from delayq.history import HistoryRecord

DEFAULT_TABLE = "delayq_history"
SUPPORTED = ("postgresql", "mysql", "mariadb")

# jsonb on PostgreSQL; JSON on MySQL, which MariaDB stores as LONGTEXT checked by
# json_valid: either holds any body within a queue's body limit.
_DOCUMENT = JSON().with_variant(postgresql.JSONB(), "postgresql")
# timestamptz keeps microseconds; MySQL's DATETIME keeps whole seconds unless told (6).
_STAMP = DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
_LONG_TEXT = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def history_table(name: str = DEFAULT_TABLE, metadata: MetaData | None = None) -> Table:
    """The archive's table: one row per record, keyed by (queue, topic, shard, seq), with
    an index on ``task_id``."""
    return Table(
        name, metadata or MetaData(),
        Column("queue", String(200), primary_key=True),
        Column("topic", String(200), primary_key=True),
        Column("shard", Integer, primary_key=True, autoincrement=False),
        Column("seq", BigInteger, primary_key=True, autoincrement=False),
        Column("task_id", String(256), nullable=False, index=True),
        Column("outcome", String(16), nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("error", _LONG_TEXT),
        Column("body", _DOCUMENT, nullable=False),
        Column("headers", _DOCUMENT, nullable=False),
        Column("enqueued_at", _STAMP, nullable=False),
        Column("due_at", _STAMP, nullable=False),
        Column("started_at", _STAMP),
        Column("finished_at", _STAMP, nullable=False),
        Column("lateness_ms", Float),
        mysql_charset="utf8mb4",
    )  # fmt: skip


def row(queue: str, shard: int, record: HistoryRecord, naive_utc: bool) -> dict[str, Any]:
    """The table's row for ``record``; ``naive_utc``: times as UTC without a zone (MySQL)."""

    def stamp(value: datetime | None) -> datetime | None:
        if value is None or not naive_utc:
            return value
        return value.astimezone(UTC).replace(tzinfo=None)

    return {
        "queue": queue, "topic": record.topic, "shard": shard, "seq": record.seq,
        "task_id": record.id, "outcome": record.outcome, "attempts": record.attempts,
        "error": record.error, "body": record.body, "headers": record.headers,
        "enqueued_at": stamp(record.enqueued_at), "due_at": stamp(record.due_at),
        "started_at": stamp(record.started_at), "finished_at": stamp(record.finished_at),
        "lateness_ms": None if record.lateness is None else record.lateness * 1000,
    }  # fmt: skip


def insert_ignoring_duplicates(table: Table, dialect: Dialect) -> Any:
    """An INSERT that leaves a row whose key is already there as it is."""
    if dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(
            index_elements=["queue", "topic", "shard", "seq"]
        )
    statement = mysql.insert(table)
    return statement.on_duplicate_key_update(seq=statement.inserted.seq)


def prepare(connection: Connection, table: Table, migrate: bool) -> None:
    """Create the table if missing; migrate delayq 0.1's layout when ``migrate``, else
    refuse it naming the statements that would.

    Raises:
        DestinationError: an unsupported database, or a 0.1 table and not ``migrate``.
    """
    dialect = connection.dialect
    if dialect.name not in SUPPORTED:
        raise DestinationError(
            f"archiving to {dialect.name!r} is not supported (PostgreSQL, MySQL, MariaDB)"
        )
    inspector = inspect(connection)
    if not inspector.has_table(table.name):
        table.metadata.create_all(connection)
        return
    columns = {c["name"] for c in inspector.get_columns(table.name)}
    if "shard" in columns:
        return
    statements = migration(connection, table.name)
    if not migrate:
        listed = "; ".join(statements)
        raise DestinationError(
            f"table {table.name!r} has delayq 0.1's layout (TEXT bodies, no shard column, "
            f"no index on task_id): run `delayq archive ... --migrate` (Archiver(..., "
            f"migrate=True)) once to migrate it, or run these statements yourself: {listed}"
        )
    for statement in statements:
        connection.exec_driver_sql(statement)


def migration(connection: Connection, name: str) -> list[str]:
    """The statements that turn a 0.1 table into the current layout (rows kept)."""
    quote = connection.dialect.identifier_preparer.quote
    table, index = quote(name), quote(f"ix_{name}_task_id")
    key = "PRIMARY KEY (queue, topic, shard, seq)"
    if connection.dialect.name == "postgresql":
        constraint = inspect(connection).get_pk_constraint(name)["name"] or f"{name}_pkey"
        return [
            f"ALTER TABLE {table} ADD COLUMN shard INTEGER NOT NULL DEFAULT 0, "
            "ALTER COLUMN body TYPE JSONB USING body::jsonb, "
            "ALTER COLUMN headers TYPE JSONB USING headers::jsonb, "
            f"DROP CONSTRAINT {quote(constraint)}, ADD {key}",
            f"CREATE INDEX {index} ON {table} (task_id)",
        ]
    stamps = ", ".join(
        f"MODIFY {c} DATETIME(6){'' if c == 'started_at' else ' NOT NULL'}"
        for c in ("enqueued_at", "due_at", "started_at", "finished_at")
    )
    return [
        f"ALTER TABLE {table} ADD COLUMN shard INTEGER NOT NULL DEFAULT 0 AFTER topic, "
        f"MODIFY body JSON NOT NULL, MODIFY headers JSON NOT NULL, MODIFY error LONGTEXT, "
        f"{stamps}, DROP PRIMARY KEY, ADD {key}, ADD INDEX {index} (task_id)"
    ]
