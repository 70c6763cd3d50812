"""Copying history records from Redis into SQL tables (``pip install delayq[archive]``).

    archiver = Archiver(queue, "postgresql+asyncpg://user@db/app")   # or mysql+asyncmy://
    copied = await archiver.archive("order.close")
    # delayq archive app.tasks:queue --to postgresql+asyncpg://... [--to mysql+asyncmy://...]

Records are copied, never removed: Redis keeps its own last ``history=N`` records for the
dashboard and ``delayq history``.  Each topic (each shard of a sharded topic) keeps one
cursor per destination in Redis, the ``seq`` of the last record that destination holds;
a batch is committed, then the cursor moves.  A row's key is (queue, topic, shard, seq), so
a batch committed again after a crash between the two is absorbed by the key: no row is
lost or doubled.  Uses SQLAlchemy's async engine; PostgreSQL and MariaDB/MySQL are supported.
"""

from delayq.archive.archiver import Archiver as Archiver
from delayq.archive.errors import ArchiveError as ArchiveError
from delayq.archive.errors import ArchiveFailed as ArchiveFailed
from delayq.archive.errors import DestinationError as DestinationError
from delayq.archive.errors import DestinationUnreachable as DestinationUnreachable
from delayq.archive.errors import RecordNotArchived as RecordNotArchived
from delayq.archive.table import history_table as history_table

__all__ = [
    "ArchiveError",
    "ArchiveFailed",
    "Archiver",
    "DestinationError",
    "DestinationUnreachable",
    "RecordNotArchived",
    "history_table",
]
