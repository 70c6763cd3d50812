"""streaq adapter: ``task.enqueue(...).start(delay=...)``, ``Worker.enqueue_many`` for bulk."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

from streaq import Worker
from streaq.task import AsyncRegisteredTask

from benchmarks.common import TASK_NAMES, Peer, Task, defaults_of, record, run_cli, run_until


async def noop(payload: str, due: int) -> None:
    """The benchmark task."""
    await record(due)


def build(
    redis_url: str, concurrency: int | None = None
) -> tuple[Worker, dict[str, AsyncRegisteredTask]]:
    """A streaq Worker with the benchmark tasks registered (producers use one too)."""
    worker = Worker(redis_url=redis_url, **({"concurrency": concurrency} if concurrency else {}))
    return worker, {name: worker.task(name=name)(noop) for name in TASK_NAMES}


def _enqueued(tasks: dict[str, AsyncRegisteredTask], task: Task) -> Any:
    """The streaq Task object for ``task`` (not yet sent)."""
    pending = tasks[task.name].enqueue(*task.stamp().args)
    return pending.start(delay=timedelta(milliseconds=task.delay_ms)) if task.delayed else pending


class StreaqPeer(Peer):
    name = "streaq"
    distributions = ("streaq", "coredis")
    delayed_api = "await noop.enqueue(...).start(delay=timedelta(ms))"
    bulk_api = "await worker.enqueue_many([noop.enqueue(...).start(delay=...), ...])"

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.tasks: dict[str, AsyncRegisteredTask] = {}
        self.stack = AsyncExitStack()

    def settings(self) -> dict[str, Any]:
        # Worker.schedule_delayed_tasks loops every 0.5 s (hard-coded); prefetch None = concurrency.
        return defaults_of(Worker, "prefetch", "idle_timeout") | {
            "delayed_task_poll_s": 0.5,
            "client": "coredis (not redis-py)",
        }

    async def open(self, redis_url: str) -> None:
        self.worker, self.tasks = build(redis_url)
        await self.stack.enter_async_context(self.worker)  # the README's `async with worker:`

    async def close(self) -> None:
        await self.stack.aclose()

    async def enqueue(self, task: Task) -> None:
        await _enqueued(self.tasks, task)

    async def enqueue_bulk(self, tasks: Sequence[Task]) -> None:
        assert self.worker is not None
        await self.worker.enqueue_many([_enqueued(self.tasks, task) for task in tasks])

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        worker, _ = build(redis_url, concurrency)
        await run_until(worker.run_async(), stop)


if __name__ == "__main__":
    run_cli(StreaqPeer())
