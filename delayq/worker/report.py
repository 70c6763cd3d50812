"""What a worker tells about its deliveries, through one mechanism: the queue's event
listeners (``queue.hooks``), then the worker's own ``on_outcome`` hook, which is a thin
alias: a listener of this worker's ``acked``, ``retried`` and ``dead`` events, given each
as an :class:`~delayq.task.Outcome`.  And what it tells only its log: the entries a
reserve could not lease (:func:`log_skipped`)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from delayq.events import Hooks, TaskEvent
from delayq.task import Outcome, from_millis

if TYPE_CHECKING:
    from collections.abc import Callable

    from delayq.events import EventKind
    from delayq.task import OutcomeKind
    from delayq.worker.lease import Delivery

log = logging.getLogger("delayq.worker")

MAX_LOGGED_IDS = 10
SKIP_REASONS = {
    "missing": "dropped: scheduled or leased, but the stored task is missing (a send whose "
    "HSET failed, e.g. denied by an ACL, or a field deleted by hand); nothing to run",
    "corrupt": "dead-lettered as CorruptTask: the stored envelope is unreadable",
}
"""What reserve.lua reports for entries it could not lease, as the worker logs them."""


NACK_EVENTS: dict[str, EventKind] = {"retry": "retried", "release": "released", "dead": "dead"}
"""The event of a nack.lua call that rescheduled the task (outcome 1), by its mode."""
OUTCOMES: dict[str, OutcomeKind] = {"acked": "acked", "retried": "retried", "dead": "dead"}
"""The events ``on_outcome`` is told about, as outcomes."""


def nack_event(mode: str, outcome: int) -> EventKind:
    """The event of a nack.lua call in ``mode`` that returned ``outcome``."""
    return NACK_EVENTS[mode] if outcome == 1 else "dead" if outcome == 2 else "lease_lost"


class OutcomeHook:
    """``Worker(on_outcome=...)`` as an event listener: the acked, retried and dead events
    of the worker's deliveries, each as an :class:`Outcome`."""

    def __init__(self, on_outcome: Callable[[Outcome], None]) -> None:
        self.on_outcome = on_outcome

    def __call__(self, event: TaskEvent) -> None:
        outcome = OUTCOMES.get(event.kind)
        if outcome is not None and event.due_ms is not None:
            due_at = from_millis(event.due_ms)
            self.on_outcome(
                Outcome(event.topic, event.task_id, event.attempt, outcome, event.error, due_at)
            )


