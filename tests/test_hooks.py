"""The lifespan and middleware hooks on a real worker and Redis: what handlers see, the
order things happen in, and that a hook that fails or misbehaves (raises, never calls
``call_next``, swallows a cancellation) cannot make the worker break its promises: the
task is acked only when its work finished, nothing is lost and no lease is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from delayq import (
    CallNext,
    InvalidInputError,
    LifespanError,
    Queue,
    Task,
    Worker,
)
from tests.fixtures_delayq import StartWorker
from tests.helpers import FAST_RETRY, Outcomes, wait_for


class Flag(BaseModel):
    fail: bool


@dataclass
class Resources:
    name: str
    log: list[str]


async def assert_settled(queue: Queue, topic: str) -> None:
    """No lease is left in Redis for ``topic``."""
    stats = (await queue.stats()).get(topic)
    assert stats is None or stats.reserved == 0, stats


# -- lifespan ------------------------------------------------------------------------------------


async def test_lifespan_state_reaches_handlers_and_wraps_the_whole_run(queue: Queue) -> None:
    log: list[str] = []
    seen: list[Any] = []

    @queue.lifespan
    async def resources() -> AsyncIterator[Resources]:
        log.append("enter")
        yield Resources("db", log)
        log.append("exit")

    @queue.topic("job")
    async def job(body: dict[str, int], task: Task[Resources]) -> None:
        seen.append(task.state)
        task.state.log.append(f"run {body['n']}")
        await asyncio.sleep(0.05)
        task.state.log.append(f"done {body['n']}")

    outcomes = Outcomes()
    worker = Worker(queue, concurrency=4, grace=5, on_outcome=outcomes)
    run = asyncio.create_task(worker.run(handle_signals=False))
    for n in range(3):
        await queue.send("job", {"n": n})
    await outcomes.wait(3)
    await queue.send("job", {"n": 9})
    # n=9 is running when the stop comes: exit waits for it
    await wait_for(lambda: "run 9" in log, 5, "n=9 to start")
    worker.stop()
    await asyncio.wait_for(run, 10)

    assert log[0] == "enter" and log[-1] == "exit"
    assert log.count("enter") == log.count("exit") == 1
    assert "done 9" in log and log.index("done 9") < log.index("exit")
    assert all(isinstance(s, Resources) and s is seen[0] for s in seen)
    assert len(seen) == 4


async def test_without_a_lifespan_state_is_none(queue: Queue, start_worker: StartWorker) -> None:
    states: list[Any] = []

    @queue.topic("job")
    async def job(body: None, task: Task) -> None:
        states.append(task.state)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None)
    await outcomes.wait(1)
    assert states == [None]


async def test_lifespan_as_a_context_manager_factory(
    queue: Queue, start_worker: StartWorker
) -> None:
    @asynccontextmanager
    async def resources() -> AsyncIterator[str]:
        yield "from a context manager"

    queue.lifespan(resources)
    states: list[Any] = []

    @queue.topic("job")
    async def job(body: None, task: Task[str]) -> None:
        states.append(task.state)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None)
    await outcomes.wait(1)
    assert states == ["from a context manager"]


async def test_lifespan_raising_on_entry_stops_the_worker_before_any_lease(queue: Queue) -> None:
    ran: list[str] = []

    @queue.lifespan
    async def resources() -> AsyncIterator[None]:
        raise ConnectionRefusedError("database is down")
        yield  # an async generator

    @queue.topic("job")
    async def job(body: None) -> None:
        ran.append("ran")

    await queue.send("job", None, task_id="waiting")
    worker = Worker(queue, concurrency=2)
    with pytest.raises(LifespanError, match=r"resources raised on entry.*database is down") as err:
        await asyncio.wait_for(worker.run(handle_signals=False), 10)
    assert isinstance(err.value.__cause__, ConnectionRefusedError)
    assert ran == []
    info = await queue.get("job", "waiting")
    assert info is not None and info.state == "ready" and info.attempts == 0


async def test_lifespan_is_left_when_the_start_fails(queue_name: str) -> None:
    """A worker stopped while it still waits for Redis leaves the lifespan it entered."""
    # A port nothing listens on: the worker keeps waiting for Redis.
    queue = Queue.from_url("redis://127.0.0.1:1/0", name=queue_name)
    log: list[str] = []

    @queue.lifespan
    async def resources() -> AsyncIterator[None]:
        log.append("enter")
        try:
            yield
        finally:
            log.append("exit")

    @queue.topic("job")
    async def job(body: None) -> None: ...

    try:
        run = asyncio.create_task(Worker(queue).run(handle_signals=False))
        async with asyncio.timeout(5):
            while not log:
                await asyncio.sleep(0.01)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    finally:
        await queue.close()
    assert log == ["enter", "exit"]


def test_lifespan_and_middleware_registration_is_checked(queue: Queue) -> None:
    @queue.lifespan
    async def first() -> AsyncIterator[None]:
        yield

    async def second() -> AsyncIterator[None]:
        yield

    with pytest.raises(InvalidInputError, match="already has a lifespan"):
        queue.lifespan(second)

    async def not_a_generator() -> None: ...

    other = Queue(queue.redis, name=f"{queue.name}x")
    with pytest.raises(InvalidInputError, match="async generator function"):
        other.lifespan(not_a_generator)

    def sync_middleware(task: Task, call_next: CallNext) -> None: ...

    async def one_argument(task: Task) -> None: ...

    with pytest.raises(InvalidInputError, match="async def"):
        queue.middleware(sync_middleware)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"\(task, call_next\)"):
        queue.middleware(one_argument)  # type: ignore[arg-type]
    assert queue.middlewares == []


# -- middleware -----------------------------------------------------------------------------------


async def test_middleware_wraps_handlers_in_registration_order(
    queue: Queue, start_worker: StartWorker
) -> None:
    log: list[str] = []

    def tracer(name: str) -> Callable[[Task, CallNext], Any]:
        async def middleware(task: Task, call_next: CallNext) -> None:
            log.append(f"{name} before {task.id}")
            await call_next()
            log.append(f"{name} after {task.id}")

        return middleware

    queue.middleware(tracer("outer"))
    queue.middleware(tracer("inner"))

    @queue.topic("job")
    async def job(body: int) -> None:
        log.append(f"handler {body}")

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", 7, task_id="t")
    await outcomes.wait(1)
    assert log == [
        "outer before t",
        "inner before t",
        "handler 7",
        "inner after t",
        "outer after t",
    ]
    assert outcomes.kinds() == ["acked"]


async def test_a_middleware_that_raises_fails_the_attempt(
    queue: Queue, start_worker: StartWorker
) -> None:
    handled: list[int] = []

    @queue.middleware
    async def refuse(task: Task, call_next: CallNext) -> None:
        raise PermissionError(f"no budget for attempt {task.attempt}")

    @queue.topic("job", max_attempts=2, backoff=FAST_RETRY)
    async def job(body: int) -> None:
        handled.append(body)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", 1, task_id="t")
    await outcomes.wait(2)
    assert outcomes.kinds() == ["retried", "dead"]
    assert outcomes.items[1].error == "PermissionError: no budget for attempt 2"
    assert handled == []
    dead = await queue.dead_letters("job")
    assert [d.id for d in dead] == ["t"]
    assert dead[0].last_error == "PermissionError: no budget for attempt 2"
    await assert_settled(queue, "job")


async def test_a_middleware_that_never_calls_call_next_ends_the_attempt_as_done(
    queue: Queue, start_worker: StartWorker
) -> None:
    handled: list[int] = []

    @queue.middleware
    async def skip_odd(task: Task, call_next: CallNext) -> None:
        if task.id.startswith("odd"):
            return
        await call_next()

    @queue.topic("job")
    async def job(body: int) -> None:
        handled.append(body)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", 1, task_id="odd-1")
    await queue.send("job", 2, task_id="even-2")
    await outcomes.wait(2)
    assert sorted(outcomes.kinds()) == ["acked", "acked"]
    assert handled == [2]
    assert await queue.get("job", "odd-1") is None
    await assert_settled(queue, "job")


async def test_a_middleware_that_swallows_the_ttr_cancel_does_not_ack(
    queue: Queue, start_worker: StartWorker
) -> None:
    """The TTR cancels the handler; the middleware catches that and returns as if done.
    The attempt still fails as TTRExceeded and the task runs again."""
    attempts: list[int] = []

    @queue.middleware
    async def swallow(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError:
            return  # the mistake under test

    @queue.topic("job", ttr=0.3, max_attempts=2, backoff=FAST_RETRY)
    async def job(body: None, task: Task) -> None:
        attempts.append(task.attempt)
        if task.attempt == 1:
            await asyncio.sleep(5)  # overruns its TTR

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None, task_id="t")
    await outcomes.wait(2)
    assert outcomes.kinds() == ["retried", "acked"]
    assert outcomes.items[0].error is not None
    assert outcomes.items[0].error.startswith("TTRExceeded")
    assert attempts == [1, 2]
    await assert_settled(queue, "job")


async def test_a_middleware_that_turns_the_ttr_cancel_into_an_error_still_reports_ttr(
    queue: Queue, start_worker: StartWorker
) -> None:
    @queue.middleware
    async def convert(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError:
            raise RuntimeError("handler was interrupted") from None

    @queue.topic("job", ttr=0.3, max_attempts=1)
    async def job(body: None) -> None:
        await asyncio.sleep(5)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None, task_id="t")
    await outcomes.wait(1)
    assert outcomes.kinds() == ["dead"]
    assert outcomes.items[0].error is not None
    assert outcomes.items[0].error.startswith("TTRExceeded")
    await assert_settled(queue, "job")


async def test_a_middleware_that_swallows_the_stop_cannot_ack_or_hold_the_task(
    queue: Queue,
) -> None:
    """The worker's stop cancels the running handler after the grace; the middleware
    swallows that and returns.  The task was not done: it is released (due again now,
    the attempt not counted), and the worker stops."""
    started = asyncio.Event()

    @queue.middleware
    async def swallow(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError:
            return

    @queue.topic("job", ttr=60)
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(60)

    outcomes = Outcomes()
    worker = Worker(queue, concurrency=2, grace=0.1, on_outcome=outcomes)
    run = asyncio.create_task(worker.run(handle_signals=False))
    await queue.send("job", None, task_id="t")
    await asyncio.wait_for(started.wait(), 10)
    worker.stop()
    await asyncio.wait_for(run, 10)

    assert outcomes.items == []
    info = await queue.get("job", "t")
    assert info is not None and info.state == "ready"
    assert info.attempts == 0  # a release does not count the attempt
    await assert_settled(queue, "job")


async def test_middleware_sees_the_task_and_its_state(
    queue: Queue, start_worker: StartWorker
) -> None:
    seen: list[tuple[str, int, Any]] = []

    @queue.lifespan
    async def resources() -> AsyncIterator[str]:
        yield "pool"

    @queue.middleware
    async def record(task: Task[str], call_next: CallNext) -> None:
        seen.append((task.topic, task.attempt, task.state))
        await call_next()

    @queue.topic("job")
    async def job(body: None) -> None: ...

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None)
    await outcomes.wait(1)
    assert seen == [("job", 1, "pool")]


async def test_on_outcome_reports_every_kind(queue: Queue, start_worker: StartWorker) -> None:
    @queue.topic("job", max_attempts=2, backoff=FAST_RETRY)
    async def job(body: Flag, task: Task) -> None:
        if body.fail:
            raise ValueError(f"attempt {task.attempt}")

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", {"fail": 0}, task_id="ok")
    await queue.send("job", {"fail": 1}, task_id="bad")
    # From a process without the handler, the body is not validated on send.
    await Queue(queue.redis, name=queue.name).send("job", {"wrong": 1}, task_id="invalid")
    await outcomes.wait(4)
    by_id = {(o.task_id, o.attempt): (o.outcome, o.error) for o in outcomes.items}
    assert by_id[("ok", 1)] == ("acked", None)
    assert by_id[("bad", 1)] == ("retried", "ValueError: attempt 1")
    assert by_id[("bad", 2)] == ("dead", "ValueError: attempt 2")
    kind, error = by_id[("invalid", 1)]
    assert kind == "dead" and error is not None and error.startswith("BodyValidationError")


async def test_on_outcome_is_the_listeners_events_of_its_own_worker(
    queue: Queue, start_worker: StartWorker
) -> None:
    """``on_outcome`` is told what the queue's listeners are told (acked, retried, dead:
    same tasks, attempts, errors and due times), and of its own worker's deliveries only."""
    from delayq import TaskEvent
    from delayq.task import from_millis

    @queue.topic("job", max_attempts=2, backoff=FAST_RETRY)
    async def job(body: Flag, task: Task) -> None:
        await asyncio.sleep(0.01)
        if body.fail:
            raise ValueError(f"attempt {task.attempt}")

    events: list[TaskEvent] = []
    queue.hooks.add_listener(events.append)
    first, second = Outcomes(), Outcomes()
    await start_worker(queue, on_outcome=first, concurrency=2)
    await start_worker(queue, on_outcome=second, concurrency=2)
    for n in range(10):
        await queue.send("job", {"fail": n % 2}, task_id=f"t{n}")
    async with asyncio.timeout(15):
        while len(first.items) + len(second.items) < 15:  # 5 acked, 5 x (retried, dead)
            await asyncio.sleep(0.02)
    told = [
        (e.task_id, e.attempt, e.kind, e.error, from_millis(e.due_ms or 0))
        for e in events
        if e.kind in ("acked", "retried", "dead")
    ]
    reported = [
        (o.task_id, o.attempt, o.outcome, o.error, o.due_at) for o in first.items + second.items
    ]
    assert sorted(told) == sorted(reported)
    assert len(reported) == 15 and len(set(reported)) == 15  # none told to both workers
