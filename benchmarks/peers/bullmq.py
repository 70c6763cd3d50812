"""bullmq (Python) adapter: ``Queue.add(name, data, {"delay": ms})``, ``Queue.addBulk`` for bulk."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from bullmq import Job, Queue, Worker

from benchmarks.common import Peer, Task, record, run_cli

QUEUE = "bench"
#: Worker options bullmq applies when the caller sets none (bullmq/worker.py).
WORKER_DEFAULTS = {"drainDelay": 5, "lockDuration": 30000, "stalledInterval": 30000}


async def process(job: Job, token: str) -> None:
    """The benchmark processor."""
    await record(job.data["due"])


def _job_opts(task: Task) -> dict[str, Any]:
    return {"delay": task.delay_ms} if task.delayed else {}


class BullmqPeer(Peer):
    name = "bullmq"
    distributions = ("bullmq",)
    delayed_api = "await queue.add('noop', data, {'delay': ms})"
    bulk_api = "await queue.addBulk([{'name', 'data', 'opts': {'delay': ms}}, ...])"

    def __init__(self) -> None:
        self.queue: Queue | None = None

    def settings(self) -> dict[str, Any]:
        return WORKER_DEFAULTS | {
            "removeOnComplete": False,
            "delayed jobs": "event driven: worker blocks on the marker key until the next due job",
        }

    async def open(self, redis_url: str) -> None:
        self.queue = Queue(QUEUE, {"connection": redis_url})

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()

    async def enqueue(self, task: Task) -> None:
        assert self.queue is not None
        await self.queue.add(task.name, task.stamp().kwargs, _job_opts(task))

    async def enqueue_bulk(self, tasks: Sequence[Task]) -> None:
        assert self.queue is not None
        jobs = [{"name": t.name, "data": t.stamp().kwargs, "opts": _job_opts(t)} for t in tasks]
        await self.queue.addBulk(jobs)

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        worker = Worker(QUEUE, process, {"connection": redis_url, "concurrency": concurrency})
        try:
            await stop.wait()
        finally:
            await worker.close()


if __name__ == "__main__":
    run_cli(BullmqPeer())
