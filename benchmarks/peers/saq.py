"""SAQ adapter: ``Queue.enqueue(..., scheduled=epoch_seconds)``, one ``saq.Worker`` per process."""

from __future__ import annotations

import asyncio
from typing import Any

from saq import Queue, Worker
from saq.queue.redis import RedisQueue

from benchmarks.common import TASK_NAMES, Peer, Task, defaults_of, record, run_cli, run_until


async def noop(ctx: dict[str, Any], *, payload: str, due: int) -> None:
    """The benchmark task (SAQ passes job kwargs as keyword arguments)."""
    await record(due)


class SaqPeer(Peer):
    name = "saq"
    distributions = ("saq",)
    delayed_api = "await queue.enqueue('noop', scheduled=time.time() + delay, ...)"
    bulk_api = None  # Queue.map enqueues many but also waits for their results

    def __init__(self) -> None:
        self.queue: Queue | None = None

    def settings(self) -> dict[str, Any]:
        worker = defaults_of(Worker, "dequeue_timeout")
        queue = defaults_of(RedisQueue, "max_concurrent_ops")
        # Worker.__init__ hard-codes its timers; "schedule" is how often due jobs are promoted.
        timers = {"timers.schedule": 1, "timers.sweep": 60, "timers.abort": 1}
        return worker | queue | timers

    async def open(self, redis_url: str) -> None:
        self.queue = Queue.from_url(redis_url)
        await self.queue.connect()

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()

    async def enqueue(self, task: Task) -> None:
        assert self.queue is not None
        task.stamp()
        scheduled = {"scheduled": task.due_s} if task.delayed else {}
        await self.queue.enqueue(task.name, **task.kwargs, **scheduled)

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        queue = Queue.from_url(redis_url)
        worker = Worker(
            queue, functions=[(name, noop) for name in TASK_NAMES], concurrency=concurrency
        )
        await queue.connect()
        try:
            await run_until(worker.start(), stop)
        finally:
            await worker.stop()
            await queue.disconnect()


if __name__ == "__main__":
    run_cli(SaqPeer())
