"""A frozen Redis (SIGSTOP: connections open, nothing answered) is noticed in about 2 s.

``Queue.from_url``'s defaults: a 2 s socket and connect timeout, and no retry after a
timeout (only after a lost connection).  The lane notices with one timer per connection,
the pool with redis-py's timer per read, and the worker's wake-up subscription with a
heartbeat (a repeated ``SUBSCRIBE``) after a second of silence.  The bounds below are
generous (the box is shared); they only tell "about 2 s" from the 10 s of redis-py's 5 s
timeout taken twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
import redis.asyncio
import redis.exceptions

from delayq import Queue, RedisUnavailableError, Task
from delayq.redis.clients import SILENCE_TIMEOUT
from delayq.redis.subscription import HEARTBEAT
from delayq.testing import PrivateRedis
from tests.fixtures_delayq import StartWorker

pytestmark = pytest.mark.faults  # a frozen (SIGSTOP) Redis: the faults tier

NOTICED_WITHIN = SILENCE_TIMEOUT + 2.0  # one timeout, not two, plus room for a loaded box


@pytest.fixture
def server(make_redis_server: Callable[..., PrivateRedis]) -> PrivateRedis:
    return make_redis_server()


@pytest.fixture
async def queue(server: PrivateRedis, queue_name: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(server.url, name=queue_name)
    try:
        yield queue
    finally:
        await queue.close()


@pytest.fixture
def frozen(server: PrivateRedis) -> Iterator[Callable[[], None]]:
    """``frozen()`` pauses the server; it is resumed at teardown whatever happened."""
    yield server.pause
    if server._paused:
        server.resume()


async def seconds_until_failure(call: Awaitable[object], error: type[Exception]) -> float:
    started = time.monotonic()
    with pytest.raises(error):
        async with asyncio.timeout(4 * NOTICED_WITHIN):  # the old default took ~10 s
            await call
    return time.monotonic() - started


async def test_calls_to_a_frozen_redis_fail_after_one_silence_timeout(
    server: PrivateRedis, queue: Queue, frozen: Callable[[], None]
) -> None:
    await queue.send("t", {"warm": True})  # the lane and a pooled connection are open
    await queue.redis.ping()
    frozen()
    on_lane, on_pool = await asyncio.gather(
        seconds_until_failure(queue.send("t", {}, task_id="frozen"), RedisUnavailableError),
        seconds_until_failure(queue.redis.ping(), redis.exceptions.TimeoutError),
    )
    # The lane was dropped: the next call opens a connection, which the kernel accepts
    # for the stopped process; the handshake then waits for the same 2 s.
    reconnecting = await seconds_until_failure(queue.stats(), RedisUnavailableError)
    print(f"\nfrozen Redis: lane {on_lane:.2f} s, pool {on_pool:.2f} s, new {reconnecting:.2f} s")
    for waited in (on_lane, on_pool, reconnecting):
        assert SILENCE_TIMEOUT * 0.9 <= waited <= NOTICED_WITHIN
    server.resume()
    # The outcome of the frozen send is unknown; sending the same id again leaves one task.
    assert await queue.send("t", {}, task_id="frozen") == "frozen"
    assert (await queue.stats())["t"].ready == 2


async def test_a_worker_notices_a_frozen_redis_and_resubscribes(
    server: PrivateRedis,
    queue: Queue,
    start_worker: StartWorker,
    frozen: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    lateness: list[float] = []

    @queue.topic("tick")
    async def tick(body: None, task: Task) -> None:
        lateness.append(time.time() - task.due_at.timestamp())

    worker = await start_worker(queue)
    subscribed = worker._wakeup.subscribed
    caplog.set_level(logging.DEBUG, logger="delayq")  # the outage's later failures are DEBUG
    frozen()
    started = time.monotonic()
    async with asyncio.timeout(4 * NOTICED_WITHIN):
        while subscribed.is_set():
            await asyncio.sleep(0.01)
    noticed = time.monotonic() - started
    print(f"\nthe wake-up subscription noticed the frozen Redis after {noticed:.2f} s")
    assert noticed <= HEARTBEAT + NOTICED_WITHIN
    assert "the wake-up subscription failed" in caplog.text
    server.resume()
    async with asyncio.timeout(4 * NOTICED_WITHIN):
        await subscribed.wait()
    await asyncio.sleep(0.3)  # the fetch loop is asleep again, until its idle recheck (2 s)
    await tick.send_delayed(None, 0.05)
    async with asyncio.timeout(10):
        while not lateness:
            await asyncio.sleep(0.005)
    assert lateness[0] < 1.0, "fired by the idle recheck, not by a wake-up"
