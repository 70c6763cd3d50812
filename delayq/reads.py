"""The part of :class:`~delayq.Queue` that looks tasks and topics up and steers a topic as a
whole: lookups, counts, pages and pause/resume.  A base class of ``Queue``, apart so that
``Queue`` stays a size one can read; every method delegates to the module holding its logic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delayq.fleet import WorkerInfo, live_workers
from delayq.group_stats import GroupStats, groups
from delayq.manage import dead_letters, get_task, replay, set_controls, topic_names, topic_stats
from delayq.upcoming import Timeline, UpcomingPage, timeline, upcoming

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable

    from redis.asyncio import Redis

    from delayq.duration import Duration
    from delayq.parts import QueueParts
    from delayq.redis.registry import Registry
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.task import TaskInfo, TopicStats
    from delayq.topic import Topic


class QueueReads:
    """Lookups and topic-wide steering of a :class:`~delayq.Queue` (which sets these attributes)."""

    _parts: QueueParts
    name: str
    redis: Redis
    topics: dict[str, Topic[Any]]
    scripts: Scripts
    shards: ShardMap
    registry: Registry
    announce: Callable[[Iterable[str]], Coroutine[Any, Any, None]]

    async def get(self, topic: str, task_id: str) -> TaskInfo | None:
        """Look a task up by id: its state, body and schedule; None once acked or cancelled, or unknown."""
        return await get_task(self.scripts, self.shards, topic, task_id, self)

    async def topic_names(self) -> list[str]:
        """The names of the topics this queue has used (sent to, or consumed), sorted."""
        return await topic_names(self.redis, self.name)

    async def stats(self, topics: Iterable[str] | None = None) -> dict[str, TopicStats]:
        """Count tasks per state, with the controls, for each topic of this queue (or of
        ``topics``) that holds any task, or is paused or limited (:class:`~delayq.TopicStats`)."""
        return await topic_stats(self._parts, topics)

    async def workers(self) -> list[WorkerInfo]:
        """The live workers and ``delayq web`` processes (:class:`~delayq.WorkerInfo`)."""
        return await live_workers(self.registry)

    async def dead_letters(self, topic: str, limit: int = 100, offset: int = 0) -> list[TaskInfo]:
        """List a topic's dead letters, oldest first, with their last error; of a sharded
        topic, each shard's first ``offset + limit``, merged by time of death.

        Raises:
            InvalidInputError: ``limit`` < 1 or ``offset`` < 0.
        """
        return await dead_letters(self.scripts, self.shards, topic, limit, offset, self)

    async def replay(self, topic: str, task_id: str) -> bool:
        """Move a dead-lettered task back to ready (due now), its attempts reset: True if it was dead."""
        return await replay(self.scripts, self.shards, topic, task_id)

    async def upcoming(
        self, topic: str, *, limit: int = 50, cursor: str | None = None
    ) -> UpcomingPage:
        """The next ``limit`` (1..500) delayed or ready tasks of ``topic``, in due order,
        after the ``cursor`` of the page before.  Costs Redis O(limit), not O(tasks)."""
        return await upcoming(self.scripts, self.shards, topic, limit=limit, cursor=cursor)

    async def timeline(self, topic: str, *, window: Duration = 60, windows: int = 60) -> Timeline:
        """How many tasks of ``topic`` fall due in each of the next ``windows`` (1..240) windows of
        ``window`` seconds, and how many are due already (Redis cost: O(windows * log(tasks))."""
        return await timeline(self.scripts, self.shards, topic, window=window, windows=windows)

    async def groups(self, topic: str, limit: int = 20) -> list[GroupStats]:
        """The ``limit`` (1..1000) groups of a grouped ``topic`` with the most ready tasks, each
        with its delayed and running tasks and whether its cap or rate limit holds it back
        now ([] for a topic without groups); of a sharded topic, its shards' top groups merged.
        Costs Redis O(groups · log n) (every group is visited, up to 2,000 a shard a call).

        Raises:
            InvalidInputError: ``limit`` is not an int in [1, 1000].
        """
        return await groups(self.scripts, self.shards, topic, limit=limit)

    async def pause(self, topic: str) -> None:
        """Stop every worker of the queue from leasing ``topic``'s tasks from its next lease (leased
        tasks run to the end) until :meth:`resume`, across restarts (stored in each shard's
        ``controls`` hash); sends are still accepted, ``stats()`` and ``get()`` show the pause."""
        await set_controls(self.scripts, self.shards, topic, {"paused": "1"})
        await self.announce([topic])  # so that stats() lists it, tasks or not

    async def resume(self, topic: str) -> None:
        """Let ``topic``'s tasks be leased again after :meth:`pause`, its workers woken at once (a
        topic that is not paused is left as it is)."""
        await set_controls(self.scripts, self.shards, topic, {"paused": ""})
