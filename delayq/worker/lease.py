"""What a worker holds: leased deliveries, the slots that bound them, and their deadlines."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delayq.redis.keys import TopicKeys
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


def ttr_exceeded(d: Delivery) -> str:
    """Why ``d``'s handler was cancelled at its deadline (the cancel's message)."""
    return f"TTR exceeded: {d.topic.name}/{d.task_id} ran past its TTR of {d.ttr:g}s"


def aborted(d: Delivery) -> str:
    """Why ``d``'s handler was cancelled by an abort (the cancel's message)."""
    return f"Aborted: {d.topic.name}/{d.task_id} was cancelled while running"


@dataclass(slots=True, eq=False)
class Delivery:
    """A leased task held by this worker."""

    topic: Topic[Any]
    keys: TopicKeys
    task_id: str
    envelope: Envelope
    deadline: float  # loop time at which the lease (and the handler's TTR) runs out
    leased_ms: float = 0.0  # Redis's clock (ms) when reserve.lua leased it...
    leased_at: float = 0.0  # ...and the loop time its reply arrived: Redis time since = delta
    started: float = 0.0  # loop time the handler started (0: never)
    ran: float | None = None  # the handler's run time in seconds, once it returned or raised
    result: bytes = b""  # what its ack stores as the result (results= topics; acker.py)

    # Kept by Deadlines:
    expired: bool = False  # the deadline passed before the delivery was done
    aborted: bool = False  # cancelled while leased (Queue.cancel(running=True)): never ends
    runner: asyncio.Task[Any] | None = field(default=None)  # the task running its handler
    cancels_before: int = 0  # runner.cancelling() when the handler started
    cancels: int = 0  # cancels of the runner sent by its deadline and an abort

    @property
    def ttr(self) -> float:
        """The lease's length in seconds: the task's own TTR, else its topic's."""
        return (self.envelope.ttr_ms or self.topic.options.ttr_ms) / 1000

    def times(self) -> str:
        """``"started,ended"``: the handler's run in Redis ms, for history (the lease's time
        in Redis plus the loop's time since); ``","`` when it never started."""
        if not self.started:
            return ","
        started = self.leased_ms + (self.started - self.leased_at) * 1000
        # round() and integers: a float's "{:.0f}" costs twice as much (a task's ack).
        return f"{round(started)},{round(started + (self.ran or 0.0) * 1000)}"


class Deadlines:
    """Cancels a handler when its delivery's deadline passes, as ``asyncio.timeout_at``
    would, with one loop timer per distinct deadline instead of one per handler.

    The deliveries of one reserve call share a deadline, so a batch costs one timer, set
    when the batch is accepted and cancelled when its last handler is done.  A ``Timeout``
    per handler (an object, a timer and two task lookups each) took 13% of a worker's
    busy time in a profile of a drain.  The cancel rules are ``Timeout``'s: the deadline
    cancels the handler's task once, and :meth:`done` takes that cancel back and says
    whether it was the cause, so a cancel from outside still propagates.
    """

    def __init__(self) -> None:
        self._timers: dict[float, tuple[asyncio.TimerHandle, set[Delivery]]] = {}

    def add(self, d: Delivery) -> None:
        """Start ``d``'s deadline (it was just leased)."""
        timer = self._timers.get(d.deadline)
        if timer is None:
            handle = asyncio.get_running_loop().call_at(d.deadline, self._expire, d.deadline)
            timer = self._timers[d.deadline] = (handle, set())
        timer[1].add(d)

    def watch(self, d: Delivery, runner: asyncio.Task[Any]) -> None:
        """``runner``, the current task, starts ``d``'s handler: cancel it at the deadline.
        (A delivery whose deadline has passed must not start; see ``expired``.)"""
        d.runner, d.cancels_before = runner, runner.cancelling()

    def done(self, d: Delivery) -> bool:
        """``d`` is done (its handler returned or raised, or it will not run); idempotent.

        Returns True when its deadline or an abort (:meth:`abort`) cancelled the handler
        and nothing else cancelled the task since :meth:`watch`: the handler's
        ``CancelledError`` is then a timeout, or the abort."""
        runner, d.runner = d.runner, None
        if not d.expired:
            self._remove(d)
        if not d.cancels or runner is None:
            return False
        left = d.cancels_before
        for _ in range(d.cancels):
            left = runner.uncancel()
        d.cancels = 0
        return left <= d.cancels_before

    def abort(self, d: Delivery) -> None:
        """``d``'s task was cancelled while leased: cancel its handler if it runs (once),
        and mark it so that it never starts or ends as an attempt."""
        if d.aborted:
            return
        d.aborted = True
        if d.runner is not None and d.runner.cancel(msg=aborted(d)):
            d.cancels += 1

    def extend(self, d: Delivery, deadline: float) -> None:
        """Move the deadline of ``d``, whose handler is running, later (its lease was
        extended)."""
        if d.runner is not None and not d.expired and deadline > d.deadline:
            self._remove(d)
            d.deadline = deadline
            self.add(d)

    def clear(self) -> None:
        """Cancel every timer (the worker stopped)."""
        for handle, _ in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def _remove(self, d: Delivery) -> None:
        timer = self._timers.get(d.deadline)
        if timer is not None:
            handle, pending = timer
            pending.discard(d)
            if not pending:
                handle.cancel()
                del self._timers[d.deadline]

    def _expire(self, deadline: float) -> None:
        _, pending = self._timers.pop(deadline)
        for d in pending:
            d.expired = True
            # The message tells middleware that sees the CancelledError why: a stop's
            # cancel carries none.
            if d.runner is not None and d.runner.cancel(msg=ttr_exceeded(d)):
                d.cancels += 1


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
