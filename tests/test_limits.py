"""rate_limit and max_running: declared on the topic, stored by the worker, enforced by
reserve.lua on Redis's clock (the multi-process figures are in tests/faults/test_13_controls.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue, RedisCommandError, TopicStats, Worker
from delayq.limits import RateLimit
from tests.fixtures_delayq import StartWorker
from tests.helpers import counted, redis_now_ms, redis_time_passes, reserve, stored


class Overlap:
    """How many handler runs overlapped: ``most`` at once, ``runs`` finished."""

    def __init__(self) -> None:
        self.running = self.most = self.runs = 0

    async def run(self, seconds: float) -> None:
        """One run that takes ``seconds``."""
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(seconds)
        self.running -= 1
        self.runs += 1


async def limit(queue: Queue, topic: str = "t", **fields: str) -> None:
    """Set control fields as a worker's declaration would."""
    await queue.scripts.control(queue.keys(topic), fields)


async def ready_tasks(queue: Queue, n: int, topic: str = "t") -> list[str]:
    return await queue.send_many(topic, [{}] * n, task_ids=[f"{topic}{i:03d}" for i in range(n)])


# -- the options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "window_ms"),
    [("100/s", 100, 1_000), ("5/m", 5, 60_000), ("1/h", 1, 3_600_000)],
)
def test_rate_limits_parse(text: str, count: int, window_ms: int) -> None:
    parsed = RateLimit.parse(text)
    assert (parsed.count, parsed.window_ms, parsed.text) == (count, window_ms, text)


@pytest.mark.parametrize("bad", ["0/s", "10/d", "1.5/s", " 5/s", "5/S", "5", 5, "-1/s"])
def test_a_bad_rate_limit_is_refused_at_registration(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="rate_limit"):
        queue.topic("t", rate_limit=bad)


