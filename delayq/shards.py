"""Sharded topics: which shard's keys hold a task, and the shard count each topic records.

A topic declared with ``@queue.topic(name, shards=N)`` spreads its tasks over N hash tags
(key names: :mod:`delayq.redis.keys`); a task's shard is ``zlib.crc32(task_id) % N``, so
every call by id stays one script on one slot.  The count is recorded in Redis (shard 0's
``meta`` field ``shards``; absent: 1) and resolved once per process and topic, before its
first use: a declared count is checked against the record (and recorded when the topic
holds no tasks), an undeclared topic (one used by name, e.g. from the web API or the CLI)
takes the recorded count.  An unsharded topic costs one read per process, nothing per call.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

from delayq.errors import ShardCountError
from delayq.redis.keys import TopicKeys, shard_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from delayq.redis.scripts import Scripts

T = TypeVar("T")


class ShardMap:
    """Routes a queue's calls to the shards of its topics.

    Args:
        queue: the queue's name.
        scripts: the queue's scripts (looked up per call: the queue may swap them).
        keys: shard 0's key names of a topic (validates the topic).
        declared: the shard count this process declared for a topic (``None``: none).
        sharded_wake: the scripts publish wake-ups with ``SPUBLISH`` (Redis Cluster).
    """

    def __init__(
        self,
        queue: str,
        scripts: Callable[[], Scripts],
        keys: Callable[[str], TopicKeys],
        declared: Callable[[str], int | None],
        *,
        sharded_wake: bool,
    ) -> None:
        self._queue = queue
        self._scripts = scripts
        self._keys = keys
        self._declared = declared
        self._sharded_wake = sharded_wake
        self.counts: dict[str, int] = {}
        """The resolved shard count of each topic used so far."""
        self._every: dict[tuple[str, int], list[TopicKeys]] = {}

    def of(self, topic: str, count: int) -> list[TopicKeys]:
        """The key names of each of ``count`` shards of ``topic`` (shard 0 first)."""
        found = self._every.get((topic, count))
        if found is None:
            first = self._keys(topic)
            found = self._every[(topic, count)] = [first] + [
                TopicKeys.build(
                    self._queue, topic, sharded_wake=self._sharded_wake, shard=k, shards=count
                )
                for k in range(1, count)
            ]
        return found

    async def count(self, topic: str) -> int:
        """How many shards ``topic`` has (resolved on first use, then cached).

        Raises:
            ShardCountError: this process declared another count than the one recorded,
                and the topic holds tasks.
        """
        found = self.counts.get(topic)
        if found is None:
            found = self.counts[topic] = await self._resolve(topic)
        return found

    async def route(self, topic: str, task_id: str, group: str | None = None) -> TopicKeys:
        """The key names of the shard holding ``task_id`` (an id already validated), or,
        for a task of a group, the shard of ``group`` (a group's tasks share one shard, so
        its limits hold fleet-wide)."""
        count = self.counts.get(topic) or await self.count(topic)
        if count == 1:
            return self._keys(topic)
        return self.of(topic, count)[shard_of(task_id if group is None else group, count)]

    async def find(
        self,
        topic: str,
        task_id: str,
        call: Callable[[TopicKeys], Awaitable[T]],
        found: Callable[[T], bool],
    ) -> T:
        """Run ``call`` (a script by id) on the shard of ``task_id``; on a sharded topic,
        when ``found`` says it found nothing there, on the other shards in turn until one
        does: a grouped task lives in its group's shard (:meth:`route`), which an id alone
        does not tell.  Every such script writes nothing where the task is not."""
        count = self.counts.get(topic) or await self.count(topic)
        if count == 1:
            return await call(self._keys(topic))
        every = self.of(topic, count)
        first = shard_of(task_id, count)
        result = await call(every[first])
        for k, keys in enumerate(every):
            if found(result):
                break
            if k != first:
                result = await call(keys)
        return result

    async def every(self, topic: str) -> list[TopicKeys]:
        """The key names of every shard of ``topic``."""
        return self.of(topic, await self.count(topic))

    async def _resolve(self, topic: str) -> int:
        first = self._keys(topic)
        scripts = self._scripts()
        recorded = await scripts.shards(first)
        declared = self._declared(topic)
        if declared is None or declared == recorded:
            return recorded
        # Both layouts' shards must be empty: a task in a shard the new count does not
        # route to could never be found by id again.
        shards = self.of(topic, max(declared, recorded))
        counts = await asyncio.gather(*(scripts.stats(keys) for keys in shards))
        stored = sum(c.delayed + c.ready + c.reserved + c.dead for c in counts)
        if stored:
            raise self._refusal(topic, declared, recorded, stored)
        now = await scripts.shards(first, recorded, declared)
        if now != declared:  # another process recorded a count in between
            raise self._refusal(topic, declared, now, None)
        return declared

    def _refusal(
        self, topic: str, declared: int, recorded: int, stored: int | None
    ) -> ShardCountError:
        held = (
            f"holds {stored} task(s)"
            if stored is not None
            else "was just changed by another process"
        )
        return ShardCountError(
            f"topic {topic!r} of queue {self._queue!r} is declared with shards={declared}, but "
            f"Redis records shards={recorded} and the topic {held}; a topic's shard count can "
            "only change while it is empty: drain it with the old count first (docs/cluster.md, "
            '"Changing a topic\'s shard count")'
        )
