"""Send hooks and event listeners for extensions (metrics, tracing): around each send, and a
listener told what happens to tasks.

Both cost nothing when unused: with no send hook a send calls the script directly, and with
no listener the worker builds no event.  Handlers are wrapped by the queue's handler
middleware; these hooks cover what a handler's middleware cannot see: a send, the outcome
of an attempt after the handler returned (acked, retried, dead-lettered, lease lost), a
lease reclaimed after it expired, a cancel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

log = logging.getLogger("delayq")

EventKind = Literal[
    "sent", "delivered", "acked", "retried", "dead", "released", "lease_lost", "expired",
    "cancelled",
]  # fmt: skip


@dataclass(slots=True)
class TaskEvent:
    """Something that happened to a task (or, for ``sent``, to a batch of tasks).

    Every listener is given the same object: read it, never change it.  (It is not a
    frozen dataclass because the worker builds two a delivery, and a frozen one's
    construction costs three times as much.)

    Attributes:
        kind: ``sent`` (stored by a send; ``count`` tasks), ``delivered`` (a handler is about
            to start), ``acked``, ``retried``, ``dead`` (dead-lettered), ``released`` (handed
            back unrun by a stopping worker), ``lease_lost`` (the attempt's outcome was
            refused: its lease had expired), ``expired`` (a worker reclaimed a lease whose
            deadline passed: its worker died or stalled), ``cancelled``.
        topic: the task's topic.
        task_id: the task's id (for ``sent``, the first id of the call).
        attempt: the attempt the event belongs to (0 where none: sent, cancelled).
        count: tasks the event stands for (``sent`` of a batch; else 1).
        lateness: ``delivered``: seconds from the due time to the handler's start, on Redis's
            clock (the lease's time in Redis plus the time since on the worker's monotonic
            clock).
        duration: ``acked``, ``retried``, ``dead``, ``lease_lost`` after a handler ran: its
            run time in seconds.
        error: ``retried``, ``dead``, ``expired``: the error recorded with the task.
        headers: ``delivered``: the task's headers (e.g. the sender's trace context).
        due_ms: ``delivered`` and the outcome of a worker's delivery: the due time it was
            leased for, Unix ms on Redis's clock (``None`` elsewhere).
        consumer: reported by the lease-token API (``queue.consumer``, which the HTTP API
            uses), not a worker: ``delivered`` is the lease (its ``lateness`` runs from the
            due time to the lease; no handler runs in this process) and an outcome is the
            consumer's ack or nack (no ``duration``).
        latenesses: a batch ``delivered`` (only to a listener registered with
            ``batches=True``): the ``lateness`` of each of its ``count`` handler starts.
        durations: a batch ``acked`` (likewise): each handler's run time.
    """

    kind: EventKind
    topic: str
    task_id: str
    attempt: int = 0
    count: int = 1
    lateness: float | None = None
    duration: float | None = None
    error: str | None = None
    headers: Mapping[str, str] | None = None
    due_ms: int | None = None
    consumer: bool = False
    latenesses: Sequence[float] | None = None
    durations: Sequence[float] | None = None


@dataclass(slots=True)
class Sending:
    """One send call as a send hook sees it.

    Attributes:
        queue: the queue's name.
        topic: the topic.
        task_ids: the ids of the tasks (generated ones included), in send order.
        headers: headers every task of the call carries; a hook may add entries (e.g. W3C
            trace context) before calling ``call_next``.  Validated after the hooks ran.
    """

    queue: str
    topic: str
    task_ids: Sequence[str]
    headers: dict[str, str] = field(default_factory=dict)


class Hooks:
    """The hooks registered on one queue (``queue.hooks``)."""

    def __init__(self) -> None:
        self.send_hooks: list[Callable[[Sending, Callable[[], Awaitable[None]]], Awaitable[None]]]
        self.send_hooks = []
        self.listeners: list[Callable[[TaskEvent], None]] = []
        """Every registered listener, in registration order."""
        self.each: list[Callable[[TaskEvent], None]] = []
        """The listeners told about each of a worker's tasks (registered without
        ``batches``)."""
        self.batch: list[Callable[[TaskEvent], None]] = []
        """The listeners told about a worker's tasks in batches (``batches=True``)."""

    def on_send(
        self, hook: Callable[[Sending, Callable[[], Awaitable[None]]], Awaitable[None]]
    ) -> Callable[[Sending, Callable[[], Awaitable[None]]], Awaitable[None]]:
        """Register ``async def hook(sending, call_next)`` around every send call (also a
        decorator).  It must await ``call_next()`` once, which runs the later hooks and the
        send itself and raises what the send raises; the first registered runs outermost."""
        self.send_hooks.append(hook)
        return hook

    def add_listener(
        self, listener: Callable[[TaskEvent], None], *, batches: bool = False
    ) -> Callable[[TaskEvent], None]:
        """Register ``listener(event)``, called synchronously for each :class:`TaskEvent` in
        the process where it happens (also a decorator).  Keep it quick: the worker calls it
        on its hot path.  An exception it raises is logged and ignored.

        With ``batches=True`` (for counters, such as the metrics), a worker's ``delivered``
        and ``acked`` events come as one event per batch instead of one per task:
        ``count`` tasks, with their ``latenesses`` or ``durations`` (``task_id`` is the
        first one's; ``attempt`` is 0).  The handler starts of one turn of the event loop
        are told together at its end, and each ack call's acks when it returns, so a batch
        listener learns of a start a moment after the handler began (always before its
        outcome).  A worker builds no per-task event when every listener takes batches.
        Every other event comes as it does to any listener."""
        self.listeners.append(listener)
        (self.batch if batches else self.each).append(listener)
        return listener

    def remove_listener(self, listener: Callable[[TaskEvent], None]) -> None:
        """Unregister a listener (no error if it was not registered)."""
        for listeners in (self.listeners, self.each, self.batch):
            if listener in listeners:
                listeners.remove(listener)

    def emit(self, event: TaskEvent) -> None:
        """Tell every listener about ``event``."""
        self._tell(self.listeners, event)

    def emit_each(self, event: TaskEvent) -> None:
        """Tell the per-task listeners about ``event`` (of one task of a worker's)."""
        self._tell(self.each, event)

    def emit_batch(self, event: TaskEvent) -> None:
        """Tell the batch listeners about ``event`` (a batch of a worker's tasks)."""
        self._tell(self.batch, event)

    @staticmethod
    def _tell(listeners: list[Callable[[TaskEvent], None]], event: TaskEvent) -> None:
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener %r failed on %s", listener, event.kind)

    async def around_send(self, sending: Sending, send: Callable[[], Awaitable[None]]) -> None:
        """Run ``send`` inside every send hook, the first registered outermost."""

        async def step(index: int) -> None:
            if index == len(self.send_hooks):
                await send()
                return
            ran = False

            async def call_next() -> None:
                nonlocal ran
                if ran:
                    raise RuntimeError("a send hook called call_next() twice")
                ran = True
                await step(index + 1)

            await self.send_hooks[index](sending, call_next)
            if not ran:
                raise RuntimeError(f"send hook {self.send_hooks[index]!r} did not call call_next()")

        await step(0)
