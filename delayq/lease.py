"""What a worker holds: leased deliveries, the slots that bound them, and their deadlines."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delayq.keys import TopicKeys
    from delayq.task import Envelope
    from delayq.topic import Topic

LEASE_MARGIN = 0.05
"""Fraction of the TTR by which a handler's timeout precedes the lease's end in Redis."""
MAX_LEASE_MARGIN_MS = 250


def local_deadline(started: float, lease_ms: int) -> float:
    """Loop time at which a handler is cancelled, for a lease of ``lease_ms`` requested at
    loop time ``started``: a little before Redis ends the lease, so that the failure is
    recorded (with backoff) before another worker's reserve can reclaim the task."""
    margin_ms = min(lease_ms * LEASE_MARGIN, MAX_LEASE_MARGIN_MS)
    return started + (lease_ms - margin_ms) / 1000


@dataclass(slots=True, eq=False)
class Delivery:
    """A leased task held by this worker."""

    topic: Topic[Any]
    keys: TopicKeys
    task_id: str
    envelope: Envelope
    deadline: float  # loop time at which the lease (and the handler's TTR) runs out
    scope: asyncio.Timeout | None = field(default=None)


class Slots:
    """Counts free handler slots; a fetch loop takes as many as it can lease at once."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._changed = asyncio.Event()

    async def take(self, most: int, stopping: asyncio.Event) -> int:
        """Wait for at least one free slot and take up to ``most``; 0 when stopping."""
        while self.free == 0 and not stopping.is_set():
            self._changed.clear()
            await self._changed.wait()
        if stopping.is_set():
            return 0
        taken = min(self.free, most)
        self.free -= taken
        return taken

    def give(self, count: int) -> None:
        """Return ``count`` slots."""
        if count:
            self.free += count
            self._changed.set()

    def wake(self) -> None:
        """Wake waiters without freeing anything (used to stop)."""
        self._changed.set()
