"""taskiq + taskiq-redis adapter.

Delayed work in taskiq is "dynamic scheduling": ``task.schedule_by_time(source,
when)`` stores a schedule in a schedule source, and a separate ``taskiq
scheduler`` process kicks it into the broker when due.  We use the
taskiq-redis README's recommendations: ``RedisStreamBroker`` (the broker with
acknowledgements) and ``ListRedisScheduleSource`` (the replacement for the
deprecated ``RedisScheduleSource``).  The scheduler runs as a sidecar process
with the CLI's defaults: schedules are re-read every 60 s, due ones sent every 1 s.

The worker is what one ``taskiq worker`` child process runs
(``taskiq.cli.worker.run.start_listen``): a ``Receiver`` built from the CLI's
default ``WorkerArgs``, minus the process manager and signal handling.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from taskiq import AsyncTaskiqDecoratedTask, TaskiqScheduler
from taskiq.cli.scheduler.args import SchedulerArgs
from taskiq.cli.scheduler.run import run_scheduler
from taskiq.cli.worker.args import WorkerArgs
from taskiq.cli.worker.run import shutdown_broker
from taskiq.receiver import Receiver
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

from benchmarks.common import TASK_NAMES, Peer, Task, defaults_of, record, run_cli, run_until


async def noop(payload: str, due: int) -> None:
    """The benchmark task."""
    await record(due)


def build(redis_url: str) -> tuple[RedisStreamBroker, dict[str, AsyncTaskiqDecoratedTask]]:
    """The broker with the benchmark tasks registered (one handler, several names)."""
    broker = RedisStreamBroker(url=redis_url)
    return broker, {name: broker.register_task(noop, task_name=name) for name in TASK_NAMES}


class TaskiqPeer(Peer):
    name = "taskiq"
    distributions = ("taskiq", "taskiq-redis")
    delayed_api = (
        "await noop.schedule_by_time(ListRedisScheduleSource, when, ...) + `taskiq scheduler`"
    )
    bulk_api = None
    sidecars = ("scheduler",)

    def __init__(self) -> None:
        self.broker: RedisStreamBroker | None = None
        self.tasks: dict[str, AsyncTaskiqDecoratedTask] = {}
        self.source: ListRedisScheduleSource | None = None

    def settings(self) -> dict[str, Any]:
        worker = WorkerArgs(broker="", modules=[])
        return {
            "scheduler.update_interval_s": 60,  # SchedulerArgs.update_interval None -> 60 s
            "scheduler.loop_interval_s": 1,  # SchedulerArgs.loop_interval None -> 1 s
            "worker.max_prefetch": worker.max_prefetch,
            "worker.ack_type": str(worker.ack_type),
            "result_backend": "none (broker default)",
        } | defaults_of(RedisStreamBroker, "xread_block", "xread_count", "idle_timeout")

    async def open(self, redis_url: str) -> None:
        self.broker, self.tasks = build(redis_url)
        self.source = ListRedisScheduleSource(redis_url)
        await self.broker.startup()
        await self.source.startup()

    async def close(self) -> None:
        if self.source is not None:
            await self.source.shutdown()
        if self.broker is not None:
            await self.broker.shutdown()

    async def enqueue(self, task: Task) -> None:
        registered = self.tasks[task.name]
        task.stamp()
        if task.delayed:
            await registered.schedule_by_time(self.source, task.due_datetime, *task.args)
        else:
            await registered.kiq(*task.args)

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        broker, _ = build(redis_url)
        broker.is_worker_process = True
        cli = WorkerArgs(broker="", modules=[])
        with ThreadPoolExecutor(max_workers=cli.max_threadpool_threads) as pool:
            receiver = Receiver(
                broker=broker,
                executor=pool,
                validate_params=not cli.no_parse,
                max_async_tasks=concurrency,
                max_async_tasks_jitter=cli.max_async_tasks_jitter,
                max_prefetch=cli.max_prefetch,
                propagate_exceptions=not cli.no_propagate_errors,
                ack_type=cli.ack_type,
                max_tasks_to_execute=cli.max_tasks_per_child,
                wait_tasks_timeout=cli.wait_tasks_timeout,
            )
            try:
                await receiver.listen(stop)
            finally:
                await shutdown_broker(broker, cli.shutdown_timeout)

    async def serve_sidecar(self, name: str, redis_url: str, stop: asyncio.Event) -> None:
        assert name == "scheduler", name
        broker, _ = build(redis_url)
        scheduler = TaskiqScheduler(broker, sources=[ListRedisScheduleSource(redis_url)])
        args = SchedulerArgs(scheduler=scheduler, modules=[], configure_logging=False)
        await run_until(run_scheduler(args), stop)


if __name__ == "__main__":
    run_cli(TaskiqPeer())
