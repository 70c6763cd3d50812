"""The registry of live workers: heartbeats, queue.workers(), consumers per topic and the
oldest ready task's age in stats."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from datetime import UTC
from typing import Any

import pytest

from delayq import InvalidInputError, Queue, Worker, WorkerInfo
from delayq.fleet import live_workers
from delayq.redis.keys import RegistryKeys
from delayq.redis.registry import Registry
from delayq.worker.heartbeat import Heartbeat
from tests.helpers import wait_for

INTERVAL = 0.2


async def test_a_running_worker_is_listed_with_what_it_consumes(
    queue: Queue, start_worker: Any
) -> None:
    @queue.topic("a.one")
    async def one(body: dict[str, Any]) -> None: ...

    @queue.topic("a.two")
    async def two(body: dict[str, Any]) -> None: ...

    assert await queue.workers() == []
    worker = await start_worker(queue, concurrency=7, heartbeat=INTERVAL)
    await wait_for(queue.workers, 5, "the worker's first heartbeat")
    (info,) = await queue.workers()
    assert isinstance(info, WorkerInfo)
    assert info.id == worker.heartbeat.id
    assert (info.host, info.pid, info.kind) == (socket.gethostname(), os.getpid(), "worker")
    assert sorted(info.topics) == ["a.one", "a.two"]
    assert (info.concurrency, info.running) == (7, 0)
    assert info.started_at.tzinfo == UTC and info.last_seen >= info.started_at
    first_seen = info.last_seen

    async def beat_again() -> bool:
        (again,) = await queue.workers()
        return again.last_seen > first_seen and again.started_at == info.started_at

    await wait_for(beat_again, 5, "a later heartbeat keeping started_at")


async def test_a_clean_stop_leaves_the_list_at_once(queue: Queue, start_worker: Any) -> None:
    @queue.topic("b")
    async def handle(body: dict[str, Any]) -> None: ...

    worker = await start_worker(queue, heartbeat=60)
    await wait_for(queue.workers, 5, "the worker's first heartbeat")
    worker.stop()
    await wait_for(lambda: _none(queue), 5, "the entry removed on stop")


async def _none(queue: Queue) -> bool:
    return await queue.workers() == []


async def test_an_entry_expires_after_three_intervals_without_a_beat(queue: Queue) -> None:
    beat = Heartbeat(queue.registry, kind="http", topics=["c"], concurrency=1,
                     running=lambda: 0, interval=INTERVAL)  # fmt: skip
    await beat.beat()
    (info,) = await queue.workers()
    assert info.kind == "http"
    took = await wait_for(lambda: _none(queue), 5, "the entry to expire")
    assert took <= 3 * INTERVAL + 0.5  # 3 intervals after the beat, plus the poll's step
    _now, counts, _ = await queue.registry.consumers(["c"])
    assert counts == [0]


async def test_consumers_and_oldest_ready_age_in_stats(queue: Queue, start_worker: Any) -> None:
    @queue.topic("d.consumed")
    async def handle(body: dict[str, Any]) -> None:
        await asyncio.Event().wait()  # hold the lease: the topic keeps its ready tasks

    await queue.send_delayed("d.nobody", {"n": 1}, 0, task_id="x")
    await queue.send_delayed("d.nobody", {"n": 2}, 3600, task_id="later")
    stats = (await queue.stats())["d.nobody"]
    assert stats.consumers == 0
    assert stats.oldest_ready_age is not None and 0 <= stats.oldest_ready_age < 5
    await asyncio.sleep(0)

    await start_worker(queue, heartbeat=INTERVAL, grace=0)

    async def consumed() -> bool:
        await queue.send_delayed("d.consumed", {}, 0)
        return (await queue.stats(["d.consumed"]))["d.consumed"].consumers == 1

    await wait_for(consumed, 5, "the worker counted as a consumer", step=0.1)


async def test_a_topic_with_nothing_ready_has_no_oldest_age(queue: Queue) -> None:
    await queue.send_delayed("e", {}, 3600)
    stats = (await queue.stats())["e"]
    assert stats.oldest_ready_age is None
    assert stats.consumers == 0


def test_heartbeat_is_validated(queue: Queue) -> None:
    @queue.topic("f")
    async def handle(body: dict[str, Any]) -> None: ...

    with pytest.raises(InvalidInputError, match="heartbeat"):
        Worker(queue, heartbeat=0)


async def test_two_hundred_live_workers_list_quickly(queue: Queue) -> None:
    registry = Registry(queue.redis, queue.name)
    beats = [
        Heartbeat(
            registry,
            kind="worker",
            topics=[f"t{i % 10}", "all"],
            concurrency=50,
            running=lambda: 3,
            interval=60,
        )
        for i in range(200)
    ]
    await asyncio.gather(*(b.beat() for b in beats))
    workers = await live_workers(registry)
    assert len(workers) == 200
    assert {w.running for w in workers} == {3}
    _now, counts, _ = await registry.consumers(["all", "t3", "none"])
    assert counts == [200, 20, 0]


def test_the_registry_lives_in_one_slot() -> None:
    from redis.crc import key_slot

    keys = RegistryKeys.build("shop")
    names = [keys.workers, keys.info, keys.schedules, keys.clock, keys.consumers("a:b{c")]
    assert len({key_slot(n.encode()) for n in names}) == 1


async def test_the_registry_on_a_cluster(cluster: Any, queue_name: str) -> None:
    from tests.apps.runner import ROOT, module_command, run_cli

    cq = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:

        @cq.topic("g")
        async def handle(body: dict[str, Any]) -> None: ...

        async with cq.worker(heartbeat=INTERVAL) as worker:
            await wait_for(cq.workers, 5, "the worker listed")
            (info,) = await cq.workers()
            assert info.id == worker.heartbeat.id and info.topics == ["g"]
            await cq.send_delayed("g", {}, 3600)
            assert (await cq.stats(["g"]))["g"].consumers == 1
            listed = await run_cli(
                module_command("workers", "--url", cluster.url, "--name", queue_name,
                               "--cluster", "--json"),
                {**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            assert [w["id"] for w in json.loads(listed.stdout)] == [worker.heartbeat.id]
        assert await cq.workers() == []
    finally:
        await cq.close()


async def test_delayq_workers_lists_them_as_a_table_or_json(
    redis_url: str, queue: Queue, queue_name: str, start_worker: Any
) -> None:
    from tests.apps.runner import APP, app_env, module_command, run_cli

    @queue.topic("h")
    async def handle(body: dict[str, Any]) -> None: ...

    env = app_env(redis_url, queue_name)
    empty = await run_cli(module_command("workers", APP, "--json"), env)
    assert (empty.returncode, json.loads(empty.stdout)) == (0, [])
    worker = await start_worker(queue, concurrency=3, heartbeat=INTERVAL)
    await wait_for(queue.workers, 5, "the worker listed")
    bare = dict(env)
    del bare["DELAYQ_QUEUE"]
    as_json, table = await asyncio.gather(
        run_cli(
            module_command("workers", "--url", redis_url, "--name", queue_name, "--json"), bare
        ),
        run_cli(module_command("workers", APP), env),
    )
    assert as_json.returncode == 0, as_json.stderr
    (listed,) = json.loads(as_json.stdout)
    assert WorkerInfo.model_validate(listed).id == worker.heartbeat.id
    assert listed["topics"] == ["h"] and listed["concurrency"] == 3
    header, row = table.stdout.splitlines()
    assert header.split() == ["host", "pid", "kind", "running", "last", "seen", "topics"]
    assert row.split()[1:4] == [str(os.getpid()), "worker", "0/3"]
    assert row.split()[-1] == "h"


async def _calls(queue: Queue) -> int:
    stats = await queue.redis.info("commandstats")
    return sum(v.get("calls", 0) for k, v in stats.items() if k.startswith("cmdstat_"))


async def test_stats_per_topic_cost_the_same_with_2_or_200_live_workers(queue: Queue) -> None:
    await queue.send_many("all", [{}] * 50)

    async def cost() -> int:
        before = await _calls(queue)
        await queue.stats(["all"])
        return await _calls(queue) - before - 1  # less the INFO call itself

    beats = [
        Heartbeat(
            queue.registry,
            kind="worker",
            topics=["all"],
            concurrency=1,
            running=lambda: 0,
            interval=60,
        )
        for _ in range(200)
    ]
    await asyncio.gather(*(b.beat() for b in beats[:2]))
    with_two = await cost()
    await asyncio.gather(*(b.beat() for b in beats[2:]))
    assert await cost() == with_two
    assert (await queue.stats(["all"]))["all"].consumers == 200
