"""The archive's errors: what a destination refused, and which record it could not store.

DelayqError
 └── ArchiveError            the archive cannot go on as asked
      ├── DestinationError   the table's layout is refused (or the database unsupported)
      │    └── DestinationUnreachable   the database cannot be reached or failed
      ├── RecordNotArchived  one record cannot be stored (its topic waits behind it)
      └── ArchiveFailed      a round ended with records not archived (every other topic done)
"""

from __future__ import annotations

from delayq.errors import DelayqError


class ArchiveError(DelayqError):
    """Raised when the archive cannot go on as asked."""


class DestinationError(ArchiveError):
    """Raised when the destination database cannot be reached, or its table has a layout
    the archiver does not write (with how to migrate it)."""


class DestinationUnreachable(DestinationError):
    """Raised when the destination database cannot be reached, or fails (not for one
    record); ``delayq archive --every`` tries again next round."""


class RecordNotArchived(ArchiveError):
    """Raised when a destination refuses one record: the records before it are stored and
    its topic's cursor is just before it, so it is tried again on the next run.

    Attributes:
        topic: the record's topic.
        shard: the shard whose history holds it (0 for an unsharded topic).
        seq: the record's number.
        reason: what the database answered.
        copied: records of the topic copied before it stopped, in this call.
    """

    def __init__(self, topic: str, shard: int, seq: int, reason: str) -> None:
        where = f"topic {topic!r}" + (f" shard {shard}" if shard else "")
        super().__init__(f"{where}: history record seq {seq} cannot be archived: {reason}")
        self.topic, self.shard, self.seq, self.reason = topic, shard, seq, reason
        self.copied = 0


class ArchiveFailed(ArchiveError):
    """Raised by :meth:`Archiver.archive_all` after every topic was tried, when records of
    some could not be stored.

    Attributes:
        copied: records copied per topic in this round.
        failures: one :class:`RecordNotArchived` per topic left behind.
    """

    def __init__(self, copied: dict[str, int], failures: list[RecordNotArchived]) -> None:
        super().__init__("; ".join(str(f) for f in failures))
        self.copied, self.failures = copied, failures
