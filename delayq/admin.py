"""An operator's actions on a topic as a whole, as ``queue.admin``: what its workers hold
now, every dead letter at once, and forgetting a topic that holds nothing."""

from __future__ import annotations

import asyncio
import heapq
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from delayq.bounds import bounded_int
from delayq.duration import Duration, to_millis
from delayq.redis.keys import check_topic, topics_key
from delayq.redis.translate import redis_errors
from delayq.task import TaskInfo, from_millis, stored_task_info

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis

    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.topic import TopicOptions


DEAD_BATCH = 500
"""Dead letters one script call replays or deletes: a call stays well under a millisecond
of Redis's time, so a topic of a million letters never blocks other clients for long."""


async def dead_bulk(
    scripts: Scripts,
    shards: ShardMap,
    topic: str,
    mode: Literal["replay", "delete"],
    history: int = 0,
) -> int:
    """Replay or delete every dead letter of ``topic``, :data:`DEAD_BATCH` per script call
    (see :meth:`Admin.replay_dead`). Returns how many."""
    done = 0
    for keys in await shards.every(topic):
        while True:
            count = await scripts.dead_bulk(keys, mode, DEAD_BATCH, history)
            if not count:
                break
            done += count
    return done


async def forget(
    redis: Redis,
    scripts: Scripts,
    shards: ShardMap,
    queue_name: str,
    topic: str,
    idle_ms: int | None = None,
) -> bool:
    """Clean ``topic``'s stored state and drop it from the topic set if it holds no task
    (see :meth:`Admin.forget`). Returns whether it was forgotten."""
    every = await shards.every(topic)
    # Every shard must agree first: a sweep's call only deletes a shard seen idle that long.
    for keys in every:
        if not await scripts.forget(keys, idle_ms):
            return False
    async with redis_errors():
        await redis.srem(topics_key(queue_name), topic)
    return True


class RunningPage(BaseModel):
    """A page of a topic's leased tasks (:meth:`Admin.running`)."""

    now: datetime
    """Redis's time when read: a lease whose deadline is before it has expired, and the
    next lease of its topic reclaims the task (runs it again, or dead-letters it)."""
    total: int
    """Leases the topic holds."""
    tasks: list[TaskInfo]
    """Soonest lease deadline first, each with its ``lease_deadline``."""


async def leased(
    scripts: Scripts, shards: ShardMap, topic: str, limit: int, offset: int
) -> RunningPage:
    """A page of ``topic``'s leased tasks (see :meth:`Admin.running`)."""
    bounded_int(limit, "limit", 1, 500)
    bounded_int(offset, "offset", 0)
    every = await shards.every(topic)
    if len(every) == 1:
        now, total, rows = await scripts.running(every[0], offset=offset, limit=limit)
    else:
        pages = await asyncio.gather(*(
            scripts.running(k, offset=0, limit=offset + limit) for k in every
        ))  # fmt: skip
        now, total = max(p[0] for p in pages), sum(p[1] for p in pages)
        merged = heapq.merge(*(page[2] for page in pages), key=lambda r: (r[3], r[0]))
        rows = list(merged)[offset : offset + limit]
    tasks = [
        stored_task_info(topic, task_id, "reserved", raw, error, ends, from_millis(ends), None)
        for task_id, raw, error, ends in rows
    ]
    return RunningPage(now=from_millis(now), total=total, tasks=tasks)


class Admin:
    """A topic as a whole: ``queue.admin``.  Each call is one script call per batch (or per
    shard) on the topic's own keys, so it never holds Redis for long."""

    def __init__(
        self, redis: Redis, scripts: Scripts, shards: ShardMap, name: str,
        topic_options: Callable[[str], TopicOptions],
    ) -> None:  # fmt: skip
        self._redis, self._scripts, self._shards, self._name = redis, scripts, shards, name
        self._topic_options = topic_options

    async def running(self, topic: str, limit: int = 50, offset: int = 0) -> RunningPage:
        """A page of ``topic``'s leased tasks (by workers or HTTP consumers), soonest lease
        deadline first, with Redis's time: a deadline before it is an expired lease that
        the topic's next lease reclaims.

        Raises:
            InvalidInputError: ``limit`` not in 1..500 or ``offset`` < 0.
        """
        return await leased(self._scripts, self._shards, check_topic(topic), limit, offset)

    async def replay_dead(self, topic: str) -> int:
        """Move every dead letter of ``topic`` back to ready (due now), attempts reset, 500
        per script call.

        Returns:
            How many were replayed.
        """
        return await dead_bulk(self._scripts, self._shards, check_topic(topic), "replay")

    async def delete_dead(self, topic: str) -> int:
        """Delete every dead letter of ``topic``, 500 per script call; a topic that keeps
        history records each as cancelled (as :meth:`delayq.Queue.cancel` does).

        Returns:
            How many were deleted.
        """
        topic = check_topic(topic)
        history = self._topic_options(topic).history
        return await dead_bulk(self._scripts, self._shards, topic, "delete", history)

    async def forget(self, topic: str, *, idle: Duration | None = None) -> bool:
        """Clean the stored state of ``topic`` (controls, history, activity, archive cursors,
        counters) and drop it from :meth:`delayq.Queue.topic_names`, if it holds no task.

        Args:
            idle: only if it also has no controls and was seen idle (no task, and no send,
                lease or finished task since) for this long by earlier calls; each call
                notes what it saw (``delayq web`` sweeps its topics with 24 h).

        Returns:
            True if forgotten; False if it holds tasks (or is not yet idle that long).
        """
        idle_ms = None if idle is None else to_millis(idle, name="idle")
        topic = check_topic(topic)
        return await forget(self._redis, self._scripts, self._shards, self._name, topic, idle_ms)
