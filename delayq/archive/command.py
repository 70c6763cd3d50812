"""``delayq archive``: copy history into one or more databases, once or every N seconds."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from delayq.archive.archiver import Archiver
from delayq.archive.errors import ArchiveFailed, DestinationUnreachable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from delayq.queue import Queue

log = logging.getLogger("delayq.archive")


async def archive_command(
    queue: Queue,
    urls: Sequence[str],
    *,
    table: str,
    batch: int,
    migrate: bool,
    topics: list[str] | None,
    every: float | None,
) -> int:
    """Archive every topic (or ``topics``) to each of ``urls``, once or every ``every``
    seconds; returns the exit status: 2 if a record was refused in a single run.

    A refused record is printed (``delayq: ...``) or, with ``every``, logged: its topic
    waits behind it, every other topic and destination goes on.  An unreachable database
    ends a single run (its message, exit 2); with ``every`` it is logged and tried again.
    """
    archivers = [Archiver(queue, url, table=table, batch=batch, migrate=migrate) for url in urls]
    try:
        while True:
            code = 0
            for archiver in archivers:  # one destination's trouble never holds up another's
                if await _round(archiver, topics, report=every is None):
                    code = 2
            sys.stdout.flush()
            if every is None:
                return code
            await asyncio.sleep(every)
    finally:
        for archiver in archivers:
            await archiver.close()


async def _round(archiver: Archiver, topics: list[str] | None, *, report: bool) -> bool:
    """One round to one destination; returns whether a record was refused.  ``report``:
    print refusals for the user and let an unreachable database end the command."""
    refused = False
    try:
        copied = await archiver.archive_all(topics)
    except ArchiveFailed as exc:
        copied, refused = exc.copied, True
        for failure in exc.failures:
            if report:
                print(f"delayq: {failure} (to {archiver.name})", file=sys.stderr)
            else:
                log.error("%s (to %s)", failure, archiver.name)
    except DestinationUnreachable as exc:
        if report:
            raise
        log.error("%s", exc)
        return False
    for topic, count in copied.items():
        if count:
            print(f"archived {count} record(s) of {topic} to {archiver.name}")
    return refused
