"""``async with queue.worker():`` on the test's own event loop: it consumes once entered,
stops with the two-stage stop when left (also when the block raises or is cancelled), and
a failed start raises at the ``async with``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from delayq import LifespanError, Queue, Task
from tests.test_hooks import Outcomes


async def test_an_embedded_worker_runs_tasks_and_stops_gracefully(queue: Queue) -> None:
    finished = asyncio.Event()

    @queue.topic("job")
    async def job(body: int, task: Task) -> None:
        if body == 2:
            await asyncio.sleep(0.3)  # still running when the block is left
            finished.set()

    outcomes = Outcomes()
    async with queue.worker(concurrency=5, grace=5, on_outcome=outcomes) as worker:
        assert worker.listening.is_set()
        await queue.send("job", 1)
        await outcomes.wait(1)
        await queue.send("job", 2, task_id="slow")
        async with asyncio.timeout(5):
            while not worker.held:
                await asyncio.sleep(0.01)
    # Leaving waited for the running handler (within its grace) and its ack.
    assert finished.is_set()
    assert [o.outcome for o in outcomes.items] == ["acked", "acked"]
    assert await queue.get("job", "slow") is None


async def test_a_failed_start_raises_at_the_async_with(queue: Queue) -> None:
    @queue.lifespan
    async def resources() -> AsyncIterator[None]:
        raise RuntimeError("no database")
        yield

    @queue.topic("job")
    async def job(body: None) -> None: ...

    await queue.send("job", None, task_id="waiting")
    with pytest.raises(LifespanError, match="no database"):
        async with queue.worker():
            raise AssertionError("the block must not run")
    info = await queue.get("job", "waiting")
    assert info is not None and info.state == "ready"


async def test_leaving_after_the_grace_hands_running_tasks_back(queue: Queue) -> None:
    started = asyncio.Event()

    @queue.topic("job", ttr=60)
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(60)

    with pytest.raises(ZeroDivisionError):
        async with queue.worker(grace=0.1):
            await queue.send("job", None, task_id="long")
            await asyncio.wait_for(started.wait(), 5)
            _ = 1 / 0  # the block fails: the worker still stops the same way
    info = await queue.get("job", "long")
    assert info is not None and info.state == "ready" and info.attempts == 0


async def test_cancelling_the_owner_while_it_leaves_still_hands_back(queue: Queue) -> None:
    started = asyncio.Event()

    @queue.topic("job", ttr=60)
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(60)

    async def owner() -> None:
        async with queue.worker(grace=30):  # a long grace, cut short by the cancel
            await queue.send("job", None, task_id="long")
            await started.wait()

    task = asyncio.create_task(owner())
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.sleep(0.05)  # the owner is in __aexit__, waiting out the grace
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    info = await queue.get("job", "long")
    assert info is not None and info.state == "ready" and info.attempts == 0
