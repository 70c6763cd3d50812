"""Scenario 23: aborting a running task (``Queue.cancel(..., running=True)``) under faults.

- The worker holding the lease is frozen (SIGSTOP) when the abort lands, then resumed: its
  late ack is refused (or, with its handler still awaiting, the handler is cancelled when
  the abort's message reaches it), and the task never runs again, past its lease's TTR.
- The holder was killed: the abort succeeds, and the task never runs again.
- An abort racing the natural ack, 1,000 times: every task ends exactly once, acked or
  cancelled, and the topic's history and the task's result say which (the one that won
  in Redis).
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from delayq import Queue
from tests.faults.apps.plan import WORK_TOPIC
from tests.faults.checker import read_log
from tests.fixtures_delayq import StartWorker
from tests.helpers import redis_time_passes, wait_for
from tests.test_events import Events

TTR = 1.5


def _events(log_dir: Path, task_id: str) -> list[tuple[int, int, str]]:
    return [(d.attempt, d.pid, d.event) for d in read_log(log_dir) if d.task_id == task_id]


@pytest.mark.parametrize(
    ("steps", "ends"),
    [
        # Blocked in the handler (the loop frozen with it): on SIGCONT the handler returns
        # and its ack is refused by Redis.
        ([["block", 700]], "late ack refused"),
        # Awaiting in the handler: on SIGCONT the abort's message cancels it.
        ([["sleep", 60_000]], "handler cancelled"),
    ],
)
async def test_23_abort_while_the_worker_is_frozen(
    steps: list[list[Any]], ends: str, make_redis_server: Any, spawn_worker: Any,
    make_queue: Any, log_dir: Path,
) -> None:  # fmt: skip
    server = make_redis_server()
    worker = await spawn_worker(server, ttr=TTR).started()
    queue: Queue = make_queue(server.url)
    task_id = await queue.send(WORK_TOPIC, {"plan": {"1": steps}}, task_id="abort-me")
    await wait_for(lambda: (1, worker.pid, "start") in _events(log_dir, task_id), 5, "start")
    worker.signal(signal.SIGSTOP)
    try:
        assert await queue.cancel(WORK_TOPIC, task_id, running=True)
        assert await queue.get(WORK_TOPIC, task_id) is None
    finally:
        worker.signal(signal.SIGCONT)
    if ends == "late ack refused":
        refusal = re.compile(rf"\back of \S*{task_id}\b.*refused")
        await wait_for(lambda: refusal.search(worker.output()), 5, "the late ack's refusal")
        assert (1, worker.pid, "done") in _events(log_dir, task_id)  # the handler returned
    else:
        await wait_for(
            lambda: (1, worker.pid, "fail:CancelledError") in _events(log_dir, task_id), 5,
            "the handler's cancellation",
        )  # fmt: skip
        assert re.search(rf"\S*{task_id} aborted: cancelling its handler", worker.output())
    # Past the lease's TTR nothing is left to reclaim: the task never runs again, while
    # the worker goes on with other tasks.
    await redis_time_passes(queue.redis, int(TTR * 1000) + 500)
    await queue.send(WORK_TOPIC, {}, task_id="marker")
    await wait_for(lambda: (1, worker.pid, "done") in _events(log_dir, "marker"), 10, "marker")
    assert [e for e in _events(log_dir, task_id) if e[2] == "start"] == [(1, worker.pid, "start")]
    assert await queue.get(WORK_TOPIC, task_id) is None
    assert worker.alive
    assert " ERROR " not in worker.output() and "Traceback" not in worker.output()


async def test_23_abort_after_the_holding_worker_was_killed(
    make_redis_server: Any, spawn_worker: Any, make_queue: Any, log_dir: Path
) -> None:
    """The holder died (SIGKILL) with the lease: the abort still succeeds, and the next
    worker, past the dead lease's TTR, never runs the task."""
    server = make_redis_server()
    dead = await spawn_worker(server, ttr=TTR).started()
    queue: Queue = make_queue(server.url)
    task_id = await queue.send(WORK_TOPIC, {"plan": {"1": [["sleep", 60_000]]}}, task_id="orphan")
    await wait_for(lambda: (1, dead.pid, "start") in _events(log_dir, task_id), 5, "start")
    dead.kill()
    assert await queue.cancel(WORK_TOPIC, task_id, running=True)
    await redis_time_passes(queue.redis, int(TTR * 1000) + 500)
    other = await spawn_worker(server, ttr=TTR).started()
    await queue.send(WORK_TOPIC, {}, task_id="marker")
    await wait_for(lambda: (1, other.pid, "done") in _events(log_dir, "marker"), 10, "marker")
    assert [e for e in _events(log_dir, task_id) if e[2] == "start"] == [(1, dead.pid, "start")]
    assert await queue.get(WORK_TOPIC, task_id) is None


