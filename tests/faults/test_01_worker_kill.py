"""Scenario 1: a worker is SIGKILLed while it holds 100 leases.

Worker A (concurrency 100) leases a full batch of 100 and is killed -9; a standby worker B
must run all 100 again within TTR + 1 s of the kill, none lost.  Two variants: A's 100
handlers all running (awaiting), or a *prefetched* batch — the first handler blocks A's
event loop so the other 99 leased tasks were never started.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.apps.plan import WORK_TOPIC, real_now
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import Producer, leases, task_ids
from tests.helpers import wait_for

TTR = 2.0
HELD = 100
EXTRA = 150  # ready tasks beyond A's batch, drained by the standby meanwhile


@pytest.mark.parametrize(
    "variant, steps",
    [("running", [["sleep", 60_000]]), ("prefetched", [["block", 60_000]])],
)
async def test_01_worker_sigkill_holding_100_leases(
    variant, steps, make_redis_server, spawn_worker, make_queue, log_dir: Path, queue_name,
    record_property,
) -> None:  # fmt: skip
    server = make_redis_server()
    admin = server.client()
    reserved_key = f"delayq:{{{queue_name}:{WORK_TOPIC}}}:reserved"
    producer = Producer(make_queue(server.url))
    ids = task_ids(variant, HELD + EXTRA)
    # Sent before A starts, so that A's first reserve call leases all 100 at once.
    await producer.send_many(ids[:HELD])
    holder = await spawn_worker(server, concurrency=HELD, ttr=TTR, steps=steps).started()
    await wait_for(lambda: leases(admin, reserved_key) == HELD, 10, "A to lease 100")
    held = {m.decode() for m in admin.zrange(reserved_key, "-inf", "(inf", byscore=True)}
    await producer.send_many(ids[HELD:])
    standby = await spawn_worker(server, concurrency=HELD, ttr=TTR).started()

    await wait_for(lambda: len(_done(log_dir)) >= EXTRA, 10, "B to drain the rest")
    killed_at = real_now()
    holder.kill()
    await wait_for(lambda: held <= _done(log_dir), TTR + 5, "held tasks redelivered")
    # B may still be finishing the last of the rest (a loaded host): wait for every task,
    # so that what the check calls lost is lost, not late.
    await wait_for(lambda: set(ids) <= _done(log_dir), 10, "every task handled")

    deliveries = read_log(log_dir)
    redelivered = [d for d in deliveries if d.task_id in held and d.event == "done"]
    recovery = max(d.at for d in redelivered) - killed_at
    report = check(f"01 worker SIGKILL ({variant})", sent=producer.sent,
                   returned=producer.returned, deliveries=deliveries,
                   not_before=producer.not_before)  # fmt: skip
    report.extra.update(recovery_s=recovery, held=len(held))
    report.publish(record_property)
    admin.close()

    assert_no_loss(report)
    assert report.handled == HELD + EXTRA
    assert {d.attempt for d in redelivered} == {2}, "each held task counted one lost attempt"
    assert all(d.pid == standby.pid for d in redelivered)
    assert recovery <= TTR + 1.0, report.table()


def _done(log_dir: Path) -> set[str]:
    return {d.task_id for d in read_log(log_dir) if d.event == "done"}
