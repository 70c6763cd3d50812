"""Graceful shutdown: running handlers get the grace period, the rest is cancelled and
released for immediate redelivery (not after its TTR), in-process and for a real
``delayq worker`` process stopped by SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis.asyncio

from delayq import Queue, Task, Worker
from tests.apps.records import events, handled
from tests.apps.runner import (
    APP,
    Spawner,
    WorkerProcess,
    app_env,
    module_command,
    script_command,
)
from tests.helpers import stored, wait_for


class Launched(NamedTuple):
    worker: Worker
    run: asyncio.Task[None]


Launch = Callable[..., Awaitable[Launched]]


@pytest.fixture
async def launch() -> AsyncIterator[Launch]:
    """Like ``start_worker``, but hands the test the ``run()`` task to await after stop()."""
    launched: list[Launched] = []

    async def start(queue: Queue, **options: Any) -> Launched:
        worker = Worker(queue, **options)
        run = asyncio.create_task(worker.run(handle_signals=False))
        launched.append(Launched(worker, run))
        async with asyncio.timeout(5):
            while not worker._wakeup.subscribed.is_set():
                if run.done():
                    await run
                await asyncio.sleep(0.005)
        return launched[-1]

    yield start
    for worker, run in launched:
        worker.stop()
        worker.stop()
        await asyncio.gather(run, return_exceptions=True)


async def launch_stuck(queue: Queue, launch: Launch, sends: int) -> tuple[Launched, list[str]]:
    """Launch a worker (grace 30 s) on ``sends`` tasks of a topic "job" whose handler runs
    until it is cancelled; return once a handler runs."""
    started = asyncio.Event()

    @queue.topic("job")
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(30)

    launched = await launch(queue, grace=30)
    task_ids = [await job.send(None) for _ in range(sends)]
    async with asyncio.timeout(5):
        await started.wait()
    return launched, task_ids


async def stopped_within(run: asyncio.Task[None], timeout: float) -> float:
    """Await the worker's run() and return how long it took."""
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        await run
    return time.monotonic() - started


# -- in-process --------------------------------------------------------------------------------


async def test_running_handler_finishes_within_the_grace_and_is_acked(
    queue: Queue, launch: Launch
) -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    @queue.topic("job")
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(0.3)
        finished.set()

    worker, run = await launch(queue, grace=10)
    task_id = await job.send(None)
    later = await job.send_delayed(None, 60)
    async with asyncio.timeout(5):
        await started.wait()
    worker.stop()
    took = await stopped_within(run, timeout=5)

    assert finished.is_set()
    assert took < 5  # the handler's 0.3 s, not the 10 s grace
    assert worker.held == 0
    assert await queue.get("job", task_id) is None  # acked before the worker exited
    assert (await stored(queue, "job", later)).state == "delayed"  # untouched


async def test_handler_longer_than_the_grace_is_released_for_redelivery_at_once(
    queue: Queue, launch: Launch
) -> None:
    runs: list[tuple[int, float]] = []
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @queue.topic("job", ttr=30)
    async def job(body: None, task: Task) -> None:
        runs.append((task.attempt, time.monotonic()))
        started.set()
        if len(runs) == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    first, run = await launch(queue, grace=0.2)
    task_id = await job.send(None)
    async with asyncio.timeout(5):
        await started.wait()
    first.stop()
    took = await stopped_within(run, timeout=5)
    assert cancelled.is_set()
    assert 0.2 - 0.01 <= took < 5

    info = await stored(queue, "job", task_id)
    assert info.state == "ready"
    assert info.attempts == 0  # the interrupted attempt does not count
    assert info.lease_deadline is None

    stopped_at = time.monotonic()
    await launch(queue)  # another worker takes it over at once, not after the 30 s TTR
    async with asyncio.timeout(5):
        while len(runs) < 2:
            await asyncio.sleep(0.01)
    attempt, redelivered_at = runs[1]
    assert attempt == 1
    assert redelivered_at - stopped_at < 2


async def test_second_stop_skips_the_grace(queue: Queue, launch: Launch) -> None:
    (worker, run), [task_id] = await launch_stuck(queue, launch, 1)
    worker.stop()
    await asyncio.sleep(0.1)
    assert not run.done()  # within its grace
    worker.stop()
    await stopped_within(run, timeout=5)
    info = await stored(queue, "job", task_id)
    assert (info.state, info.attempts) == ("ready", 0)


async def test_cancelling_run_releases_what_the_worker_holds(queue: Queue, launch: Launch) -> None:
    (worker, run), task_ids = await launch_stuck(queue, launch, 3)
    await wait_for(lambda: worker.held == 3, 5, "the worker to hold all three")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopped_within(run, timeout=5)
    for task_id in task_ids:
        info = await stored(queue, "job", task_id)
        assert (info.state, info.attempts) == ("ready", 0)


async def test_idle_worker_stops_at_once(queue: Queue, launch: Launch) -> None:
    @queue.topic("job")
    async def job(body: None) -> None:
        pass

    worker, run = await launch(queue, grace=30)
    later = await job.send_delayed(None, 60)
    worker.stop()
    took = await stopped_within(run, timeout=5)
    assert took < 5
    assert (await stored(queue, "job", later)).state == "delayed"


# -- a real `delayq worker` process ----------------------------------------------------------------


@pytest.fixture
def spawner(tmp_path: Path) -> Iterator[Spawner]:
    spawner = Spawner(tmp_path)
    yield spawner
    spawner.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_lets_the_running_handler_finish(
    sig: signal.Signals,
    spawner: Spawner,
    queue: Queue,
    redis_url: str,
    redis_client: redis.asyncio.Redis,
) -> None:
    command = module_command("worker", APP, "--grace", "10")
    worker, task_id = await _signal_mid_task(spawner, command, sig, queue, redis_url, 0.5)
    assert ("finished", task_id, 1) in await events(redis_client, queue.name)
    assert await handled(redis_client, queue.name) == {task_id: 1}
    assert await queue.get("slow", task_id) is None
    assert "worker stopped" in worker.log()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_releases_a_handler_longer_than_the_grace(
    sig: signal.Signals,
    spawner: Spawner,
    queue: Queue,
    redis_url: str,
    redis_client: redis.asyncio.Redis,
) -> None:
    command = script_command("worker", APP, "--grace", "0.3")
    worker, task_id = await _signal_mid_task(spawner, command, sig, queue, redis_url, 30)
    info = await stored(queue, "slow", task_id)
    assert (info.state, info.attempts) == ("ready", 0)
    assert ("finished", task_id, 1) not in await events(redis_client, queue.name)
    assert "releasing 1 task(s)" in worker.log()


async def _signal_mid_task(
    spawner: Spawner,
    command: list[str],
    sig: signal.Signals,
    queue: Queue,
    redis_url: str,
    sleep: float,
) -> tuple[WorkerProcess, str]:
    """Start a worker process, signal it while a ``sleep``-second handler runs, and return
    it (exited 0) with the task's id."""
    worker = spawner.spawn(command, app_env(redis_url, queue.name))
    await worker.wait_started()
    task_id = await queue.send("slow", {"sleep": sleep})
    await _wait_for_event(queue.redis, queue.name, ("started", task_id, 1))
    worker.send_signal(sig)
    assert await worker.wait(timeout=10) == 0, worker.log()
    return worker, task_id


async def _wait_for_event(
    client: redis.asyncio.Redis, queue_name: str, event: tuple[str, str, int]
) -> None:
    async with asyncio.timeout(10):
        while event not in await events(client, queue_name):
            await asyncio.sleep(0.01)
