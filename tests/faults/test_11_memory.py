"""Scenario 11: Redis memory limits.

* An evicting ``maxmemory-policy`` would silently delete tasks: a worker warns at start
  (and does not with ``noeviction``).
* With ``noeviction`` and a full Redis, ``send`` and ``send_many`` raise
  ``RedisOutOfMemoryError`` and write nothing: write scripts carry a ``#!lua`` shebang, so
  Redis refuses them before they run instead of failing half-way.
* Workers still drain a full queue (reserve, ack, nack and extend may run at maxmemory:
  they free memory or keep it level), and a worker starts on a full Redis.
"""

from __future__ import annotations

import logging

import pytest

from delayq import RedisOutOfMemoryError
from tests.faults.apps.plan import WORK_TOPIC, install
from tests.faults.checker import read_log
from tests.faults.harness import consistency_problems
from tests.helpers import wait_for

SMALL = ["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]


@pytest.mark.parametrize("policy, warned", [("allkeys-lru", True), ("volatile-ttl", True),
                                            ("noeviction", False)])  # fmt: skip
async def test_11_evicting_policy_is_warned_at_start(
    policy, warned, make_redis_server, make_queue, start_worker, log_dir, caplog
) -> None:
    server = make_redis_server(extra_args=["--maxmemory-policy", policy])
    queue = make_queue(server.url)
    install(queue, log_dir)
    caplog.set_level(logging.WARNING, logger="delayq")
    await start_worker(queue, concurrency=1)
    assert ("maxmemory-policy" in caplog.text) is warned, caplog.text


def _fill(admin) -> int:
    """Write filler until Redis refuses with OOM; return how many values fit."""
    count = 0
    while True:
        try:
            admin.set(f"filler:{count}", b"x" * 4096)
        except Exception as exc:  # redis.exceptions.OutOfMemoryError
            assert "OOM" in str(exc) or "maxmemory" in str(exc), exc
            return count
        count += 1


async def test_11_full_redis_refuses_sends_whole(
    make_redis_server, make_queue, queue_name, record_property
) -> None:
    server = make_redis_server(extra_args=SMALL)
    queue = make_queue(server.url)
    await queue.send(WORK_TOPIC, {"n": 0}, task_id="before")
    admin = server.client()
    fillers = _fill(admin)
    before = {key: admin.dump(key) for key in admin.scan_iter(f"delayq:*{queue_name}*")}

    with pytest.raises(RedisOutOfMemoryError, match="out of memory"):
        await queue.send(WORK_TOPIC, {"n": 1}, task_id="while-full")
    with pytest.raises(RedisOutOfMemoryError):
        await queue.send_many(WORK_TOPIC, [{"n": i} for i in range(50)],
                              task_ids=[f"many-{i}" for i in range(50)])  # fmt: skip
    after = {key: admin.dump(key) for key in admin.scan_iter(f"delayq:*{queue_name}*")}
    assert after == before, "a refused send changed the queue's keys"
    assert await queue.get(WORK_TOPIC, "while-full") is None
    assert not consistency_problems(admin, queue_name, [WORK_TOPIC])
    record_property("filler_values", fillers)

    admin.delete(*[f"filler:{i}" for i in range(fillers)])  # room again: sends work
    assert await queue.send(WORK_TOPIC, {"n": 1}, task_id="while-full") == "while-full"
    admin.close()


async def _fill_with_tasks(queue, delay: float) -> int:
    """Send delayed tasks until Redis is full; return how many were stored."""
    sent = 0
    with pytest.raises(RedisOutOfMemoryError):
        while True:
            await queue.send_delayed(WORK_TOPIC, {"pad": "x" * 1000}, delay, task_id=f"f-{sent}")
            sent += 1
    return sent


async def test_11_workers_drain_a_full_redis(
    make_redis_server, make_queue, start_worker, log_dir
) -> None:
    """Regression: every write script was refused at maxmemory, reserve and ack included,
    so workers could not drain the queue that would free the memory."""
    server = make_redis_server(extra_args=SMALL)
    queue = make_queue(server.url)
    install(queue, log_dir)
    await start_worker(queue, concurrency=20)  # already running when Redis fills up
    sent = await _fill_with_tasks(queue, delay=1.0)  # the tasks themselves fill Redis
    await wait_for(
        lambda: len({d.task_id for d in read_log(log_dir) if d.event == "done"}) == sent,
        4,
        "the worker to drain the full queue",
    )
    assert await queue.send(WORK_TOPIC, {}, task_id="room-again") == "room-again"


async def test_11_worker_starts_on_a_full_redis(
    make_redis_server, make_queue, start_worker, log_dir
) -> None:
    """Regression: the worker's start-up SADD to the topic set (stats only) was fatal."""
    server = make_redis_server(extra_args=SMALL)
    queue = make_queue(server.url)
    install(queue, log_dir)
    await _fill_with_tasks(make_queue(server.url), delay=60.0)  # a producer filled it
    worker = await start_worker(queue, concurrency=20)
    assert worker.held == 0
