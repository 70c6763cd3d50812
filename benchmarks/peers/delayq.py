"""delayq adapter: ``queue.send_delayed(...)``, ``queue.send_many`` for bulk, ``Worker`` per process."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from benchmarks.common import BULK_BATCH, TASK_NAMES, Peer, Task, record, run_cli, run_until
from delayq import Queue, Worker
from delayq.worker.runner import IDLE_RECHECK, MAX_BATCH

QUEUE_NAME = "bench"


def build(redis_url: str) -> Queue:
    """A queue with the benchmark topics registered (producers register them too, as an app would)."""
    queue = Queue.from_url(redis_url, name=QUEUE_NAME)
    for name in TASK_NAMES:
        queue.topic(name)(noop)
    return queue


async def noop(body: dict[str, Any]) -> None:
    """The benchmark task."""
    await record(body["due"])


class DelayqPeer(Peer):
    name = "delayq"
    distributions = ("delayq", "redis")
    delayed_api = "await queue.send_delayed('noop', body, delay=seconds)"
    bulk_api = "await queue.send_many('noop', bodies, delay=[...], batch_size=1000)"

    def __init__(self) -> None:
        self.queue: Queue | None = None

    def settings(self) -> dict[str, Any]:
        return {
            "poll": "none: sleeps until the next due time, woken by pub/sub",
            "idle_recheck_s": IDLE_RECHECK,
            "reserve_batch_max": MAX_BATCH,
        }

    def build(self, redis_url: str) -> Queue:
        """The queue this peer sends to and serves (subclasses add hooks to it)."""
        return build(redis_url)

    async def open(self, redis_url: str) -> None:
        self.queue = self.build(redis_url)

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()

    async def enqueue(self, task: Task) -> None:
        assert self.queue is not None
        task.stamp()
        await self.queue.send_delayed(task.name, task.kwargs, delay=task.delay_ms / 1000)

    async def enqueue_bulk(self, tasks: Sequence[Task]) -> None:
        assert self.queue is not None
        bodies = [task.stamp().kwargs for task in tasks]
        delays = [task.delay_ms / 1000 for task in tasks]
        await self.queue.send_many(tasks[0].name, bodies, delay=delays, batch_size=BULK_BATCH)

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        queue = self.build(redis_url)
        try:
            worker = Worker(queue, concurrency=concurrency, grace=1.0)
            await run_until(worker.run(handle_signals=False), stop)
        finally:
            await queue.close()


if __name__ == "__main__":
    run_cli(DelayqPeer())
