"""Taking a periodic chain back from a schedule no live worker runs any more.

During a deploy a periodic topic's chain belongs to the schedule of the most recently
started worker (:mod:`delayq.worker.periodic`).  When the rollout fails and those workers
die, the chain would wait for them forever.  Every heartbeat records, per periodic schedule
a worker runs, when a live worker last ran it (``heartbeat.lua``); a keeper whose own
schedule is not the chain's asks :class:`Takeover` whether the chain's schedule has gone
unrun for more than two of its runners' heartbeat intervals, and if so claims the chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delayq.redis.registry import schedule_field

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.topic import Topic
    from delayq.worker.heartbeat import Heartbeat

STALE_INTERVALS = 2
"""Intervals without a live runner after which a chain's schedule counts as abandoned."""
SETTLED_INTERVALS = 1.5
"""Intervals this process's heartbeat must have succeeded in a row before it judges: after a
Redis outage every live worker's next beat lands within one, so none looks abandoned."""


def run_schedules(topics: Iterable[Topic[Any]]) -> list[tuple[str, str]]:
    """(schedule field, description) of each periodic topic of ``topics``."""
    return [
        (schedule_field(t.name, p.schedule.fingerprint), p.schedule.description)
        for t in topics
        if (p := t.options.periodic) is not None
    ]


class Takeover:
    """Judges, for one periodic topic, whether the chain's current schedule is abandoned.

    Args:
        heartbeat: this worker's heartbeat (its registry, interval and health).
        topic: the periodic topic.
    """

    def __init__(self, heartbeat: Heartbeat, topic: str) -> None:
        self._heartbeat = heartbeat
        self._topic = topic

    @property
    def recheck(self) -> float:
        """How long a keeper standing aside waits before asking again (a quarter interval,
        so that ticks resume well within 3 intervals of the last beat of the chain's runner)."""
        return self._heartbeat.interval / 4

    async def abandoned(self, owner: str) -> str | None:
        """The description of the chain's schedule (fingerprint ``owner``) when no live
        worker ran it for more than :data:`STALE_INTERVALS` of its runners' intervals, so
        that this worker should take the chain over; None while it is run."""
        beat = self._heartbeat
        field = schedule_field(self._topic, owner)
        now, _counts, (seen,) = await beat.registry.consumers((), (field,))
        interval_ms = seen.interval_ms if seen.interval_ms > 0 else round(beat.interval * 1000)
        if beat.healthy_for() * 1000 < SETTLED_INTERVALS * interval_ms:
            return None
        if seen.seen_ms >= 0 and now - seen.seen_ms <= STALE_INTERVALS * interval_ms:
            return None
        return seen.description or f"the schedule with fingerprint {owner}"
