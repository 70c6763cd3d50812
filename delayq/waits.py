"""Waiting for a task's result (``queue.result(..., wait=S)``), woken by Redis, not polling.

The scripts that store a result (``_results.lua``) name the task on its topic's ``results``
channel.  A wait subscribes first (one subscription per queue, the
:class:`~delayq.redis.wakeup.ResultHub`), then reads the result, then sleeps until its
task is named: a wait costs a read per wake-up, whatever its length.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from delayq.duration import Duration, to_seconds
from delayq.errors import ResultNotReadyError
from delayq.redis.keys import check_task_id, shard_wake_pattern, wake_pattern
from delayq.redis.wakeup import LazyHub, ResultHub
from delayq.results import TaskResult, parse_result

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis.asyncio import Redis

    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts


class Results:
    """Reads and waits for results (:meth:`delayq.Queue.result` delegates here).

    Args:
        redis: lends the wait's subscription its connection.
        queue: the queue's name.
        scripts: the queue's scripts (a callable: a test clock may swap them).
        route: the keys of the shard holding a task.
        kept: a topic's ``results`` in ms as registered here, 0 for a topic registered
            without, -1 for one not registered here (its workers' setting then decides).
    """

    def __init__(
        self, redis: Redis, queue: str, scripts: Callable[[], Scripts],
        route: Callable[[str, str], Awaitable[TopicKeys]], kept: Callable[[str], int],
    ) -> None:  # fmt: skip
        self._scripts = scripts
        self._route = route
        self._kept = kept
        patterns = (wake_pattern(queue, "results"), shard_wake_pattern(queue, "results"))
        self._hub = LazyHub(lambda: ResultHub(redis, *patterns), "delayq-result-hub")

    async def get(self, topic: str, task_id: str, wait: Duration = 0) -> TaskResult[Any] | None:
        """See :meth:`delayq.Queue.result`."""
        task_id = check_task_id(task_id)
        seconds = to_seconds(wait, name="wait")
        kept = self._kept(topic)
        if kept == 0:
            return None
        keys = await self._route(topic, task_id)
        if seconds <= 0:
            state, found = await self._read(topic, keys, task_id, kept)
            if state == 1:
                raise _not_ready(topic, task_id, 0)
            return found
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        hub = self._hub.on(loop)
        # Subscribe, then read, then wait: a result stored after the read is announced to
        # a subscription already confirmed, so it wakes us.
        signal = hub.watch(keys.results, task_id)
        try:
            while True:
                # (Again) subscribed before reading: after a lost subscription, the read
                # waits for Redis to be back (within the deadline) rather than failing.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await hub.subscribed.wait()
                woken = signal.watch()
                state, found = await self._read(topic, keys, task_id, kept)
                if state != 1:
                    return found
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await woken.wait()
                if loop.time() >= deadline:
                    raise _not_ready(topic, task_id, seconds)
        finally:
            hub.unwatch(keys.results, task_id)

    async def _read(
        self, topic: str, keys: TopicKeys, task_id: str, kept: int
    ) -> tuple[int, TaskResult[Any] | None]:
        """(0 none | 1 still to finish | 2 finished, the result if any)."""
        state, raw = await self._scripts().result(keys, task_id, kept)
        return state, parse_result(topic, task_id, raw) if state == 2 and raw else None

    async def aclose(self) -> None:
        """Stop the results subscription, if a wait opened one."""
        await self._hub.aclose()


def _not_ready(topic: str, task_id: str, seconds: float) -> ResultNotReadyError:
    waited = f" after waiting {seconds:g}s" if seconds else ""
    return ResultNotReadyError(f"task {topic}/{task_id} has not finished yet{waited}")
