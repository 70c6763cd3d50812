"""Scenario 5: Redis is down for a while (killed, then restarted from its AOF).

While it is down, ``send`` fails fast with ``RedisUnavailableError`` and writes nothing;
workers keep retrying and resume within 3 s of Redis's return; tasks that fell due during
the outage run late, none lost.

Sizes: the issue's outage is 10 s; CI uses 3 s (DELAYQ_FULL_FAULTS=1 for 10 s).

A *frozen* Redis (a network partition, a stopped process: connections open, no replies) is a
different fault: a send then waits for the socket timeout, is not retried (a timeout is
not; a lost connection is), and raises ``RedisUnavailableError``
(``test_05_send_to_a_frozen_redis_fails_fast``, with ``socket_timeout=1`` through a paused
proxy; ``tests/test_frozen_redis.py`` for the default 2 s and a SIGSTOPped server).  The
request may still reach Redis once the partition heals, so the outcome of that send is
unknown: retrying with the same ``task_id`` is safe and leaves exactly one task.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from delayq import RedisUnavailableError
from tests.faults.apps.plan import WORK_TOPIC, real_now
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import FULL, Producer, task_ids
from tests.helpers import wait_for

DOWN = 10.0 if FULL else 3.0
FAIL_FAST = 1.0  # a send to a dead Redis must raise within this many seconds
SOCKET_TIMEOUT = 1.0
FROZEN_BOUND = SOCKET_TIMEOUT + 1.0  # ... and to a frozen one: one timeout, not retried


def _done_at(log_dir: Path, task_id: str) -> float | None:
    return next((d.at for d in read_log(log_dir) if d.task_id == task_id and d.event == "done"),
                None)  # fmt: skip


async def test_05_redis_down(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")
    workers = [await spawn_worker(server, concurrency=20).started() for _ in range(2)]
    queue = make_queue(server.url)
    producer = Producer(queue)
    rng = random.Random(5)
    # Due before, during and just after the outage.
    await producer.send_many(task_ids("down", 300), lambda i: rng.uniform(0.2, DOWN + 1.0))

    killed = real_now()
    server.kill()
    failures = []
    for i in range(5):
        started = time.monotonic()
        with pytest.raises(RedisUnavailableError):
            await queue.send(WORK_TOPIC, {"i": i}, task_id=f"while-down-{i}")
        failures.append(time.monotonic() - started)
        await asyncio.sleep((DOWN - 0.5) / 5)
    await asyncio.sleep(max(0.0, killed + DOWN - real_now()))

    server.start()
    back = real_now()
    await producer.send("probe-after-return")
    await wait_for(lambda: _done_at(log_dir, "probe-after-return"), 10, "the probe's delivery")
    resumed = _done_at(log_dir, "probe-after-return") - back  # type: ignore[operator]
    await wait_for(
        lambda: producer.returned <= {d.task_id for d in read_log(log_dir) if d.event == "done"},
        15,
        "every task delivered",
    )
    for i in range(5):
        assert await queue.get(WORK_TOPIC, f"while-down-{i}") is None, "a failed send wrote"

    report = check(f"05 Redis down {DOWN:g} s", sent=producer.sent, returned=producer.returned,
                   deliveries=read_log(log_dir), not_before=producer.not_before,
                   lateness_from=killed)  # fmt: skip
    report.extra.update(down_s=back - killed, resume_s=resumed, send_fail_max_s=max(failures))
    report.publish(record_property)
    assert_no_loss(report)
    assert max(failures) < FAIL_FAST, failures
    assert resumed < 3.0, report.table()
    assert all(w.alive for w in workers)


async def test_05_send_to_a_frozen_redis_fails_fast(
    make_redis_server, make_proxy, make_queue, record_property
) -> None:
    server = make_redis_server()
    proxy = make_proxy(server)
    queue = make_queue(proxy.url(), socket_timeout=SOCKET_TIMEOUT)
    await queue.send(WORK_TOPIC, {"warm": True})  # a pooled connection exists
    proxy.pause()
    started = time.monotonic()
    try:
        async with asyncio.timeout(FROZEN_BOUND + 2):
            with pytest.raises(RedisUnavailableError):
                await queue.send(WORK_TOPIC, {"frozen": True}, task_id="frozen")
    finally:
        proxy.resume()
    waited = time.monotonic() - started
    record_property("frozen_send_fails_after_s", round(waited, 2))
    print(f"\nsend to a frozen Redis failed after {waited:.2f}s")
    assert waited <= FROZEN_BOUND
    # Outcome unknown: retrying with the same id is safe and leaves exactly one task.
    assert await queue.send(WORK_TOPIC, {"frozen": True}, task_id="frozen") == "frozen"
    assert (await queue.stats())[WORK_TOPIC].ready == 2  # "warm" and one "frozen"


@pytest.mark.no_recount("Redis is killed for good, without persistence")
async def test_05_sigterm_while_redis_is_down(
    make_redis_server, spawn_worker, make_queue, log_dir
) -> None:
    """A worker asked to stop while its acks cannot reach Redis gives them up (the leases
    expire and the tasks run again) and exits.

    Regression: the Acker, closed while retrying a failed flush, cleared its wake-up event,
    gave up (or succeeded) and then waited on that event forever: the worker never exited.
    """
    server = make_redis_server()
    # DEBUG: during an outage only its first failure is a WARNING (pacing.Outage).
    env = {"DELAYQ_LOG_LEVEL": "DEBUG"}
    worker = await spawn_worker(server, concurrency=2, grace=0.5, env=env).started()
    producer = Producer(make_queue(server.url))
    await producer.send("ack-pending", body={"plan": {"1": [["sleep", 300]]}})
    await wait_for(lambda: read_log(log_dir), 5, "the handler to start")
    server.kill()
    await wait_for(lambda: "ack failed" in worker.output(), 5, "the ack to fail")
    await worker.terminate(timeout=4.0)
