"""Scenario 2: a zombie worker (SIGSTOP past its TTR, then SIGCONT).

The task is redelivered to another worker while the zombie is frozen.  When the zombie
wakes up, its late ack / nack / extend must be refused by the lease's fencing token: the
second delivery fails on purpose, and its retry must still happen (a zombie ack that was
accepted would delete the task and lose that retry).

ack and nack are driven through a real frozen ``delayq worker`` process.  A frozen worker's
own TTR timer fires as soon as it resumes and cancels a handler awaiting ``task.extend``,
so the late extend (and, again, ack and nack) is also sent directly with the old token, by
the test playing the zombie.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from delayq import Queue
from tests.faults.apps.plan import WORK_TOPIC
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import Producer
from tests.helpers import wait_for

TTR = 1.5
# Second delivery: hold the lease for a while (the zombie acts meanwhile), then fail.
SECOND = [["sleep", 1000], ["fail"]]


def _events(log_dir: Path, task_id: str) -> list[tuple[int, int, str]]:
    return [(d.attempt, d.pid, d.event) for d in read_log(log_dir) if d.task_id == task_id]


@pytest.mark.parametrize(
    "late, first",
    [("ack", [["block", 700]]), ("nack", [["block", 700], ["fail"]])],
)
async def test_02_zombie_worker_late_outcome_refused(
    late, first, make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    zombie = await spawn_worker(server, ttr=TTR).started()
    producer = Producer(make_queue(server.url))
    task_id = f"zombie-{late}"
    await producer.send(task_id, body={"plan": {"1": first, "2": SECOND}})

    # Freeze the zombie while its handler is inside attempt 1 (blocked for 700 ms).
    await wait_for(lambda: (1, zombie.pid, "start") in _events(log_dir, task_id), 5, "start")
    zombie.signal(signal.SIGSTOP)
    other = await spawn_worker(server, ttr=TTR).started()
    await wait_for(
        lambda: (2, other.pid, "start") in _events(log_dir, task_id), TTR + 5, "redelivery"
    )
    zombie.signal(signal.SIGCONT)  # its late outcome now races the second lease
    # The worker logs e.g. "ack of work/zombie-ack refused: its lease was lost".
    refusal = re.compile(rf"\b{'ack' if late == 'ack' else 'retry'} of \S*{task_id}\b.*refused")
    await wait_for(lambda: refusal.search(zombie.output()), 5, "the zombie's refusal")
    await wait_for(
        lambda: any(a == 3 and e == "done" for a, _, e in _events(log_dir, task_id)),
        5,
        "the retry of the failed second delivery",
    )
    report = check(f"02 zombie late {late}", sent=producer.sent, returned=producer.returned,
                   deliveries=read_log(log_dir), not_before=producer.not_before)  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
    assert zombie.alive, "the zombie carries on after its outcome was refused"


async def test_02_zombie_late_ack_nack_extend_refused_by_token(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    queue: Queue = make_queue(server.url)
    keys = queue.keys(WORK_TOPIC)
    producer = Producer(queue)
    await producer.send("fenced", body={"plan": {"2": SECOND}})

    # The test is the zombie: it leases the task, then goes silent past the TTR.
    _, _, items = await queue.scripts.reserve(keys, limit=1, reclaim=10, ttr_ms=int(TTR * 1000),
                                              max_attempts=50)  # fmt: skip
    [(task_id, raw)] = items
    old_token = raw.split(b",")[1].decode()
    other = await spawn_worker(server, ttr=TTR).started()
    await wait_for(lambda: (2, other.pid, "start") in _events(log_dir, task_id), TTR + 5, "2nd")

    lease_before = (await queue.get(WORK_TOPIC, task_id)).lease_deadline
    assert await queue.scripts.extend(keys, task_id, old_token, 60_000) == 0
    assert await queue.scripts.ack(keys, [(task_id, old_token)]) == [False]
    assert (await queue.scripts.nack(keys, task_id, old_token, mode="release",
                                     max_attempts=50))[0] == 0  # fmt: skip
    info = await queue.get(WORK_TOPIC, task_id)
    assert info is not None and info.state == "reserved" and info.attempts == 2
    assert info.lease_deadline == lease_before, "the zombie's extend moved nothing"

    await wait_for(
        lambda: any(a == 3 and e == "done" for a, _, e in _events(log_dir, task_id)), 5, "retry"
    )
    report = check("02 zombie late ack/nack/extend (script level)", sent=producer.sent,
                   returned=producer.returned, deliveries=read_log(log_dir))  # fmt: skip
    report.publish(record_property)
    assert_no_loss(report)
