"""Scenario 8: wrong clocks on worker and producer hosts.

Two workers run with ``time.time`` shifted by -5 s and +5 s, and a producer process with it
shifted by +1 h (tests/faults/apps/shifted.py).  delayq reads time only from Redis (due
times, leases) and from the monotonic clock (local timeouts), so: no delivery before its
due time, each due time equals Redis's time at the send plus the delay, and no lease is
reclaimed early (every task runs exactly once).

``send_at(at)`` is different by design: ``at`` is an absolute time chosen by the caller,
so a producer whose clock is an hour fast that computes ``at = now + 1 s`` schedules the
task an hour late.  Prefer ``send_delayed`` when the producer's clock is not trusted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import ROOT, sized
from tests.helpers import wait_for

TASKS = sized(200, 1_000)
SLACK = 0.0015  # Redis TIME is read in whole ms (rounded down), delays are rounded up


async def test_08_skewed_worker_and_producer_clocks(
    make_redis_server, spawn_worker, log_dir: Path, queue_name, tmp_path: Path, record_property
) -> None:
    server = make_redis_server()
    shifts = {}
    for shift in (-5.0, +5.0):
        worker = await spawn_worker(server, concurrency=20, ttr=2.0, clock_shift=shift).started()
        shifts[worker.pid] = shift
    sent_log = tmp_path / "sent.jsonl"
    env = {"REDIS_URL": server.url, "DELAYQ_FAULT_QUEUE": queue_name, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "tests.faults.apps.shifted", "3600", "tests.faults.apps.producer",
         str(TASKS), "0.2", "1.5", "20", str(sent_log)],
        cwd=ROOT, env=env, check=True, timeout=60,
    )  # fmt: skip
    records = [json.loads(line) for line in sent_log.read_text().splitlines()]
    ids = {r["id"] for r in records}

    await wait_for(
        lambda: ids <= {d.task_id for d in read_log(log_dir) if d.event == "done"},
        20,
        "every task delivered",
    )

    deliveries = read_log(log_dir)
    report = check("08 clocks: workers -5 s/+5 s, producer +1 h", sent=ids, returned=ids,
                   deliveries=deliveries,
                   not_before={r["id"]: r["before"] + r["delay"] for r in records})  # fmt: skip
    by_id = {d.task_id: d for d in deliveries if d.event == "done"}
    wrong_due = [
        r["id"] for r in records
        if not -SLACK <= by_id[r["id"]].due - r["delay"] - r["before"] <= r["after"] - r["before"] + SLACK
    ]  # fmt: skip
    offsets = {(d.pid, d.event) for d in deliveries if d.event.startswith("clock:")}
    report.extra.update(wrong_due=len(wrong_due), reclaimed=sum(d.attempt > 1 for d in deliveries))
    report.publish(record_property)

    assert_no_loss(report, allow_duplicates=False)
    assert not wrong_due, wrong_due[:5]
    assert report.extra["reclaimed"] == 0
    assert all(abs(r["offset"] - 3600) < 1 for r in records), "the producer's clock was shifted"
    assert offsets and all(event == f"clock:{shifts[pid]:+.1f}" for pid, event in offsets)
