"""Worker robustness: bad handler input and cancellation swallowed by libraries."""

from __future__ import annotations

import asyncio
import time

from delayq import Queue, Retry, Task
from delayq.worker.runner import STOP_TIMEOUT
from tests.helpers import wait_for

HANDLER_SECONDS = 10.0


async def test_invalid_retry_delay_fails_the_attempt_instead_of_the_worker(
    queue: Queue, start_worker
) -> None:
    runs: list[tuple[str, int]] = []

    @queue.topic("t", ttr=0.5, max_attempts=3)
    async def handler(body: dict[str, int], task: Task) -> None:
        runs.append((task.id, task.attempt))
        if body["n"] == 0:
            raise Retry(delay=-1)

    await start_worker(queue, concurrency=2)
    await queue.send("t", {"n": 0}, task_id="bad")
    await wait_for(lambda: ("bad", 1) in runs, 5, "the bad task's first run")
    await queue.send("t", {"n": 1}, task_id="good")
    async with asyncio.timeout(3):
        while ("good", 1) not in runs:
            await asyncio.sleep(0.02)


async def test_stop_after_grace_returns_when_handler_is_in_a_redis_call(
    queue: Queue, start_worker
) -> None:
    @queue.topic("t", ttr=30)
    async def handler(body: dict[str, int]) -> None:
        running.set()
        end = time.monotonic() + HANDLER_SECONDS
        while time.monotonic() < end:
            await queue.redis.get("x")

    running = asyncio.Event()
    worker = await start_worker(queue, concurrency=1, grace=0.1)
    await queue.send("t", {}, task_id="busy")
    await wait_for(running.is_set, 5, "the handler to start")
    run = next(t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "Worker.run")
    worker.stop()
    # The hard stop gives up on the handler after STOP_TIMEOUT; the slack covers a loaded
    # machine, and stays far below the handler's own run time.
    within = 0.1 + STOP_TIMEOUT + 2.5
    done, _ = await asyncio.wait({run}, timeout=within)
    assert done, f"worker.run() did not return within {within}s: it waited for the handler"
    assert within < HANDLER_SECONDS
