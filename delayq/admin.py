"""An operator's actions on a topic as a whole, as ``queue.admin``: what its workers hold
now, every dead letter at once, and forgetting a topic that holds nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from delayq.duration import Duration, to_millis
from delayq.manage import RunningPage, dead_bulk, forget, leased
from delayq.redis.keys import check_topic

if TYPE_CHECKING:
    from collections.abc import Callable

    from redis.asyncio import Redis

    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.topic import TopicOptions


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