ROUNDS = 1000
AT_ONCE = 50


async def test_23_abort_racing_the_natural_ack_ends_each_task_once(
    make_redis_server: Any, make_queue: Any, start_worker: StartWorker
) -> None:
    """Each task's handler returns after 0-3 ms while an abort is sent 0-3 ms after it
    started: whichever reaches Redis first wins, and the other is refused."""
    server = make_redis_server()
    queue: Queue = make_queue(server.url)
    rng = random.Random(23)
    started: dict[str, asyncio.Event] = {}
    runs: dict[str, int] = {}

    @queue.topic("race", history=ROUNDS * 2, results=600, max_attempts=1, ttr=30)
    async def handle(body: dict[str, Any]) -> None:
        task_id = body["id"]
        runs[task_id] = runs.get(task_id, 0) + 1
        started[task_id].set()
        await asyncio.sleep(body["work"])

    events = Events()
    queue.hooks.add_listener(events)
    await start_worker(queue, concurrency=AT_ONCE)
    aborted: dict[str, bool] = {}

    async def one(n: int) -> None:
        task_id = f"race-{n}"
        started[task_id] = asyncio.Event()
        await queue.send("race", {"id": task_id, "work": rng.uniform(0, 0.003)}, task_id=task_id)
        await started[task_id].wait()
        await asyncio.sleep(rng.uniform(0, 0.003))
        aborted[task_id] = await queue.cancel("race", task_id, running=True)

    for first in range(0, ROUNDS, AT_ONCE):
        async with asyncio.timeout(60):
            await asyncio.gather(*(one(n) for n in range(first, first + AT_ONCE)))

    async def all_recorded() -> bool:
        return len(await queue.history("race", limit=ROUNDS * 2)) >= ROUNDS

    await wait_for(all_recorded, 30, "a history record for every task")
    records = await queue.history("race", limit=ROUNDS * 2)
    outcomes = {r.id: r.outcome for r in records}
    assert len(records) == ROUNDS == len(outcomes), "each task ends once"
    for task_id, was_aborted in aborted.items():
        assert outcomes[task_id] == ("cancelled" if was_aborted else "acked"), task_id
        result = await queue.result("race", task_id)
        assert result is not None and result.outcome == outcomes[task_id], task_id
    assert all(n == 1 for n in runs.values()) and len(runs) == ROUNDS  # never run twice
    acked = sum(1 for o in outcomes.values() if o == "acked")
    await wait_for(lambda: events.kinds().count("acked") == acked, 10, "the acked events")
    assert "retried" not in events.kinds() and "dead" not in events.kinds()
    both = {"acked": acked, "cancelled": ROUNDS - acked}
    assert all(both.values()), f"the race went one way only: {both}"
    reserved = queue.keys("race").reserved
    assert await queue.redis.zcount(reserved, "-inf", "(inf") == 0  # no lease left behind
    assert [t for t in aborted if await queue.get("race", t) is not None] == []
