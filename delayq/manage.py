"""Looking tasks up and managing what is stored: get, stats, dead letters, replay, the
schedule's pages (``Queue`` inherits them, as it inherits the controls)."""

from __future__ import annotations

import asyncio
import heapq
from typing import TYPE_CHECKING, Protocol

from delayq.errors import InvalidInputError
from delayq.redis.keys import check_task_id, check_topic, topics_key
from delayq.redis.translate import redis_errors
from delayq.task import TaskInfo, TopicStats, from_millis, stored_task_info
from delayq.upcoming import Timeline, UpcomingPage, timeline, upcoming

if TYPE_CHECKING:
    from collections.abc import Iterable

    from redis.asyncio import Redis

    from delayq.duration import Duration
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap


class ManagedQueue(Protocol):
    """What the management calls need from the queue that inherits them."""

    name: str
    redis: Redis
    shards: ShardMap

    @property
    def scripts(self) -> Scripts:
        """Runs the scripts."""

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic``."""

    async def topic_names(self) -> list[str]:
        """The topics the queue has used."""


class TaskManagement:
    """``Queue.get``, ``stats``, ``dead_letters``, ``replay``, ``upcoming``, ``timeline``."""

    async def get(self: ManagedQueue, topic: str, task_id: str) -> TaskInfo | None:
        """Look a task up by id. Returns None once it was acked or cancelled, or if unknown."""
        task_id = check_task_id(task_id)
        found = await self.scripts.get(await self.shards.route(topic, task_id), task_id)
        if found is None:
            return None
        state, score = found.state, found.score_ms
        lease = from_millis(score) if state == "reserved" else None
        dead_at = from_millis(score) if state == "dead" else None
        return stored_task_info(
            topic, task_id, state, found.raw, found.error, score, lease, dead_at, found.paused
        )

    async def topic_names(self: ManagedQueue) -> list[str]:
        """The names of the topics this queue has used (sent to, or consumed), sorted."""
        async with redis_errors():
            members = await self.redis.smembers(topics_key(self.name))
        return sorted(m.decode() if isinstance(m, bytes) else m for m in members)

    async def stats(
        self: ManagedQueue, topics: Iterable[str] | None = None
    ) -> dict[str, TopicStats]:
        """Count tasks per state for every topic of this queue (or of ``topics``) that holds
        any, or that is paused or limited (with its controls); a sharded topic's counts are
        the sums over its shards, its controls shard 0's (pause applies to every shard)."""
        names = await self.topic_names() if topics is None else [check_topic(t) for t in topics]
        result: dict[str, TopicStats] = {}
        for topic in names:
            every = await self.shards.every(topic)
            if len(every) == 1:
                shares = [await self.scripts.stats(every[0])]
            else:
                shares = await asyncio.gather(*(self.scripts.stats(k) for k in every))
            c = shares[0]
            delayed, ready = sum(s.delayed for s in shares), sum(s.ready for s in shares)
            reserved, dead = sum(s.reserved for s in shares), sum(s.dead for s in shares)
            controlled = c.paused or c.rate_limit or c.max_running
            if delayed or ready or reserved or dead or controlled:
                result[topic] = TopicStats(
                    delayed=delayed, ready=ready, reserved=reserved, dead=dead,
                    paused=c.paused, rate_limit=c.rate_limit, max_running=c.max_running,
                )  # fmt: skip
        return result

    async def dead_letters(
        self: ManagedQueue, topic: str, limit: int = 100, offset: int = 0
    ) -> list[TaskInfo]:
        """List a topic's dead letters, oldest first, with their last error (of a sharded
        topic: each shard's first ``offset + limit``, merged by time of death)."""
        if not (isinstance(limit, int) and isinstance(offset, int) and limit >= 1 and offset >= 0):
            raise InvalidInputError("limit must be >= 1 and offset >= 0")
        every = await self.shards.every(topic)
        if len(every) == 1:
            _now, rows = await self.scripts.dead_letters(every[0], offset=offset, limit=limit)
        else:
            pages = await asyncio.gather(*(
                self.scripts.dead_letters(k, offset=0, limit=offset + limit) for k in every
            ))  # fmt: skip
            merged = heapq.merge(*(page[1] for page in pages), key=lambda r: (r[3], r[0]))
            rows = list(merged)[offset : offset + limit]
        return [
            stored_task_info(topic, task_id, "dead", raw, error, died, None, from_millis(died))
            for task_id, raw, error, died in rows
        ]

    async def upcoming(
        self: ManagedQueue, topic: str, *, limit: int = 50, cursor: str | None = None
    ) -> UpcomingPage:
        """The next ``limit`` (1..500) delayed or ready tasks of ``topic``, in due order.

        Costs Redis O(limit), not O(tasks).  Pass the page's ``cursor`` back for the next
        page; if the task it names has left the schedule since, the next page starts after
        its due time (so tasks due in that same millisecond may be skipped).
        """
        every = await self.shards.every(topic)
        return await upcoming(self.scripts, every, limit=limit, cursor=cursor)

    async def timeline(
        self: ManagedQueue, topic: str, *, window: Duration = 60, windows: int = 60
    ) -> Timeline:
        """How many tasks of ``topic`` fall due in each of the next ``windows`` (1..240)
        windows of ``window`` seconds, and how many are due already.  Costs Redis
        O(windows * log(tasks)); a window of over ~2,000 tasks is estimated (flagged)."""
        every = await self.shards.every(topic)
        return await timeline(self.scripts, every, window=window, windows=windows)

    async def replay(self: ManagedQueue, topic: str, task_id: str) -> bool:
        """Move a dead-lettered task back to ready (due now), its attempts reset.

        Returns:
            True if the task was dead and is now ready again.
        """
        task_id = check_task_id(task_id)
        return await self.scripts.replay(await self.shards.route(topic, task_id), task_id)
