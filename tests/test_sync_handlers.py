"""Plain ``def`` handlers on a real worker: they run in the worker's threads (the event loop
stays free), middleware and the lifespan apply to them, a TTR overrun fails the attempt
and hands the lease back while the thread's late result is ignored, and a stop does not
wait for an abandoned thread."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

from delayq import Backoff, CallNext, InvalidInputError, Outcome, Queue, Task, Worker
from tests.apps.runner import APP, Spawner, app_env, module_command
from tests.fixtures_delayq import StartWorker
from tests.helpers import wait_for
from tests.test_hooks import Outcomes

FAST_RETRY = Backoff(initial=0.05, jitter=0)


async def test_a_sync_handler_runs_in_a_thread_with_the_hooks(
    queue: Queue, start_worker: StartWorker
) -> None:
    seen: list[tuple[str, Any, int, Any]] = []
    log: list[str] = []

    @queue.lifespan
    async def resources() -> AsyncIterator[str]:
        yield "pool"

    @queue.middleware
    async def record(task: Task, call_next: CallNext) -> None:
        log.append(f"before {task.id}")
        await call_next()
        log.append(f"after {task.id}")

    loop_thread = threading.get_ident()

    @queue.topic("blocking")
    def blocking(body: dict[str, int], task: Task[str]) -> None:
        time.sleep(0.05)  # blocking I/O, as Django's ORM or requests would do
        seen.append((task.id, body["n"], threading.get_ident(), task.state))

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("blocking", {"n": 1}, task_id="one")
    await outcomes.wait(1)
    assert outcomes.kinds() == ["acked"]
    assert seen[0][:2] == ("one", 1) and seen[0][3] == "pool"
    assert seen[0][2] != loop_thread
    assert log == ["before one", "after one"]


async def test_sync_handlers_do_not_block_the_event_loop(
    queue: Queue, start_worker: StartWorker
) -> None:
    sleeping = threading.Event()

    @queue.topic("slow")
    def slow(body: None) -> None:
        sleeping.set()
        time.sleep(0.5)

    @queue.topic("fast")
    async def fast(body: None) -> None: ...

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes, concurrency=4)
    await queue.send("slow", None, task_id="slow")
    await wait_for(sleeping.is_set, 5, "slow's thread to sleep")
    started = time.monotonic()
    await queue.send("fast", None, task_id="fast")
    await outcomes.wait(1)
    assert outcomes.items[0].task_id == "fast"
    assert time.monotonic() - started < 0.4  # not after slow's 0.5 s
    await outcomes.wait(2)


async def test_a_sync_handler_overrunning_its_ttr_fails_and_its_late_result_is_ignored(
    queue: Queue, start_worker: StartWorker
) -> None:
    finished: list[int] = []
    release = threading.Event()

    @queue.topic("stuck", ttr=1.0, max_attempts=2, backoff=FAST_RETRY)
    def stuck(body: None, task: Task) -> None:
        if task.attempt == 1:
            release.wait(10)  # a thread cannot be cancelled: it runs past its TTR
        finished.append(task.attempt)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("stuck", None, task_id="t")
    async with asyncio.timeout(8):  # attempt 2 runs while attempt 1's thread still blocks
        while not any(o.attempt == 2 and o.outcome == "acked" for o in outcomes.items):
            await outcomes.wait(len(outcomes.items) + 1)
    assert finished == [2]
    first = [o for o in outcomes.items if o.attempt == 1]
    # Attempt 1 failed as TTRExceeded (or, on a slow machine, its lease ran out in Redis
    # first and a reserve reclaimed it: the retry is then refused and reports nothing).
    assert all(o.outcome == "retried" and (o.error or "").startswith("TTRExceeded") for o in first)
    release.set()  # attempt 1's thread finishes now; nothing comes of it
    async with asyncio.timeout(5):
        while finished != [2, 1]:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert [o.attempt for o in outcomes.items if o.outcome == "acked"] == [2]
    assert await queue.get("stuck", "t") is None


async def test_a_sync_handler_can_extend_its_lease_through_anyio(
    queue: Queue, start_worker: StartWorker
) -> None:
    @queue.topic("long", ttr=0.3)
    def long_job(body: None, task: Task) -> None:
        for _ in range(4):
            time.sleep(0.1)
            anyio.from_thread.run(task.extend, 0.3)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("long", None)
    await outcomes.wait(1)
    assert outcomes.kinds() == ["acked"]


async def test_a_stop_does_not_wait_for_an_abandoned_thread(queue: Queue) -> None:
    started, release = threading.Event(), threading.Event()

    @queue.topic("stuck", ttr=60)
    def stuck(body: None) -> None:
        started.set()
        release.wait(10)

    worker = Worker(queue, grace=0.1)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await queue.send("stuck", None, task_id="t")
        async with asyncio.timeout(5):
            while not started.is_set():
                await asyncio.sleep(0.01)
        begun = time.monotonic()
        worker.stop()
        await asyncio.wait_for(run, 5)
        assert time.monotonic() - begun < 3
        info = await queue.get("stuck", "t")
        assert info is not None and info.state == "ready" and info.attempts == 0  # handed back
    finally:
        release.set()


async def test_periodic_and_sync(queue: Queue, start_worker: StartWorker) -> None:
    ticks: list[str] = []

    @queue.periodic("sweep", every=0.1, catch_up="all")
    def sweep(task: Task) -> None:
        ticks.append(task.id)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await outcomes.wait(2)
    assert ticks[:2] == [o.task_id for o in outcomes.items[:2]]


def test_handlers_must_be_functions(queue: Queue) -> None:
    def generator(body: None) -> Any:
        yield

    async def async_generator(body: None) -> Any:
        yield

    for bad in (generator, async_generator, object()):
        with pytest.raises(InvalidInputError, match=r"async def. function or a plain .def."):
            queue.topic("x")(bad)  # type: ignore[call-overload]
    assert "x" not in queue.topics


def test_outcome_is_public() -> None:
    assert Outcome.__module__ == "delayq.task"


async def test_delayq_worker_exits_past_an_abandoned_thread(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    """A thread cannot be killed, and Python waits for its threads at exit: the command
    exits anyway once the worker stopped, and says what it left behind."""
    spawner = Spawner(tmp_path)
    try:
        env = app_env(redis_url, queue_name)
        worker = spawner.spawn(module_command("worker", APP, "--grace", "0.2"), env)
        await worker.wait_started()
        queue = Queue.from_url(redis_url, name=queue_name)
        try:
            await queue.send("blocking", {"sleep": 3600}, task_id="stuck")
            await worker.wait_for_log("blocking handler started")
            worker.send_signal(signal.SIGTERM)
            assert await worker.wait(timeout=15) == 0
            info = await queue.get("blocking", "stuck")
            assert info is not None and info.state == "ready"  # handed back
        finally:
            await queue.close()
        assert "1 handler thread(s) still running (abandoned)" in worker.log()
    finally:
        spawner.close()
