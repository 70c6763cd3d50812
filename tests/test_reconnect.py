"""Redis going away and coming back: producers fail fast while it is down, and both the
producer and a running worker carry on by themselves once it is back.

Each test runs its own server (``make_redis_server``) with ``appendfsync always``, so a
SIGKILL loses nothing that was acknowledged, as in a durable production setup.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from delayq import Backoff, Queue, RedisUnavailableError, Task, Worker
from delayq.testing import PrivateRedis
from tests.fixtures_delayq import StartWorker

MakeServer = Callable[..., PrivateRedis]


pytestmark = pytest.mark.faults  # Redis killed, restarted and frozen: the faults tier


@pytest.fixture
def server(make_redis_server: MakeServer) -> PrivateRedis:
    return make_redis_server(appendonly=True, appendfsync="always")


@pytest.fixture
async def flaky_queue(server: PrivateRedis, queue_name: str) -> AsyncIterator[Queue]:
    """A queue on the server the test kills.  Request it before ``start_worker`` so the
    worker is stopped before this queue's client is closed."""
    queue = Queue.from_url(server.url, name=queue_name)
    try:
        yield queue
    finally:
        await queue.close()


class Handled:
    """Bodies handled so far (in this process: Redis may be down when a handler runs)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    async def wait_for(self, *bodies: str, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not set(bodies) <= set(self.bodies):
                await asyncio.sleep(0.01)


def register(queue: Queue, handled: Handled) -> None:
    @queue.topic("job", backoff=Backoff(initial=0.05, jitter=0))
    async def job(body: str, task: Task) -> None:
        handled.bodies.append(body)


async def test_worker_and_producer_carry_on_after_redis_is_killed_and_restarted(
    server: PrivateRedis, flaky_queue: Queue, start_worker: StartWorker
) -> None:
    handled = Handled()
    register(flaky_queue, handled)
    await start_worker(flaky_queue)
    await flaky_queue.send("job", "before")
    await handled.wait_for("before")
    # Due while Redis is down: must survive the crash (AOF) and run once it is back.
    due_in_outage = await flaky_queue.send_delayed("job", "due-in-outage", 0.3)

    server.kill()
    started = time.monotonic()
    with pytest.raises(RedisUnavailableError):
        await flaky_queue.send("job", "lost")
    assert time.monotonic() - started < 3  # refused, not hung
    with pytest.raises(RedisUnavailableError):
        await flaky_queue.get("job", due_in_outage)
    await asyncio.sleep(0.6)  # the worker's loops fail and back off meanwhile
    assert "due-in-outage" not in handled.bodies

    server.start()
    # The same producer reconnects by itself: no new Queue, no call to reconnect.
    await flaky_queue.send("job", "after")
    await handled.wait_for("due-in-outage", "after")
    assert "lost" not in handled.bodies
    assert sorted(handled.bodies) == ["after", "before", "due-in-outage"]


async def test_a_separate_producer_reconnects_after_a_restart(
    server: PrivateRedis, flaky_queue: Queue, queue_name: str
) -> None:
    async with Queue.from_url(server.url, name=queue_name) as producer:
        first = await producer.send_delayed("job", "one", 60)
        server.kill()
        with pytest.raises(RedisUnavailableError):
            await producer.send("job", "two")
        server.start()
        second = await producer.send_delayed("job", "two", 60)
    assert (await flaky_queue.get("job", first)) is not None  # survived the crash (AOF)
    assert (await flaky_queue.get("job", second)) is not None


async def test_worker_started_while_redis_is_down_waits_for_it(
    server: PrivateRedis, flaky_queue: Queue
) -> None:
    handled = Handled()
    register(flaky_queue, handled)
    server.kill()
    worker = Worker(flaky_queue)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await asyncio.sleep(0.3)
        assert not run.done()
        server.start()
        await flaky_queue.send("job", "first")
        await handled.wait_for("first")
    finally:
        worker.stop()
        worker.stop()
        async with asyncio.timeout(10):
            await run


async def test_worker_rides_out_a_frozen_redis(
    server: PrivateRedis, flaky_queue: Queue, start_worker: StartWorker
) -> None:
    """A paused server (SIGSTOP) hangs connections instead of refusing them."""
    handled = Handled()
    register(flaky_queue, handled)
    await start_worker(flaky_queue)
    await flaky_queue.send_delayed("job", "due-while-frozen", 0.1)
    server.pause()
    try:
        await asyncio.sleep(0.5)
        assert handled.bodies == []
    finally:
        server.resume()
    await handled.wait_for("due-while-frozen")
    await flaky_queue.send("job", "after")
    await handled.wait_for("after")


async def test_wake_ups_work_again_after_a_restart(
    server: PrivateRedis, flaky_queue: Queue, start_worker: StartWorker
) -> None:
    """After a restart the worker resubscribes, so a task sent to an idle worker still
    fires on time rather than at the next idle recheck (2 s)."""
    lateness: list[float] = []

    @flaky_queue.topic("tick")
    async def tick(body: None, task: Task) -> None:
        lateness.append(time.time() - task.due_at.timestamp())

    worker = await start_worker(flaky_queue)
    subscribed = worker._wakeup.subscribed
    server.kill()
    async with asyncio.timeout(5):
        while subscribed.is_set():
            await asyncio.sleep(0.01)
    server.start()
    async with asyncio.timeout(10):
        await subscribed.wait()
    await asyncio.sleep(0.3)  # the fetch loop is asleep again
    await tick.send_delayed(None, 0.05)
    async with asyncio.timeout(5):
        while not lateness:
            await asyncio.sleep(0.005)
    assert -0.005 <= lateness[0] <= 0.1, f"fired {lateness[0] * 1000:.0f} ms late"
