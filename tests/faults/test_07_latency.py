"""Scenario 7: latency spikes between workers and Redis (the proxy holds every chunk 200 ms,
so each round trip costs 400 ms more).

No lease may be lost spuriously: a worker's own deadline for a handler starts *before* its
reserve call is sent, so it always ends before Redis's lease does, and acks arrive in time.
Lateness grows by about the added round trips and returns to normal after the spike.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from tests.faults.apps.plan import real_now
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import Producer, sized, task_ids
from tests.helpers import wait_for

SPIKE_MS = 200
TTR = 2.0


SPIKES = sized(2, 10)
RATE = 100  # tasks per second, well within what two workers handle even during a spike


async def _steady(producer: Producer, seconds: float) -> None:
    """Send RATE tasks a second, each due 0-300 ms later, for ``seconds``."""
    rng = random.Random(7)
    ids = iter(task_ids("lat", int(seconds * RATE)))
    lanes = []
    for task_id in ids:
        lanes.append(asyncio.create_task(producer.send(task_id, rng.uniform(0.0, 0.3))))
        await asyncio.sleep(1 / RATE)
    await asyncio.gather(*lanes)


def _p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


def _done(log_dir: Path) -> set[str]:
    return {d.task_id for d in read_log(log_dir) if d.event == "done"}


async def test_07_latency_spikes(
    make_redis_server, make_proxy, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    proxy = make_proxy(server)
    workers = [
        await spawn_worker(server, url=proxy.url(), concurrency=20, ttr=TTR,
                           steps=[["sleep", 100]]).started()
        for _ in range(2)
    ]  # fmt: skip
    producer = Producer(make_queue(server.url))
    sending = asyncio.create_task(_steady(producer, seconds=SPIKES * 2.0 + 0.5))
    spikes: list[tuple[float, float]] = []
    for _ in range(SPIKES):
        await asyncio.sleep(0.5)
        start = real_now()
        proxy.slow(SPIKE_MS)
        await asyncio.sleep(1.5)
        proxy.slow(0)
        spikes.append((start, real_now()))
    await sending
    await wait_for(lambda: producer.returned <= _done(log_dir), 15, "every task delivered")

    deliveries = read_log(log_dir)
    in_spike, outside = [], []
    for d in deliveries:
        if d.event == "done":
            spiked = any(a <= d.due <= b for a, b in spikes)
            (in_spike if spiked else outside).append((d.at - d.due) * 1000)
    report = check(f"07 latency spikes +{SPIKE_MS} ms", sent=producer.sent,
                   returned=producer.returned, deliveries=deliveries,
                   not_before=producer.not_before)  # fmt: skip
    report.extra.update(
        due_in_spike=len(in_spike),
        spike_lateness_p99_ms=_p99(in_spike),
        calm_lateness_p99_ms=_p99(outside),
        redelivered=sum(1 for d in deliveries if d.event == "done" and d.attempt > 1),
    )
    report.publish(record_property)
    assert_no_loss(report, allow_duplicates=False)
    assert report.extra["redelivered"] == 0, "a lease was lost to latency"
    for worker in workers:
        assert "refused" not in worker.output() and "LeaseExpired" not in worker.output()
