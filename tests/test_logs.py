"""What a worker logs, on a real worker and Redis: a TTR overrun, the reason middleware
sees for a cancel, and a Redis outage told once (then at most once a minute) and its end.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from delayq import CallNext, Queue, Task, Worker, pacing
from delayq.pacing import Outage
from delayq.testing import PrivateRedis
from tests.apps.runner import APP, Spawner, app_env, module_command
from tests.fixtures_delayq import StartWorker
from tests.helpers import FAST_RETRY, Outcomes


def record_cancels(queue: Queue) -> list[str]:
    """Give ``queue`` a middleware that records the message of each cancel it sees (and lets
    the cancel through); return the list it records into."""
    seen: list[str] = []

    @queue.middleware
    async def record(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError as exc:
            seen.append(str(exc))
            raise

    return seen


def worker_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "delayq.worker" and r.levelno == level]


async def test_a_retried_ttr_overrun_logs_a_warning_naming_topic_id_attempt_and_ttr(
    queue: Queue, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="delayq")

    @queue.topic("job", ttr=0.3, max_attempts=3, backoff=FAST_RETRY)
    async def job(body: None, task: Task) -> None:
        if task.attempt == 1:
            await asyncio.sleep(5)  # overruns its TTR

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None, task_id="slow")
    await outcomes.wait(2)
    assert [o.outcome for o in outcomes.items] == ["retried", "acked"]
    (warning,) = worker_records(caplog, logging.WARNING)
    assert warning.getMessage() == (
        "handler for job/slow ran past its TTR of 0.3s on attempt 1 of 3; cancelled"
    )


async def test_middleware_sees_a_ttr_cancel_that_names_the_ttr(
    queue: Queue, start_worker: StartWorker
) -> None:
    seen = record_cancels(queue)

    @queue.topic("job", ttr=0.3, max_attempts=1)
    async def job(body: None) -> None:
        await asyncio.sleep(5)

    outcomes = Outcomes()
    await start_worker(queue, on_outcome=outcomes)
    await queue.send("job", None, task_id="t")
    await outcomes.wait(1)
    assert outcomes.items[0].outcome == "dead"
    assert seen == ["TTR exceeded: job/t ran past its TTR of 0.3s"]


async def test_a_stop_cancels_middleware_without_a_ttr_reason_and_hands_the_task_back(
    queue: Queue,
) -> None:
    started = asyncio.Event()
    seen = record_cancels(queue)

    @queue.topic("job", ttr=60)
    async def job(body: None) -> None:
        started.set()
        await asyncio.sleep(60)

    outcomes = Outcomes()
    worker = Worker(queue, grace=0.05, on_outcome=outcomes)
    run = asyncio.create_task(worker.run(handle_signals=False))
    await queue.send("job", None, task_id="t")
    await asyncio.wait_for(started.wait(), 10)
    worker.stop()
    await asyncio.wait_for(run, 10)
    assert len(seen) == 1 and "TTR" not in seen[0]
    assert outcomes.items == []  # released, neither retried nor dead
    info = await queue.get("job", "t")
    assert info is not None and (info.state, info.attempts) == ("ready", 0)


# -- a Redis outage -------------------------------------------------------------------------


class Clock:
    """A clock the test moves by hand (the Outage's only input besides its reports)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_warning_then_at_most_one_line_a_minute_then_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="test.outage")
    clock = Clock()
    outage = Outage(logging.getLogger("test.outage"), clock=clock)
    outage.reachable()  # no outage: nothing to say
    for _ in range(3):  # three loops fail at once: one line
        outage.failed("reserve on 'a'", OSError("refused"))
    for _ in range(59):  # a failure a second for the rest of the minute: DEBUG only
        clock.now += 1
        outage.failed("ack", OSError("refused"))
    clock.now += 1  # a minute after the first line: one reminder
    outage.failed("reserve on 'b'", OSError("refused"))
    clock.now += 30.5
    outage.failed("ack", OSError("refused"))
    outage.reachable()
    outage.reachable()  # already told
    told = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert told == [
        ("WARNING", "Redis is unreachable: reserve on 'a' failed (refused); "
                    "retrying until it is back"),
        ("WARNING", "Redis still unreachable after 60s (63 failed calls; "
                    "the last: reserve on 'b': refused)"),
        ("INFO", "Redis is reachable again, after 90.5s unreachable"),
    ]  # fmt: skip
    assert outage.down is False


@pytest.fixture
def server(make_redis_server: Callable[..., PrivateRedis]) -> PrivateRedis:
    return make_redis_server()


@pytest.fixture
async def outage_queue(server: PrivateRedis, queue_name: str) -> AsyncIterator[Queue]:
    """A queue on the server the test kills (asked for before ``start_worker``, so the
    worker stops before this queue's client is closed)."""
    queue = Queue.from_url(server.url, name=queue_name)
    try:
        yield queue
    finally:
        await queue.close()


def outage_records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "delayq.worker" and r.levelno >= logging.INFO and "Redis" in r.getMessage()
    ]


