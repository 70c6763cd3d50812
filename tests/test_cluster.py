"""delayq on a real local Redis Cluster (3 masters + 3 replicas) and through Sentinel."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio

from delayq import Durability, Queue, Task
from delayq.redis.cluster import is_cluster
from delayq.redis.wakeup import Wakeup, WakeupHub
from tests.helpers import wait_for
from tests.redis_cluster import SentinelGroup

TOPICS = [f"t{i}" for i in range(6)]


@pytest.fixture
async def cq(cluster: Any, queue_name: str) -> Any:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    yield queue
    await queue.close()


def test_topics_spread_over_masters(cluster: Any, queue_name: str) -> None:
    """Each topic's keys share one hash tag: topics land on different masters."""
    owners = {cluster.node_of(f"delayq:{{{queue_name}:{t}}}:wheel").port for t in TOPICS * 3}
    owners |= {cluster.node_of(f"delayq:{{{queue_name}:x{i}}}:wheel").port for i in range(30)}
    assert len(owners) == 3


async def test_manage_calls_on_a_cluster(cq: Queue) -> None:
    assert is_cluster(cq.redis)
    for topic in TOPICS:
        assert await cq.send_delayed(topic, {"n": 1}, 60, task_id="a") == "a"
        assert (await cq.send_delayed(topic, {"n": 2}, 60, task_id="a")).outcome == "kept"
        await cq.send_delayed(topic, {"n": 3}, 60, task_id="b")
        info = await cq.get(topic, "a")
        assert info is not None and info.state == "delayed" and info.body == {"n": 1}
        assert await cq.reschedule(topic, "b", delay=120)
        assert await cq.cancel(topic, "b")
        assert await cq.get(topic, "b") is None
    stats = await cq.stats()
    assert set(stats) == set(TOPICS)
    assert all(s.delayed == 1 for s in stats.values())
    page = await cq.upcoming(TOPICS[0])
    assert [t.id for t in page.tasks] == ["a"]


async def test_worker_dead_letters_and_replay_on_a_cluster(cq: Queue) -> None:
    done: list[str] = []

    async def handle(body: dict[str, Any], task: Task) -> None:
        if body.get("fail"):
            raise RuntimeError("no")
        done.append(f"{task.topic}/{task.id}")

    for topic in TOPICS:
        cq.topic(topic, max_attempts=1)(handle)
    for topic in TOPICS:
        await cq.send(topic, {}, task_id="ok")
        await cq.send_delayed(topic, {}, 0.3, task_id="later")
        await cq.send(topic, {"fail": True}, task_id="bad")
    async with cq.worker(concurrency=20):
        await wait_for(lambda: len(done) == 2 * len(TOPICS), 10, "every ok and later task")
    assert sorted(done) == sorted(f"{t}/{i}" for t in TOPICS for i in ("ok", "later"))
    for topic in TOPICS:
        dead = await cq.dead_letters(topic)
        assert [d.id for d in dead] == ["bad"]
        assert await cq.replay(topic, "bad")
        assert (await cq.get(topic, "bad")).state == "ready"  # type: ignore[union-attr]


