"""The worker against a real Redis: what a handler receives, firing on time, retries and
dead letters, TTR and leases, concurrency, topic selection, and cancel/reschedule racing a
running worker.

Timing asserts are one-sided or loose (``LATE``): they catch a worker that polls or sleeps
through a due time, not a slow machine.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio
from pydantic import BaseModel

from delayq import (
    Backoff,
    InvalidInputError,
    LeaseLostError,
    Queue,
    Retry,
    Task,
    TaskInfo,
    Worker,
)
from delayq.task import Envelope
from tests.fixtures_delayq import StartWorker
from tests.helpers import Recorder, wait_for

LATE = 0.1
"""How late a task may start: generous, so that a loaded CI machine passes."""
EARLY = 0.005
"""Due times are whole milliseconds of Redis's clock; allow for that rounding."""
FAST_RETRY = Backoff(initial=0.05, jitter=0)


class Order(BaseModel):
    order_id: int
    note: str = ""


class Seen(Recorder[Any]):
    """What handlers recorded, with a way to wait for the n-th record."""

    timeout = 5.0


@pytest.fixture
def seen() -> Seen:
    return Seen()


async def wait_gone(queue: Queue, topic: str, task_id: str, timeout: float = 5.0) -> None:
    """Wait until the task is acked (or cancelled): ``get`` finds nothing."""
    async with asyncio.timeout(timeout):
        while await queue.get(topic, task_id) is not None:
            await asyncio.sleep(0.01)


async def wait_state(
    queue: Queue, topic: str, task_id: str, state: str, timeout: float = 5.0
) -> TaskInfo:
    """Wait until the task is in ``state``; return its info."""
    async with asyncio.timeout(timeout):
        while True:
            info = await queue.get(topic, task_id)
            if info is not None and info.state == state:
                return info
            await asyncio.sleep(0.01)


def lateness(task: Task, started: float) -> float:
    """Seconds between the task's due time (Redis's clock) and the handler's start."""
    return started - task.due_at.timestamp()


# -- what a handler receives -------------------------------------------------------------------