async def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_a_worker_logs_an_outage_once_and_its_end_once(
    server: PrivateRedis, outage_queue: Queue, start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture, how: str,
) -> None:  # fmt: skip
    """Four topics' fetch loops and the wake-up subscription fail, many times, while
    Redis is down (killed: refused; frozen: no reply): one WARNING.  Back: one INFO line
    with how long it was not."""
    caplog.set_level(logging.DEBUG, logger="delayq")
    done = asyncio.Event()
    for name in ("a", "b", "c"):
        outage_queue.topic(name)(lambda body: None)

    @outage_queue.topic("d")
    async def d(body: None) -> None:
        done.set()

    worker = await start_worker(outage_queue)
    server.kill() if how == "killed" else server.pause()

    def failed(what: str) -> bool:
        return any(what in r.getMessage() for r in caplog.records if r.name == "delayq.worker")

    # The fetch loops and the subscription failed (a frozen server's calls wait out their
    # socket timeouts, one after another: the others' turn comes later), then more.
    every = all if how == "killed" else any
    await wait_until(lambda: every(failed(f"reserve on {t!r} failed") for t in "abcd")
                     and failed("the wake-up subscription failed"))  # fmt: skip
    failures = sum("failed" in r.getMessage() for r in caplog.records)
    await wait_until(lambda: sum("failed" in r.getMessage() for r in caplog.records) > failures)
    server.start() if how == "killed" else server.resume()
    await outage_queue.send("d", None)
    await asyncio.wait_for(done.wait(), 20)
    await wait_until(lambda: not worker._outage.down)
    told = outage_records(caplog)
    assert len(told) == 2, told
    (first_level, first), (last_level, last) = told
    assert first_level == "WARNING" and first.startswith("Redis is unreachable: ")
    assert last_level == "INFO" and last.startswith("Redis is reachable again, after ")


async def test_while_redis_stays_down_a_worker_reminds_at_most_once_an_interval(
    server: PrivateRedis, outage_queue: Queue, start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    interval = 0.5
    monkeypatch.setattr(pacing, "OUTAGE_REMINDER", interval)
    caplog.set_level(logging.INFO, logger="delayq")
    for name in ("a", "b", "c"):
        outage_queue.topic(name)(lambda body: None)
    await start_worker(outage_queue)
    server.kill()
    await wait_until(lambda: len(outage_records(caplog)) >= 3)
    server.start()
    await wait_until(lambda: outage_records(caplog)[-1][0] == "INFO")
    warnings = [
        r for r in caplog.records
        if r.name == "delayq.worker" and r.levelno == logging.WARNING
    ]  # fmt: skip
    assert warnings[0].getMessage().startswith("Redis is unreachable: ")
    assert all(r.getMessage().startswith("Redis still unreachable after ") for r in warnings[1:])
    # (How far apart the lines are is pinned, on a clock the test moves, by the test above.)


# -- a clean stop ---------------------------------------------------------------------------


async def test_a_sigterm_of_delayq_worker_logs_no_error(
    redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    """After async and plain ``def`` handlers ran (the latter leave idle pool threads
    behind), a SIGTERM stops the worker at exit status 0 with nothing at ERROR."""
    spawner = Spawner(tmp_path)
    try:
        worker = spawner.spawn(module_command("worker", APP), app_env(redis_url, queue_name))
        await worker.wait_started()
        async with Queue.from_url(redis_url, name=queue_name) as queue:
            await queue.send("blocking", {"sleep": 0}, task_id="sync")
            await queue.send("count", {}, task_id="async")
            await worker.wait_for_log("blocking handler started")
            async with asyncio.timeout(15):
                while await queue.get("blocking", "sync") or await queue.get("count", "async"):
                    await asyncio.sleep(0.02)  # until both are acked
        worker.send_signal(signal.SIGTERM)
        assert await worker.wait() == 0
        assert "worker stopped" in worker.log()
        assert " ERROR " not in worker.log(), worker.log()
    finally:
        spawner.close()