class Reporter:
    """Tells a worker's events to the queue's listeners, then to the worker's own.

    A per-task listener hears of each task; a batch listener (``batches=True``) hears of
    the handler starts of a turn of the event loop at its end, and of an ack call's acks
    at once, as one event each: a few list appends a task instead of two events.

    Args:
        hooks: the queue's hooks (its listeners may change while the worker runs).
        on_outcome: the worker's ``on_outcome`` hook, if any.
    """

    def __init__(self, hooks: Hooks, on_outcome: Callable[[Outcome], None] | None = None) -> None:
        self.hooks = hooks
        self.own = Hooks()
        if on_outcome is not None:
            self.own.add_listener(OutcomeHook(on_outcome))
        # The deliveries whose start the batch listeners were not told yet.
        self._started: list[Delivery] = []

    @property
    def listening(self) -> bool:
        """Whether anyone listens (with no listener, no event is built)."""
        return bool(self.hooks.listeners or self.own.listeners)

    def started(self, d: Delivery) -> None:
        """``d``'s handler is about to start: its ``delivered`` event, with its lateness on
        Redis's clock (the lease's time in Redis, plus the time since on the loop's
        monotonic clock)."""
        if self.hooks.each or self.own.listeners:
            envelope = d.envelope
            lateness = (d.leased_ms - envelope.due_ms) / 1000 + d.started - d.leased_at
            event = TaskEvent("delivered", d.topic.name, d.task_id, envelope.attempts,
                              lateness=lateness, headers=envelope.headers,
                              due_ms=envelope.due_ms)  # fmt: skip
            self.hooks.emit_each(event)
            if self.own.listeners:
                self.own.emit(event)
        if self.hooks.batch:
            if not self._started:
                asyncio.get_running_loop().call_soon(self.flush_started)
            self._started.append(d)

    def flush_started(self) -> None:
        """Tell the batch listeners about the handler starts not told yet: one event per
        topic, the latenesses computed here, in one pass rather than one call a task."""
        started, self._started = self._started, []
        if not started:
            return
        topic = started[0].topic.name
        if any(d.topic.name != topic for d in started):
            by_topic: dict[str, list[Delivery]] = {}
            for d in started:
                by_topic.setdefault(d.topic.name, []).append(d)
        else:
            by_topic = {topic: started}
        for name, deliveries in by_topic.items():
            latenesses = [
                (d.leased_ms - d.envelope.due_ms) / 1000 + d.started - d.leased_at
                for d in deliveries
            ]
            self.hooks.emit_batch(TaskEvent("delivered", name, deliveries[0].task_id,
                                            count=len(latenesses),
                                            latenesses=latenesses))  # fmt: skip

    def acked(self, deliveries: list[Delivery], refused: set[int]) -> None:
        """Tell the listeners about the outcomes of one ack call: ``acked`` for each
        delivery whose ``id()`` is not in ``refused``, ``lease_lost`` for the others."""
        each = self.hooks.each or self.own.listeners
        batch = self.hooks.batch
        if batch:
            self.flush_started()
            if not each and not refused:  # the usual case, in a comprehension
                self.hooks.emit_batch(TaskEvent(
                    "acked", deliveries[0].topic.name, deliveries[0].task_id,
                    count=len(deliveries),
                    durations=[d.ran for d in deliveries if d.ran is not None],
                ))  # fmt: skip
                return
        durations: list[float] = []
        first = None
        count = 0
        for d in deliveries:
            if refused and id(d) in refused:
                self.tell("lease_lost", d)
                continue
            if each:
                self._tell_each("acked", d)
            if batch:
                count += 1
                first = first or d.task_id
                if d.ran is not None:
                    durations.append(d.ran)
        if batch and first is not None:
            self.hooks.emit_batch(TaskEvent("acked", deliveries[0].topic.name, first,
                                            count=count, durations=durations))  # fmt: skip

    def tell(self, kind: EventKind, d: Delivery, error: str = "") -> None:
        """Tell every listener about an outcome of delivery ``d`` (with the handler's run
        time, when it ran) other than an ack."""
        if self.hooks.batch:
            self.flush_started()  # its start first
        event = self._event(kind, d, error)
        self.hooks.emit(event)
        if self.own.listeners:
            self.own.emit(event)

    def _tell_each(self, kind: EventKind, d: Delivery) -> None:
        event = self._event(kind, d, "")
        self.hooks.emit_each(event)
        if self.own.listeners:
            self.own.emit(event)

    @staticmethod
    def _event(kind: EventKind, d: Delivery, error: str) -> TaskEvent:
        envelope = d.envelope
        return TaskEvent(kind, d.topic.name, d.task_id, envelope.attempts, duration=d.ran,
                         error=error or None, due_ms=envelope.due_ms)  # fmt: skip


def tell_reclaimed(hooks: Hooks, topic: str, reclaimed: list[tuple[str, bool]]) -> None:
    """Tell the listeners about the expired leases a reserve reclaimed (and buried)."""
    error = "LeaseExpired: no ack within the lease"
    for task_id, dead in reclaimed:
        hooks.emit(TaskEvent("expired", topic, task_id, error=error))
        if dead:
            hooks.emit(TaskEvent("dead", topic, task_id, error=error))


def log_skipped(topic: str, skipped: list[tuple[str, str]]) -> None:
    """Warn about the entries a reserve dropped or buried, naming at most
    :data:`MAX_LOGGED_IDS` ids per reason: they never reach a handler."""
    for reason, what in SKIP_REASONS.items():
        ids = [task_id for task_id, why in skipped if why == reason]
        if ids:
            shown = ", ".join(map(repr, ids[:MAX_LOGGED_IDS]))
            more = f" and {len(ids) - MAX_LOGGED_IDS} more" if len(ids) > MAX_LOGGED_IDS else ""
            log.warning("topic %r: %d task(s) %s: %s%s", topic, len(ids), what, shown, more)
