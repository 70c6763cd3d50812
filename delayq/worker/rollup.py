"""Rolling activity of topics that keep history: throughput and lateness per 10 s window.

A worker counts what its handlers did (acked, retried, dead-lettered; each start's lateness
in buckets) in memory, as an event listener, and adds its counts to the topic's ring of
windows in Redis every :data:`FLUSH_EVERY` seconds (``rollup.lua``: one call per topic with
counts, whatever the number of tasks).  Windows are Redis's 10 s (its clock picks the
window when the counts arrive), so counts of many workers add up; an hour is kept.
``Queue.history.activity`` reads them back.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from typing import TYPE_CHECKING

from delayq.cancellation import raise_if_cancelling
from delayq.errors import DelayqError
from delayq.redis.translate import redis_errors

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from redis.asyncio import Redis

    from delayq.events import TaskEvent
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.topic import Topic, TopicOptions
    from delayq.worker.source import TaskSource

log = logging.getLogger("delayq.worker")

FLUSH_EVERY = 2.0
"""Seconds between a worker's additions to the rolling windows (at most this late)."""
LATENESS_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)
"""Upper bounds of the lateness buckets ``l0``..``l14``; ``l15`` is everything later."""
BUCKETS = tuple(f"l{b}" for b in range(len(LATENESS_BOUNDS_MS) + 1))
"""The lateness buckets' fields, by index."""
FIELDS = ("acked", "retried", "dead", "late_n", "late_ms", *BUCKETS)
"""Every field of a window (``rollup.lua`` clears a window by these names)."""
COUNTED = frozenset(("acked", "retried", "dead"))
"""The events counted under their own name."""


async def prepare(queue: TaskSource, topics: Sequence[Topic[Any]]) -> Rollup | None:
    """At a worker's start: record its topics (for stats) and their settings (history for
    cancels from any process, the TTR and attempt limit for lookups); with history, return
    the activity counter, registered as an event listener on the queue."""
    try:
        await queue.announce(t.name for t in topics)
        options = {k: t.options for t in topics for k in queue.shard_keys(t.name)}
        await record_settings(queue.redis, options)
    except DelayqError as exc:
        # Both feed reads and cancels elsewhere; consuming must not depend on them.
        log.warning("could not record topics and their settings: %s", exc)
    kept = {t.name: queue.keys(t.name) for t in topics if t.options.history}
    if not kept:
        return None
    rollup = Rollup(queue.scripts, kept)
    queue.hooks.add_listener(rollup, batches=True)
    return rollup


async def record_settings(redis: Redis, options: Mapping[TopicKeys, TopicOptions]) -> None:
    """Store each topic's settings where any process finds them, in ``<prefix>meta``:
    ``history`` and ``results`` (ms; absent: none) for scripts (a cancel from the CLI), and ``ttr_ms`` and
    ``max_attempts`` for lookups from a process that did not register the topic."""
    async with redis_errors(), redis.pipeline(transaction=False) as pipe:
        for keys, o in options.items():
            pipe.hset(keys.meta, mapping={"ttr_ms": o.ttr_ms, "max_attempts": o.max_attempts})
            for name, value in (("history", o.history), ("results", o.results_ms)):
                if value:
                    pipe.hset(keys.meta, name, value)
                else:
                    pipe.hdel(keys.meta, name)
        await pipe.execute()


class Rollup:
    """Counts the events of the topics that keep history; :meth:`run` adds them to Redis.

    Args:
        scripts: runs rollup.lua.
        topics: the keys of the topics to count, by name.
    """

    def __init__(self, scripts: Scripts, topics: Mapping[str, TopicKeys]) -> None:
        self._scripts = scripts
        self._topics = dict(topics)
        # Per topic, every field's count since the last flush (the event listener's hot path:
        # a plain dict with every key present costs less than a Counter).
        self._counts: dict[str, dict[str, int]] = {}

    def __call__(self, event: TaskEvent) -> None:
        """The event listener: count ``event`` if its topic keeps history."""
        counts = self._counts.get(event.topic)
        if counts is None:
            if event.topic not in self._topics:
                return
            counts = self._counts[event.topic] = dict.fromkeys(FIELDS, 0)
        kind = event.kind
        if kind == "delivered":
            if event.latenesses:  # a worker's batch
                late = sorted(s * 1000 if s > 0 else 0.0 for s in event.latenesses)
                below = 0
                for field, bound in zip(BUCKETS, LATENESS_BOUNDS_MS, strict=False):
                    upto = bisect.bisect_right(late, bound, below)
                    counts[field] += upto - below
                    below = upto
                counts[BUCKETS[-1]] += len(late) - below
                counts["late_n"] += len(late)
                counts["late_ms"] += sum(map(round, late))
            elif event.lateness is not None:
                late_ms = event.lateness * 1000 if event.lateness > 0 else 0.0
                counts[BUCKETS[bisect.bisect_left(LATENESS_BOUNDS_MS, late_ms)]] += 1
                counts["late_n"] += 1
                counts["late_ms"] += round(late_ms)
        elif kind in COUNTED:
            counts[kind] += event.count

    async def run(self, stopping: asyncio.Event) -> None:
        """Flush every :data:`FLUSH_EVERY` seconds until ``stopping`` is set, then once more."""
        while not stopping.is_set():
            raise_if_cancelling()
            try:
                async with asyncio.timeout(FLUSH_EVERY):
                    await stopping.wait()
            except TimeoutError:
                pass
            await self.flush()
        await self.flush()

    async def flush(self) -> None:
        """Add the counts so far to the topics' windows (lost, with a warning, if Redis
        refuses: they are statistics, not tasks)."""
        counts, self._counts = self._counts, {}
        for topic, counted in counts.items():
            args = [part for field, n in counted.items() if n for part in (field, n)]
            if not args:
                continue
            try:
                await self._scripts.rollup(self._topics[topic], args)
            except DelayqError as exc:
                log.warning("could not add the activity of topic %r: %s", topic, exc)