async def test_sharded_wakeups_reach_a_waiting_worker(cq: Queue) -> None:
    """The scripts SPUBLISH on the topic's shard channel; the worker's listener, one
    SSUBSCRIBE connection per master, wakes the topic's loop at once."""
    channels = [cq.keys(t).wake for t in TOPICS]
    wakeup = Wakeup(cq.redis, channels)
    task = asyncio.create_task(wakeup.run())
    try:
        await asyncio.wait_for(wakeup.subscribed.wait(), 10)
        for channel in channels:
            wakeup.event(channel).clear()
        for topic in TOPICS:
            await cq.send_delayed(topic, {}, 30, task_id="x")
        for channel in channels:
            await asyncio.wait_for(wakeup.event(channel).wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_long_poll_hub_subscribes_to_concrete_channels(cq: Queue) -> None:
    hub = WakeupHub(cq.redis, "unused-on-a-cluster")
    task = asyncio.create_task(hub.run())
    try:
        for topic in TOPICS[:3]:
            signal = hub.signal(cq.keys(topic).wake)
            await asyncio.wait_for(hub.subscribed.wait(), 10)
            event = signal.watch()
            await cq.send_delayed(topic, {}, 30, task_id="y")
            await asyncio.wait_for(event.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_consumer_long_poll_on_a_cluster(cq: Queue) -> None:
    async def send_soon() -> None:
        await asyncio.sleep(0.3)
        await cq.send("t1", {"v": 1}, task_id="poll")

    sender = asyncio.create_task(send_soon())
    loop = asyncio.get_running_loop()
    started = loop.time()
    leased = await cq.consumer.lease("t1", wait=5)
    waited = loop.time() - started
    await sender
    assert [t.id for t in leased] == ["poll"]
    assert waited < 4, "woken by the sharded wake-up, not by the end of the wait"
    await cq.consumer.ack(leased[0].lease_token)


async def test_durable_sends_per_master(cluster: Any, queue_name: str) -> None:
    queue = Queue.from_url(
        cluster.url, name=queue_name, cluster=True, durability=Durability(replicas=1)
    )
    try:
        for topic in TOPICS:
            assert await queue.send(topic, {}, task_id="d") == "d"
            assert (await queue.send(topic, {}, task_id="d")).outcome == "kept"
    finally:
        await queue.close()


async def test_an_existing_cluster_client_works(cluster: Any, queue_name: str) -> None:
    client = redis.asyncio.RedisCluster.from_url(cluster.url)
    try:
        queue = Queue(client, name=queue_name)
        await queue.send("t0", {}, task_id="z")
        assert (await queue.get("t0", "z")) is not None
    finally:
        await client.aclose()


async def test_from_sentinel(queue_name: str) -> None:
    with SentinelGroup() as group:
        queue = Queue.from_sentinel(group.addresses, service=group.service, name=queue_name)
        try:
            await queue.send("t0", {}, task_id="s")
            info = await queue.get("t0", "s")
            assert info is not None and info.state == "ready"
        finally:
            await queue.close()


async def test_cli_url_form_on_a_cluster_and_through_sentinel(
    cluster: Any, cq: Queue, queue_name: str
) -> None:
    from tests.apps.runner import app_env, module_command, run_cli

    await cq.send_delayed("t3", {"x": 1}, 60, task_id="c1")
    bare = app_env(cluster.url, "unused")
    del bare["DELAYQ_QUEUE"]
    args = ("--url", cluster.url, "--cluster", "--name", queue_name)
    stats = await run_cli(module_command("stats", *args, "--json"), bare)
    assert json.loads(stats.stdout)["t3"]["delayed"] == 1, stats.stderr
    got = await run_cli(module_command("get", *args, "t3", "c1"), bare)
    assert json.loads(got.stdout)["state"] == "delayed", got.stderr
    cancelled = await run_cli(module_command("cancel", *args, "t3", "c1"), bare)
    assert cancelled.returncode == 0, cancelled.stderr

    with SentinelGroup() as group:
        queue = Queue.from_sentinel(group.addresses, service=group.service, name=queue_name)
        try:
            await queue.send_delayed("t0", {}, 60, task_id="s1")
        finally:
            await queue.close()
        where = ",".join(f"{h}:{p}" for h, p in group.addresses)
        got = await run_cli(
            module_command("get", "--sentinel", where, "--service", group.service,
                           "--name", queue_name, "t0", "s1"),
            bare,
        )  # fmt: skip
        assert json.loads(got.stdout)["id"] == "s1", got.stderr
        missing = await run_cli(
            module_command("get", "--sentinel", where, "--name", queue_name, "t0", "s1"), bare
        )
        assert missing.returncode == 2 and "--service" in missing.stderr


async def test_pause_resume_and_periodic_on_a_cluster(cq: Queue) -> None:
    """control.lua and tick.lua publish with SPUBLISH too: a resume wakes the paused
    topic's loop, and a periodic topic's ticks run on whichever master owns it."""
    ran: list[str] = []
    ticks: list[str] = []

    async def handle(body: dict[str, Any], task: Task) -> None:
        ran.append(task.id)

    async def tick(task: Task) -> None:
        ticks.append(task.id)

    cq.topic("t2")(handle)
    cq.periodic("p0", every=0.2)(tick)
    await cq.pause("t2")
    await cq.send("t2", {}, task_id="held")
    assert (await cq.stats(["t2"]))["t2"].paused
    async with cq.worker(concurrency=5):
        await asyncio.sleep(0.8)
        assert ran == []
        await cq.resume("t2")
        await wait_for(lambda: ran and len(ticks) >= 2, 5, "the held task and two ticks")
    assert ran == ["held"]
    assert len(ticks) >= 2


async def test_bulk_dead_letters_and_forget_on_a_cluster(cq: Queue) -> None:
    @cq.topic("bulk", shards=3)
    async def handle(body: object) -> None: ...

    for n in range(6):
        await cq.send("bulk", {"n": n}, task_id=f"d{n}")
    for task in await cq.consumer.lease("bulk", limit=6):
        await cq.consumer.nack(task.lease_token, dead=True, error="boom")
    assert await cq.admin.replay_dead("bulk") == 6
    for task in await cq.consumer.lease("bulk", limit=6):
        await cq.consumer.nack(task.lease_token, dead=True, error="boom")
    assert await cq.admin.delete_dead("bulk") == 6
    assert await cq.stats(["bulk"]) == {}
    assert await cq.admin.forget("bulk")
    assert "bulk" not in await cq.topic_names()
