"""What a worker logs, on a real worker and Redis: a TTR overrun, the reason middleware
sees for a cancel, and a Redis outage told once (then at most once a minute) and its end.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from delayq import Backoff, CallNext, Outcome, Queue, Task, Worker
from tests.fixtures_delayq import StartWorker

FAST_RETRY = Backoff(initial=0.05, jitter=0)


class Outcomes:
    """A worker's ``on_outcome`` hook that tests can wait on."""

    def __init__(self) -> None:
        self.items: list[Outcome] = []
        self._changed = asyncio.Event()

    def __call__(self, outcome: Outcome) -> None:
        self.items.append(outcome)
        self._changed.set()

    async def wait(self, count: int, timeout: float = 10.0) -> list[Outcome]:
        async with asyncio.timeout(timeout):
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.items


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
    seen: list[str] = []

    @queue.middleware
    async def record(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError as exc:
            seen.append(str(exc))
            raise

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
    seen: list[str] = []
    started = asyncio.Event()

    @queue.middleware
    async def record(task: Task, call_next: CallNext) -> None:
        try:
            await call_next()
        except asyncio.CancelledError as exc:
            seen.append(str(exc))
            raise

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