@pytest.mark.parametrize("bad", [0, -1, True, "3", 2.0, 1_000_001])
def test_a_bad_max_running_is_refused_at_registration(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_running"):
        queue.topic("t", max_running=bad)


async def test_the_last_worker_to_start_declares_the_limits(queue: Queue) -> None:
    other = Queue(queue.redis, name=queue.name)

    async def handler(body: Any) -> None: ...

    queue.topic("t", rate_limit="50/m", max_running=4)(handler)
    other.topic("t")(handler)
    first = Worker(queue)
    running = asyncio.create_task(first.run(handle_signals=False))
    try:
        async with asyncio.timeout(5):
            while (await queue.stats()).get("t") is None:
                await asyncio.sleep(0.01)
        assert counted(await queue.stats())["t"] == TopicStats(
            delayed=0, ready=0, reserved=0, dead=0, rate_limit="50/m", max_running=4
        )
        # A worker of code without limits starts: they are lifted for the whole fleet.
        second = Worker(other)
        await second._wait_for_redis()
        from delayq.worker.declare import declare_limits

        await declare_limits(other, second.topics)
        assert "t" not in await queue.stats()
    finally:
        first.stop()
        first.stop()
        await running


# -- max_running ------------------------------------------------------------------------------


async def test_max_running_caps_the_leases_and_a_freed_place_wakes_the_workers(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await limit(queue, max_running="2")
    await ready_tasks(queue, 5)
    keys = queue.keys("t")
    _, next_ms, leased = await reserve(queue, "t")
    assert [task_id for task_id, _, _ in leased] == ["t000", "t001"]
    deadline = (await stored(queue, "t", "t000")).lease_deadline
    assert deadline is not None and next_ms == round(deadline.timestamp() * 1000)
    assert await redis_client.hget(keys.controls, "full") == b"1"
    _, again, none = await reserve(queue, "t")
    assert none == [] and again == next_ms  # full: wait for a wake-up (or the lease's end)

    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.wake)
    try:
        assert await queue.scripts.ack(keys, [("t000", leased[0][1])]) == [True]
        async with asyncio.timeout(5):
            while await pubsub.get_message(timeout=1) is None:
                pass
        assert await redis_client.hget(keys.controls, "full") is None
        token = leased[1][1]
        await queue.scripts.nack(keys, "t001", token, mode="release", max_attempts=3)
        assert await pubsub.get_message(timeout=0.2) is None  # nobody was turned away since
    finally:
        await pubsub.aclose()
    _, _, more = await reserve(queue, "t")
    assert [task_id for task_id, _, _ in more] == ["t002", "t003"]  # t001 is due again since


async def test_an_expired_lease_frees_its_place(queue: Queue) -> None:
    await limit(queue, max_running="1")
    await ready_tasks(queue, 2)
    _, _, [(first, _, _)] = await reserve(queue, "t", ttr_ms=1)
    await redis_time_passes(queue.redis, 1)
    _, _, leased = await reserve(queue, "t")
    assert [task_id for task_id, _, _ in leased] == ["t001"]  # first was reclaimed, ready again
    assert (await stored(queue, "t", first)).state == "ready"


async def test_max_running_holds_across_workers(queue: Queue, start_worker: StartWorker) -> None:
    overlap = Overlap()
    finished = asyncio.Event()

    @queue.topic("t", max_running=2)
    async def handler(body: Any) -> None:
        await overlap.run(0.02)
        if overlap.runs == 30:
            finished.set()

    await ready_tasks(queue, 30)
    for _ in range(3):  # three workers in one process: the count is exact
        await start_worker(queue, concurrency=10)
    # A freed place wakes the waiting workers: without that, each would sleep until its
    # 2 s idle recheck, and 30 tasks would take far longer than this.
    async with asyncio.timeout(15):
        await finished.wait()
    assert overlap.most == 2


# -- rate_limit -------------------------------------------------------------------------------


async def sleep_until(redis_client: redis.asyncio.Redis, ms: int) -> None:
    await asyncio.sleep(max(ms - await redis_now_ms(redis_client), 0) / 1000 + 0.002)


async def test_the_rate_limit_paces_leases_and_counts_a_sliding_window(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await limit(queue, rate_limit="3/s")  # paced at ceil(3 / 20) = 1 per 50 ms sub-window
    await ready_tasks(queue, 8)
    times: list[int] = []
    while len(times) < 3:
        now, next_ms, leased = await reserve(queue, "t")
        assert len(leased) <= 1
        times += [now] * len(leased)
        assert next_ms > now  # told when to come back, never "at once"
        if len(times) < 3:
            assert next_ms <= now // 50 * 50 + 50  # the next sub-window
            await sleep_until(redis_client, next_ms)
    assert [(await stored(queue, "t", f"t00{i}")).state for i in range(4)] == [
        "reserved", "reserved", "reserved", "ready",
    ]  # fmt: skip
    now, next_ms, leased = await reserve(queue, "t")
    if now < times[0] + 1_000:  # (a slow host may already be past the window)
        # Three leases in the last second: closed until the first one's sub-window is a
        # whole second old.
        assert leased == []
        assert times[0] + 1_000 <= next_ms <= times[0] // 50 * 50 + 1_050
        await sleep_until(redis_client, next_ms)
        now, next_ms, leased = await reserve(queue, "t")
    assert [task_id for task_id, _, _ in leased] == ["t003"]


async def same_sub_window(steps: Any, g: int) -> None:
    """Run the coroutine function ``steps`` (it returns the Redis times it saw) until it
    ran inside one rate sub-window of ``g`` ms: a limit per hour has 3-minute
    sub-windows, which a run rarely straddles."""
    for _ in range(3):
        times = await steps()
        if len({t // g for t in times}) == 1:
            return
    raise AssertionError("three runs straddled a sub-window")


async def test_a_new_rate_unit_starts_a_new_count(queue: Queue) -> None:
    topics = iter(range(3))

    async def steps() -> list[int]:
        topic = f"u{next(topics)}"
        await limit(queue, topic, rate_limit="40/s")  # paced at 2 per 50 ms
        await ready_tasks(queue, 6, topic)
        first, _, leased = await reserve(queue, topic)
        assert len(leased) == 2
        # Counted as 40/s, those two would fill a window of 2 a minute: a new unit starts
        # a new count.
        await limit(queue, topic, rate_limit="2/m")
        second, _, leased = await reserve(queue, topic)
        assert len(leased) == 1
        return [first, second]

    await same_sub_window(steps, 50)


async def test_rate_limit_and_max_running_together(queue: Queue) -> None:
    topics = iter(range(3))

    async def steps() -> list[int]:
        topic = f"v{next(topics)}"
        # Paced at 3 per 3-minute sub-window, and at most 2 leased at once.
        await limit(queue, topic, rate_limit="60/h", max_running="2")
        await ready_tasks(queue, 6, topic)
        first, _, leased = await reserve(queue, topic)
        assert len(leased) == 2
        await queue.scripts.ack(queue.keys(topic), [(i, token) for i, token, _ in leased])
        second, _, leased = await reserve(queue, topic)
        assert len(leased) == 1  # the third start of the sub-window
        third, next_ms, leased = await reserve(queue, topic)
        assert leased == [] and next_ms == (third // 180_000 + 1) * 180_000
        return [first, second, third]

    await same_sub_window(steps, 180_000)


@pytest.mark.parametrize(
    ("field", "value"), [("rate_limit", "fast"), ("max_running", "0"), ("max_running", "x")]
)
async def test_an_unreadable_limit_fails_the_lease_loudly(
    queue: Queue, field: str, value: str
) -> None:
    await limit(queue, **{field: value})
    await ready_tasks(queue, 1)
    with pytest.raises(RedisCommandError, match=field):
        await reserve(queue, "t")
    assert (await stored(queue, "t", "t000")).state == "ready"


async def test_a_rate_limited_worker_sleeps_until_the_window_reopens(
    queue: Queue, start_worker: StartWorker, redis_client: redis.asyncio.Redis
) -> None:
    started: list[int] = []

    @queue.topic("t", rate_limit="5/s")
    async def handler(body: Any) -> None:
        started.append(await redis_now_ms(redis_client))

    await ready_tasks(queue, 12)
    await start_worker(queue, concurrency=20)
    async with asyncio.timeout(15):
        while len(started) < 12:
            await asyncio.sleep(0.05)
    # Handler starts trail their leases a little; leases are what the limit counts, so
    # allow one more start per second than the limit here.
    for first in started:
        assert sum(first <= t < first + 1_000 for t in started) <= 6
    assert started[-1] - started[0] >= 1_900  # 12 starts at 5/s span two reopenings


async def test_a_periodic_topic_with_max_running_1_never_overlaps(
    queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    """Ticks every 100 ms, each run 150 ms, two workers: runs queue up, one at a time."""
    overlap = Overlap()
    for _ in range(2):
        queue = queues()

        @queue.periodic("sweep", every=0.1, catch_up="all", max_running=1)
        async def sweep(task: Any) -> None:
            await overlap.run(0.15)

        await start_worker(queue, concurrency=5)
    async with asyncio.timeout(15):
        while overlap.runs < 6:
            await asyncio.sleep(0.05)
    assert overlap.most == 1
    assert (await queue.stats())["sweep"].max_running == 1
