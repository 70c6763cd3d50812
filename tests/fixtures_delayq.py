"""delayq fixtures: a queue per test on the session's private Redis, and a worker factory
that always stops its workers (arq/streaq style)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from delayq import Queue, Worker
from delayq.redis.source import stop_test_clock

StartWorker = Callable[..., Awaitable[Worker]]


@pytest.fixture(autouse=True)
def _production_scripts() -> Iterator[None]:
    """Every test after one that ran ``run_due`` runs production's scripts again, not the
    copies that read test clock offsets."""
    yield
    stop_test_clock()


@pytest.fixture
async def queue(redis_url: str, queue_name: str) -> AsyncIterator[Queue]:
    """A fresh queue (unique name) on the session's Redis."""
    q = Queue.from_url(redis_url, name=queue_name)
    try:
        yield q
    finally:
        await q.close()


@pytest.fixture
async def queues(redis_url: str, queue_name: str) -> AsyncIterator[Callable[[], Queue]]:
    """``make()`` -> another Queue on the test's queue name (a worker process stand-in),
    closed at teardown (after the workers of ``start_worker`` when a test asks for this
    fixture first)."""
    made: list[Queue] = []

    def make() -> Queue:
        made.append(Queue.from_url(redis_url, name=queue_name))
        return made[-1]

    yield make
    for queue in made:
        await queue.close()


@pytest.fixture
async def start_worker() -> AsyncIterator[StartWorker]:
    """``await start_worker(queue, concurrency=..., grace=...)`` runs a Worker in the
    background until the test ends (or until the test stops it)."""
    running: list[tuple[Worker, asyncio.Task[None]]] = []

    async def start(q: Queue, **options: Any) -> Worker:
        worker = Worker(q, **options)
        task = asyncio.create_task(worker.run(handle_signals=False))
        running.append((worker, task))
        # Wait until the worker listens for wake-ups, so tests can send right away.
        async with asyncio.timeout(5):
            while not worker._wakeup.subscribed.is_set():
                if task.done():
                    await task
                await asyncio.sleep(0.005)
        return worker

    yield start
    for worker, _ in running:
        worker.stop()
        worker.stop()  # second stop: skip the grace period at teardown
    for _, task in running:
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await task
