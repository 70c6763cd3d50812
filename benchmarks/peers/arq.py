"""arq adapter: ``ArqRedis.enqueue_job(..., _defer_by=...)``, one ``arq.Worker`` per process."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from arq import Worker, create_pool, func
from arq.connections import ArqRedis, RedisSettings

from benchmarks.common import TASK_NAMES, Peer, Task, defaults_of, record, run_cli, run_until


async def noop(ctx: dict[str, Any], payload: str, due: int) -> None:
    """The benchmark task."""
    await record(due)


class ArqPeer(Peer):
    name = "arq"
    distributions = ("arq",)
    delayed_api = "await pool.enqueue_job('noop', ..., _defer_by=timedelta(ms))"
    bulk_api = None  # arq has no bulk enqueue

    def __init__(self) -> None:
        self.pool: ArqRedis | None = None

    def settings(self) -> dict[str, Any]:
        return defaults_of(Worker, "poll_delay", "keep_result", "max_tries") | {
            "queue_read_limit": "max(max_jobs * 5, 100)",
        }

    async def open(self, redis_url: str) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(redis_url))

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()

    async def enqueue(self, task: Task) -> None:
        assert self.pool is not None
        task.stamp()
        defer = timedelta(milliseconds=task.delay_ms) if task.delayed else None
        await self.pool.enqueue_job(task.name, *task.args, _defer_by=defer)

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        worker = Worker(
            functions=[func(noop, name=name) for name in TASK_NAMES],
            redis_settings=RedisSettings.from_dsn(redis_url),
            max_jobs=concurrency,
        )
        try:
            await run_until(worker.async_run(), stop)
        finally:
            await worker.close()


if __name__ == "__main__":
    run_cli(ArqPeer())
