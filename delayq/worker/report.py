"""What a worker tells about its deliveries, through one mechanism: the queue's event
listeners (``queue.hooks``), then the worker's own ``on_outcome`` hook, which is a thin
alias: a listener of this worker's ``acked``, ``retried`` and ``dead`` events, given each
as an :class:`~delayq.task.Outcome`.  And what it tells only its log: the entries a
reserve could not lease (:func:`log_skipped`)."""

from __future__ import annotations

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

    Args:
        hooks: the queue's hooks (its listeners may change while the worker runs).
        on_outcome: the worker's ``on_outcome`` hook, if any.
    """

    def __init__(self, hooks: Hooks, on_outcome: Callable[[Outcome], None] | None = None) -> None:
        self.hooks = hooks
        self.own = Hooks()
        if on_outcome is not None:
            self.own.add_listener(OutcomeHook(on_outcome))

    @property
    def listening(self) -> bool:
        """Whether anyone listens (with no listener, no event is built)."""
        return bool(self.hooks.listeners or self.own.listeners)

    def tell(self, kind: EventKind, d: Delivery, error: str = "") -> None:
        """Tell the listeners about delivery ``d``: ``delivered`` (with its lateness on
        Redis's clock: the lease's time in Redis, plus the time since on the loop's
        monotonic clock) or its outcome (with the handler's run time, when it ran)."""
        envelope = d.envelope
        if kind == "delivered":
            lateness = (d.leased_ms - envelope.due_ms) / 1000 + d.started - d.leased_at
            event = TaskEvent(kind, d.topic.name, d.task_id, envelope.attempts,
                              lateness=lateness, headers=envelope.headers,
                              due_ms=envelope.due_ms)  # fmt: skip
        else:
            event = TaskEvent(kind, d.topic.name, d.task_id, envelope.attempts, duration=d.ran,
                              error=error or None, due_ms=envelope.due_ms)  # fmt: skip
        self.hooks.emit(event)
        if self.own.listeners:
            self.own.emit(event)


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
