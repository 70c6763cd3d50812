"""What a worker tells the queue's event listeners about its deliveries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from delayq.events import TaskEvent

if TYPE_CHECKING:
    from delayq.events import EventKind, Hooks
    from delayq.worker.lease import Delivery


NACK_EVENTS: dict[str, EventKind] = {"retry": "retried", "release": "released", "dead": "dead"}
"""The event of a nack.lua call that rescheduled the task (outcome 1), by its mode."""


def nack_event(mode: str, outcome: int) -> EventKind:
    """The event of a nack.lua call in ``mode`` that returned ``outcome``."""
    return NACK_EVENTS[mode] if outcome == 1 else "dead" if outcome == 2 else "lease_lost"


def tell(hooks: Hooks, kind: EventKind, d: Delivery, error: str = "") -> None:
    """Tell the listeners about delivery ``d``: ``delivered`` (with its lateness on Redis's
    clock: the lease's time in Redis, plus the time since on the loop's monotonic clock)
    or its outcome (with the handler's run time, when it ran)."""
    envelope = d.envelope
    if kind == "delivered":
        lateness = (d.leased_ms - envelope.due_ms) / 1000 + d.started - d.leased_at
        event = TaskEvent(kind, d.topic.name, d.task_id, envelope.attempts, lateness=lateness,
                          headers=envelope.headers)  # fmt: skip
    else:
        event = TaskEvent(kind, d.topic.name, d.task_id, envelope.attempts, duration=d.ran,
                          error=error or None)  # fmt: skip
    hooks.emit(event)


def tell_reclaimed(hooks: Hooks, topic: str, reclaimed: list[tuple[str, bool]]) -> None:
    """Tell the listeners about the expired leases a reserve reclaimed (and buried)."""
    error = "LeaseExpired: no ack within the lease"
    for task_id, dead in reclaimed:
        hooks.emit(TaskEvent("expired", topic, task_id, error=error))
        if dead:
            hooks.emit(TaskEvent("dead", topic, task_id, error=error))
