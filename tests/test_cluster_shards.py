"""A sharded topic on a real local Redis Cluster (3 masters + 3 replicas): its shards spread
over every master, and every call works across them (docs/cluster.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from delayq import Queue, ShardCountError, Task
from tests.helpers import wait_for
from tests.test_shards import ids_in

TOPIC = "order.close"
SHARDS = 12


@pytest.fixture
async def cq(cluster: Any, queue_name: str) -> Any:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    yield queue
    await queue.close()


def register(queue: Queue, shards: int = SHARDS) -> list[str]:
    done: list[str] = []

    async def handle(body: Any, task: Task) -> None:
        if isinstance(body, dict) and body.get("fail"):
            raise RuntimeError("no")
        done.append(task.id)

    queue.topic(TOPIC, shards=shards, max_attempts=1)(handle)
    return done


async def test_a_12_shard_topic_spreads_over_every_master(cluster: Any, cq: Queue) -> None:
    register(cq)
    owners = {cluster.node_of(keys.wheel).port for keys in cq.shard_keys(TOPIC)}
    assert len(owners) == 3
    await cq.send_many(TOPIC, [{}] * 240, delay=60)
    holding = set()
    for keys in cq.shard_keys(TOPIC):
        node = cluster.node_of(keys.wheel)
        with node.client() as client:
            if client.exists(keys.wheel):
                holding.add(node.port)
    assert holding == owners


async def test_calls_by_id_on_a_cluster(cq: Queue) -> None:
    register(cq)
    ids = [ids_in(shard, 1, SHARDS)[0] for shard in range(SHARDS)]
    for task_id in ids:
        assert await cq.send_delayed(TOPIC, {"n": 1}, 60, task_id=task_id) == task_id
        assert (await cq.send_delayed(TOPIC, {}, 60, task_id=task_id)).outcome == "kept"
        info = await cq.get(TOPIC, task_id)
        assert info is not None and info.body == {"n": 1}
        assert await cq.reschedule(TOPIC, task_id, delay=120)
    assert await cq.cancel(TOPIC, ids[5])
    assert await cq.get(TOPIC, ids[5]) is None
    assert (await cq.stats())[TOPIC].delayed == SHARDS - 1
    page = await cq.upcoming(TOPIC, limit=50)
    assert sorted(t.id for t in page.tasks) == sorted(set(ids) - {ids[5]})


async def test_a_worker_drains_every_shard_on_a_cluster(cq: Queue) -> None:
    done = register(cq)
    sent = await cq.send_many(TOPIC, [{}] * 120)
    later = await cq.send_many(TOPIC, [{}] * 24, delay=0.3)
    bad = [ids_in(shard, 1, SHARDS, stem="bad")[0] for shard in range(0, SHARDS, 3)]
    await cq.send_many(TOPIC, [{"fail": True}] * len(bad), task_ids=bad)
    async with cq.worker(concurrency=20):
        await wait_for(lambda: len(done) == 144, 30)

        async def all_dead() -> bool:
            return (await cq.stats())[TOPIC].dead == len(bad)

        await wait_for(all_dead, 5, "the bad tasks to be dead letters")
    assert sorted(done) == sorted(sent + later)
    stats = (await cq.stats())[TOPIC]
    assert (stats.dead, stats.ready, stats.delayed, stats.reserved) == (len(bad), 0, 0, 0)
    assert sorted(d.id for d in await cq.dead_letters(TOPIC)) == sorted(bad)
    assert await cq.replay(TOPIC, bad[1])
    assert (await cq.get(TOPIC, bad[1])).state == "ready"  # type: ignore[union-attr]


async def test_mismatch_and_discovery_on_a_cluster(cluster: Any, queue_name: str) -> None:
    writer = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    other = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    reader = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        register(writer)
        target = ids_in(7, 1, SHARDS)[0]
        await writer.send_delayed(TOPIC, {"n": 7}, 60, task_id=target)
        register(other, shards=3)
        with pytest.raises(ShardCountError):
            await other.send(TOPIC, {})
        info = await reader.get(TOPIC, target)  # undeclared: the recorded count
        assert info is not None and info.body == {"n": 7}
        assert await reader.shards.count(TOPIC) == SHARDS
    finally:
        for queue in (writer, other, reader):
            await queue.close()


async def test_a_consumer_long_polls_a_sharded_topic_on_a_cluster(cq: Queue) -> None:
    register(cq)
    target = ids_in(11, 1, SHARDS, stem="lp")[0]

    async def send_soon() -> None:
        await asyncio.sleep(0.3)
        await cq.send(TOPIC, {"v": 1}, task_id=target)

    sender = asyncio.create_task(send_soon())
    leased = await cq.consumer.lease(TOPIC, wait=8)
    await sender
    assert [t.id for t in leased] == [target]
    await cq.consumer.ack(leased[0].lease_token)
    assert TOPIC not in await cq.stats()