async def test_handler_receives_validated_model_and_task_fields(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("order.close", ttr=7, max_attempts=4)
    async def close(body: Order, task: Task) -> None:
        seen.add((body, task, time.time()))

    await start_worker(queue)
    before = time.time()
    # A dict is validated into the model on send ("7" -> 7) and again on delivery.
    task_id = await queue.send_delayed(
        "order.close", {"order_id": "7", "note": "x"}, 0.05, task_id="order-7"
    )
    [(body, task, started)] = await seen.wait(1)

    assert isinstance(body, Order)
    assert body == Order(order_id=7, note="x")
    assert task_id == task.id == "order-7"
    assert task.topic == "order.close"
    assert task.attempt == 1
    assert task.max_attempts == 4
    assert task.ttr == 7
    assert task.token
    assert task.due_at.tzinfo is not None and task.enqueued_at.tzinfo is not None
    assert before - EARLY <= task.enqueued_at.timestamp() <= started
    assert (task.due_at - task.enqueued_at).total_seconds() == pytest.approx(0.05, abs=0.002)
    await wait_gone(queue, "order.close", task_id)


async def test_per_task_ttr_and_max_attempts_reach_the_handler(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job", ttr=7, max_attempts=4)
    async def job(body: Order, task: Task) -> None:
        seen.add(task)

    await start_worker(queue)
    await job.send(Order(order_id=1), ttr=2.5, max_attempts=9)
    [task] = await seen.wait(1)
    assert (task.ttr, task.max_attempts) == (2.5, 9)


async def test_one_argument_dict_and_unannotated_handlers(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("model")
    async def model(body: Order) -> None:
        seen.add(("model", body))

    @queue.topic("mapping")
    async def mapping(body: dict[str, int], task: Task) -> None:
        seen.add(("mapping", body))

    @queue.topic("raw")
    async def raw(body, task):  # type: ignore[no-untyped-def]
        seen.add(("raw", body))

    await start_worker(queue)
    await model.send(Order(order_id=3))
    await mapping.send({"a": 1})
    await queue.send("raw", [1, "two", {"three": 3.0}])
    await seen.wait(3)
    assert sorted(seen.items, key=lambda item: item[0]) == [
        ("mapping", {"a": 1}),
        ("model", Order(order_id=3)),
        ("raw", [1, "two", {"three": 3.0}]),
    ]


# -- firing on time --------------------------------------------------------------------------


async def test_tasks_fire_on_time_and_never_early(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("tick")
    async def tick(body: float, task: Task) -> None:
        seen.add((body, lateness(task, time.time())))

    await start_worker(queue)
    delays = [0.3, 0.05, 0.2, 0.0, 0.1, 0.15, 0.25]
    for delay in delays:
        await tick.send_delayed(delay, delay)
    await seen.wait(len(delays))

    fired = [delay for delay, _ in seen.items]
    assert fired == sorted(delays)  # in due order
    for delay, late in seen.items:
        assert -EARLY <= late <= LATE, f"delay {delay}: started {late * 1000:.1f} ms after due"


async def test_send_at_fires_on_time(queue: Queue, start_worker: StartWorker, seen: Seen) -> None:
    @queue.topic("tick")
    async def tick(body: None, task: Task) -> None:
        seen.add(lateness(task, time.time()))

    await start_worker(queue)
    at = datetime.now(UTC) + timedelta(milliseconds=150)
    await tick.send_at(None, at)
    [late] = await seen.wait(1)
    assert -EARLY <= late <= LATE


async def test_idle_worker_is_woken_for_an_earlier_task(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    """The fetch loop sleeps until the far task (or its idle recheck, 2 s); only the
    pub/sub wake-up can make it run a task sent later but due sooner on time."""

    @queue.topic("tick")
    async def tick(body: str, task: Task) -> None:
        seen.add((body, lateness(task, time.time())))

    await start_worker(queue)
    await tick.send_delayed("far", 10)
    for round_ in range(2):
        await asyncio.sleep(0.3)  # the worker is asleep by now
        await tick.send_delayed(f"near-{round_}", 0.05)
        body, late = (await seen.wait(round_ + 1))[-1]
        assert body == f"near-{round_}"
        assert -EARLY <= late <= LATE, f"started {late * 1000:.1f} ms late: no wake-up?"


# -- retries and dead letters -------------------------------------------------------------------


async def test_exception_is_retried_with_backoff(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("flaky", max_attempts=5, backoff=Backoff(initial=0.05, factor=2, jitter=0))
    async def flaky(body: None, task: Task) -> None:
        info = await queue.get("flaky", task.id)
        seen.add((task.attempt, time.monotonic(), info))
        if task.attempt < 3:
            raise ValueError(f"bad {task.attempt}")

    await start_worker(queue)
    task_id = await flaky.send(None)
    await seen.wait(3)
    await wait_gone(queue, "flaky", task_id)

    attempts = [attempt for attempt, _, _ in seen.items]
    assert attempts == [1, 2, 3]
    starts = [at for _, at, _ in seen.items]
    assert starts[1] - starts[0] >= 0.05 - EARLY
    assert starts[2] - starts[1] >= 0.10 - EARLY
    infos: list[TaskInfo] = [info for _, _, info in seen.items]
    assert [i.state for i in infos] == ["reserved"] * 3
    assert [i.attempts for i in infos] == [1, 2, 3]
    assert [i.last_error for i in infos] == [None, "ValueError: bad 1", "ValueError: bad 2"]


async def test_explicit_retry_delay_and_reason(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("poll", backoff=Backoff(initial=60))
    async def poll(body: None, task: Task) -> None:
        seen.add((task.attempt, time.monotonic(), await queue.get("poll", task.id)))
        if task.attempt == 1:
            raise Retry(delay=0.2, reason="not yet")

    await start_worker(queue)
    task_id = await poll.send(None)
    await seen.wait(2)
    await wait_gone(queue, "poll", task_id)
    (_, first, _), (attempt, second, info) = seen.items
    assert attempt == 2
    assert 0.2 - EARLY <= second - first <= 0.2 + LATE  # not the 60 s backoff
    assert info.last_error == "Retry: not yet"


async def test_retry_without_delay_uses_the_backoff(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("poll", backoff=Backoff(initial=0.15, jitter=0))
    async def poll(body: None, task: Task) -> None:
        seen.add(time.monotonic())
        if task.attempt == 1:
            raise Retry()

    await start_worker(queue)
    await poll.send(None)
    first, second = await seen.wait(2)
    assert second - first >= 0.15 - EARLY


async def test_dead_after_max_attempts_then_replay_runs_again(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    healed = False

    @queue.topic("pay", max_attempts=3, backoff=FAST_RETRY)
    async def pay(body: Order, task: Task) -> None:
        seen.add(task.attempt)
        if not healed:
            raise RuntimeError(f"card declined for {body.order_id}")

    await start_worker(queue)
    task_id = await pay.send(Order(order_id=5))
    info = await wait_state(queue, "pay", task_id, "dead")
    assert seen.items == [1, 2, 3]
    assert info.attempts == 3
    assert info.last_error == "RuntimeError: card declined for 5"
    assert info.dead_at is not None
    [letter] = await queue.dead_letters("pay")
    assert (letter.id, letter.last_error) == (task_id, info.last_error)
    assert (await queue.stats())["pay"].dead == 1

    healed = True
    assert await queue.replay("pay", task_id)
    await seen.wait(4)
    assert seen.items[-1] == 1  # attempts start over
    await wait_gone(queue, "pay", task_id)
    assert await queue.dead_letters("pay") == []


async def test_per_task_max_attempts_overrides_the_topic(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("pay", max_attempts=5, backoff=FAST_RETRY)
    async def pay(body: None, task: Task) -> None:
        seen.add(task.attempt)
        raise RuntimeError("no")

    await start_worker(queue)
    task_id = await pay.send(None, max_attempts=1)
    info = await wait_state(queue, "pay", task_id, "dead")
    assert seen.items == [1]
    assert info.max_attempts == 1


async def test_body_that_no_longer_validates_is_dead_at_once(
    queue: Queue, redis_url: str, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("order.close", max_attempts=5, backoff=FAST_RETRY)
    async def close(body: Order, task: Task) -> None:
        seen.add(body.order_id)

    await start_worker(queue)
    # An old producer (no handler registered, so no validation) writes the wrong shape.
    async with Queue.from_url(redis_url, name=queue.name) as producer:
        bad_id = await producer.send("order.close", {"orderId": "x"})

    info = await wait_state(queue, "order.close", bad_id, "dead")
    assert info.attempts == 1  # no retries: a retry cannot fix the body
    assert info.last_error is not None
    assert info.last_error.startswith("BodyValidationError: ")
    assert "order_id" in info.last_error
    assert info.body == {"orderId": "x"}  # kept for inspection and replay

    # The worker keeps running other tasks.
    await close.send(Order(order_id=1))
    assert await seen.wait(1) == [1]


async def test_retry_with_an_invalid_delay_does_not_crash_the_worker(
    queue: Queue, seen: Seen
) -> None:
    @queue.topic("odd", max_attempts=2, backoff=FAST_RETRY)
    async def odd(body: None, task: Task) -> None:
        seen.add(("odd", task.attempt))
        raise Retry(delay=-1)  # e.g. a computed delay that went negative

    @queue.topic("fine")
    async def fine(body: None) -> None:
        seen.add(("fine", 0))

    # Run by hand rather than with start_worker: a crashed worker must fail this test, not
    # the fixture's teardown.
    worker = Worker(queue, concurrency=1)
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        task_id = await odd.send(None)
        await seen.wait(1)
        await asyncio.sleep(0.1)
        assert not run.done(), f"the worker died: {run.exception()!r}"
        await fine.send(None)
        await seen.wait(2)
        # The failed attempt was recorded instead of leaving the lease to expire.
        info = await queue.get("odd", task_id)
        assert info is not None and info.state != "reserved"
    finally:
        worker.stop()
        worker.stop()
        await asyncio.gather(run, return_exceptions=True)


# -- TTR and leases ----------------------------------------------------------------------------


async def test_handler_past_its_ttr_is_cancelled_and_retried(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    cancelled = asyncio.Event()

    @queue.topic("slow", ttr=0.2, backoff=FAST_RETRY)
    async def slow(body: None, task: Task) -> None:
        seen.add((task.attempt, time.monotonic(), await queue.get("slow", task.id)))
        if task.attempt == 1:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    await start_worker(queue)
    task_id = await slow.send(None)
    await seen.wait(2)
    await wait_gone(queue, "slow", task_id)
    (_, first, _), (attempt, second, info) = seen.items
    assert cancelled.is_set()
    assert attempt == 2
    # The TTR (the worker gives up a few ms early, to nack before the lease ends), then
    # the backoff.
    assert second - first >= 0.2 * 0.9 + 0.05
    assert info.last_error.startswith("TTRExceeded")


async def test_extend_keeps_a_long_handler_alive(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("long", ttr=0.3, backoff=FAST_RETRY)
    async def long(body: None, task: Task) -> None:
        await task.extend(2.0)
        seen.add(("extended", await queue.get("long", task.id)))
        await asyncio.sleep(0.6)  # twice the original TTR
        seen.add(("done", task.attempt))

    await start_worker(queue)
    task_id = await long.send(None)
    await seen.wait(2)
    await wait_gone(queue, "long", task_id)
    (_, info), done = seen.items
    assert done == ("done", 1)
    assert info.lease_deadline is not None
    assert info.lease_deadline.timestamp() - time.time() > 0.6
    assert info.last_error is None
    await asyncio.sleep(0.1)
    assert len(seen.items) == 2  # never redelivered


async def test_extend_never_shortens_the_lease(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job", ttr=1.0)
    async def job(body: None, task: Task) -> None:
        await task.extend(0.05)
        await asyncio.sleep(0.2)  # past the 0.05 s, well within the 1 s TTR
        seen.add(task.attempt)

    await start_worker(queue)
    task_id = await job.send(None)
    assert await seen.wait(1) == [1]
    await wait_gone(queue, "job", task_id)


async def _cancelled_vs_lease(queue: Queue, start_worker: StartWorker, extend: float) -> float:
    """Run a handler that never returns; return how long before its lease ends in Redis
    the worker cancelled it (negative: after, when another worker may already run it)."""
    result: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    # A 1 s lease: the worker's safety margin before it (a few % of the TTR) then exceeds
    # the event-loop lag of a loaded machine.
    @queue.topic("hang", ttr=1.0, backoff=Backoff(initial=60))
    async def hang(body: None, task: Task) -> None:
        if extend:
            await task.extend(extend)
        info = await queue.get("hang", task.id)
        assert info is not None and info.lease_deadline is not None
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            result.set_result(info.lease_deadline.timestamp() - time.time())
            raise

    await start_worker(queue)
    await hang.send(None)
    async with asyncio.timeout(5):
        return await result


async def test_handler_is_cancelled_before_its_lease_ends(
    queue: Queue, start_worker: StartWorker
) -> None:
    """The worker stops a handler shortly before Redis would hand its task to another
    worker, so the attempt ends as TTRExceeded (with backoff), never run twice at once."""
    assert await _cancelled_vs_lease(queue, start_worker, extend=0) > 0


async def test_extended_handler_is_cancelled_before_its_lease_ends(
    queue: Queue, start_worker: StartWorker
) -> None:
    assert await _cancelled_vs_lease(queue, start_worker, extend=1.0) > 0


async def test_a_delivery_whose_lease_ran_out_before_it_started_is_not_run(
    queue: Queue, seen: Seen
) -> None:
    """A leased task still waiting for a consumer at its deadline (a blocking handler held
    up the loop) fails its attempt as TTRExceeded without running: by then another worker
    may be about to reclaim it.  Driven through the worker's parts: the state is hard to
    reach through a live worker's scheduling."""

    @queue.topic("job", ttr=30, backoff=FAST_RETRY)
    async def job(body: None) -> None:
        seen.add("ran")

    task_id = await job.send(None)
    worker = Worker(queue)
    keys = queue.keys("job")
    _, _, [(leased_id, raw)] = await queue.scripts.reserve(
        keys, limit=1, reclaim=0, ttr_ms=30_000, max_attempts=5
    )
    assert leased_id == task_id
    worker._accept(queue.topics["job"], keys, task_id, raw, started=0.0)  # long past
    delivery = worker._buffer.get_nowait()
    await wait_for(lambda: delivery.expired, 5, "its deadline's timer to fire")
    me = asyncio.current_task()
    assert me is not None
    await worker._executor.execute(delivery, me)
    info = await queue.get("job", task_id)
    assert info is not None and info.last_error is not None
    assert info.last_error.startswith("TTRExceeded: the lease ran out before")
    assert info.state == "delayed" and info.attempts == 1
    assert seen.items == []
    assert not worker._deadlines._timers


async def test_stale_lease_holder_is_fenced_off(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    """A zombie worker leased the task and stalled past its lease; the task is redelivered
    to a live worker, and whatever the zombie does later with its old token is refused."""
    release = asyncio.Event()

    @queue.topic("job", ttr=30)
    async def job(body: None, task: Task) -> None:
        seen.add(task)
        await release.wait()

    task_id = await job.send(None)
    keys = queue.keys("job")
    # The zombie: a reserve.lua call with a 300 ms lease, then silence.
    _, _, leased = await queue.scripts.reserve(
        keys, limit=1, reclaim=100, ttr_ms=300, max_attempts=5
    )
    [(zombie_id, raw)] = leased
    zombie = Envelope.parse(raw).token
    assert zombie_id == task_id

    started = time.monotonic()
    await start_worker(queue)
    [task] = await seen.wait(1)
    assert time.monotonic() - started >= 0.3 - 0.05  # only once the zombie's lease ran out
    assert task.attempt == 2
    assert task.token != zombie
    info = await queue.get("job", task_id)
    assert info is not None and info.state == "reserved"
    assert info.last_error is not None and info.last_error.startswith("LeaseExpired")

    assert await queue.scripts.ack(keys, [(task_id, zombie)]) == [False]
    assert await queue.scripts.extend(keys, task_id, zombie, 60_000) == 0
    outcome, _ = await queue.scripts.nack(keys, task_id, zombie, mode="retry", max_attempts=5)
    assert outcome == 0
    assert (await queue.get("job", task_id)).state == "reserved"  # type: ignore[union-attr]

    release.set()  # the live worker's ack goes through
    await wait_gone(queue, "job", task_id)
    assert len(seen.items) == 1


async def test_expired_lease_on_the_last_attempt_is_dead_lettered(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job", max_attempts=1)
    async def job(body: None) -> None:
        seen.add("ran")

    task_id = await job.send(None)
    # A worker leases the only attempt, then dies.
    await queue.scripts.reserve(queue.keys("job"), limit=1, reclaim=100, ttr_ms=200, max_attempts=1)
    await start_worker(queue)  # sleeps until that lease's deadline, then reclaims it
    info = await wait_state(queue, "job", task_id, "dead", timeout=1.5)
    assert info.last_error is not None and info.last_error.startswith("LeaseExpired")
    assert info.attempts == 1
    assert seen.items == []


async def test_handler_whose_lease_was_taken_over_cannot_extend_or_ack(
    queue: Queue, redis_client: redis.asyncio.Redis, start_worker: StartWorker, seen: Seen
) -> None:
    taken = asyncio.Event()

    @queue.topic("job", ttr=30)
    async def job(body: None, task: Task) -> None:
        await taken.wait()
        try:
            await task.extend(10)
        except LeaseLostError as exc:
            seen.add(exc)

    task_id = await job.send(None)
    await start_worker(queue)
    keys = queue.keys("job")
    await wait_state(queue, "job", task_id, "reserved")
    # The lease runs out while the handler is stuck (as if its loop stalled past the TTR);
    # another worker reclaims and leases the task.
    await redis_client.zadd(keys.reserved, {task_id: 0})
    _, _, leased = await queue.scripts.reserve(
        keys, limit=1, reclaim=100, ttr_ms=30_000, max_attempts=5
    )
    [(_, raw)] = leased
    other = Envelope.parse(raw).token

    taken.set()
    [exc] = await seen.wait(1)
    assert isinstance(exc, LeaseLostError)
    await asyncio.sleep(0.1)  # the stale handler returns; its ack must be refused
    info = await queue.get("job", task_id)
    assert info is not None and info.state == "reserved" and info.attempts == 2
    assert await queue.scripts.ack(keys, [(task_id, other)]) == [True]


# -- concurrency and topics ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tasks", "concurrency", "sleep", "within"),
    [
        (12, 3, 0.05, 5),
        # 150 slots take two reserve calls (a call leases at most 100) and must all fill.
        (300, 150, 0.2, 10),
    ],
    ids=["small", "above-one-reserve-batch"],
)
async def test_concurrency_bound_is_respected(
    queue: Queue,
    start_worker: StartWorker,
    tasks: int,
    concurrency: int,
    sleep: float,
    within: float,
) -> None:
    running = peak = done = 0

    @queue.topic("work")
    async def work(body: int) -> None:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(sleep)
        running -= 1
        done += 1

    for n in range(tasks):
        await work.send(n)
    await start_worker(queue, concurrency=concurrency)
    async with asyncio.timeout(within):
        while done < tasks:
            await asyncio.sleep(0.01)
    assert peak == concurrency


async def test_workers_sharing_a_topic_run_each_task_once(
    queue: Queue, start_worker: StartWorker
) -> None:
    runs: dict[str, int] = {}

    @queue.topic("work")
    async def work(body: None, task: Task) -> None:
        runs[task.id] = runs.get(task.id, 0) + 1
        await asyncio.sleep(0.001)

    for _ in range(3):
        await start_worker(queue, concurrency=5)
    ids = [await work.send_delayed(None, delay=(n % 10) * 0.02) for n in range(200)]
    async with asyncio.timeout(10):
        while len(runs) < len(ids):
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert runs == dict.fromkeys(ids, 1)


async def test_one_worker_serves_many_topics(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    names = [f"topic.{n}" for n in range(6)]
    for name in names:

        @queue.topic(name)
        async def handler(body: int, task: Task) -> None:
            seen.add((task.topic, body))

    await start_worker(queue, concurrency=4)
    for name in names:
        for n in range(3):
            await queue.send_delayed(name, n, delay=0.01 * n)
    await seen.wait(18)
    assert sorted(seen.items) == sorted((name, n) for name in names for n in range(3))


async def test_topics_subset_leaves_other_topics_alone(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    for name in ("a", "b", "c"):

        @queue.topic(name)
        async def handler(body: None, task: Task) -> None:
            seen.add(task.topic)

    await start_worker(queue, topics=["a", "c"])
    other = await queue.send("b", None)
    for name in ("a", "c"):
        await queue.send(name, None)
    await seen.wait(2)
    await asyncio.sleep(0.1)
    assert sorted(seen.items) == ["a", "c"]
    info = await queue.get("b", other)
    assert info is not None and info.state == "ready" and info.attempts == 0


async def test_worker_rejects_bad_settings(queue: Queue) -> None:
    with pytest.raises(InvalidInputError, match="no topics"):
        Worker(queue)

    @queue.topic("a")
    async def a(body: None) -> None:
        pass

    with pytest.raises(InvalidInputError, match="nope"):
        Worker(queue, topics=["a", "nope"])
    for concurrency in (0, -1, True, 1.5):
        with pytest.raises(InvalidInputError):
            Worker(queue, concurrency=concurrency)  # type: ignore[arg-type]


# -- cancel and reschedule while a worker runs ----------------------------------------------------


async def test_cancel_before_due_never_runs(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job")
    async def job(body: str) -> None:
        seen.add(body)

    await start_worker(queue)
    cancelled = await job.send_delayed("cancelled", 0.15)
    await job.send_delayed("kept", 0.2)
    assert await queue.cancel("job", cancelled)
    await seen.wait(1)
    await asyncio.sleep(0.1)
    assert seen.items == ["kept"]
    assert await queue.get("job", cancelled) is None
    assert not await queue.cancel("job", cancelled)


async def test_reschedule_earlier_runs_earlier(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job")
    async def job(body: None, task: Task) -> None:
        seen.add(lateness(task, time.time()))

    await start_worker(queue)
    task_id = await job.send_delayed(None, 10)
    await asyncio.sleep(0.2)  # the worker now sleeps towards the old due time
    assert await queue.reschedule("job", task_id, delay=0.05)
    [late] = await seen.wait(1, timeout=1.5)  # well before the idle recheck
    assert -EARLY <= late <= LATE


async def test_reschedule_later_runs_later(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    @queue.topic("job")
    async def job(body: None, task: Task) -> None:
        seen.add((time.time(), task.due_at.timestamp()))

    await start_worker(queue)
    task_id = await job.send_delayed(None, 0.1)
    moved = time.time()
    assert await queue.reschedule("job", task_id, delay=0.3)
    [(started, due)] = await seen.wait(1)
    assert started >= moved + 0.3 - EARLY
    assert -EARLY <= started - due <= LATE


async def test_cancel_while_running_is_refused_and_the_task_completes(
    queue: Queue, start_worker: StartWorker, seen: Seen
) -> None:
    running, release = asyncio.Event(), asyncio.Event()

    @queue.topic("job")
    async def job(body: None) -> None:
        running.set()
        await release.wait()
        seen.add("done")

    await start_worker(queue)
    task_id = await job.send(None)
    async with asyncio.timeout(5):
        await running.wait()
    assert not await queue.cancel("job", task_id)
    assert not await queue.reschedule("job", task_id, delay=10)
    assert (await queue.get("job", task_id)).state == "reserved"  # type: ignore[union-attr]
    release.set()
    assert await seen.wait(1) == ["done"]
    await wait_gone(queue, "job", task_id)
