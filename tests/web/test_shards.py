"""The HTTP API on a sharded topic, on one Redis and on the local Redis Cluster: the app's
queue declares no handler, so it takes the shard count recorded in Redis (docs/cluster.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from delayq import Queue
from delayq.redis.keys import shard_of
from delayq.web import create_app
from tests.web.conftest import auth, tokens

P, R, C, A = auth("produce"), auth("read"), auth("consume"), auth("admin")
TOPIC = "order.close"
SHARDS = 12


async def declare(queue: Queue) -> None:
    """Record the topic's shard count, as a worker of the service that owns it does."""

    @queue.topic(TOPIC, shards=SHARDS)
    async def handle(body: Any) -> None: ...

    await queue.check_shards([TOPIC])


@pytest.fixture
async def http(queue: Queue) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(queue, tokens()))
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        yield client


async def round_trip(http: httpx.AsyncClient, queue: Queue) -> None:
    ids = [f"order-{n}" for n in range(36)]
    assert len({shard_of(i, SHARDS) for i in ids}) > SHARDS // 2
    for task_id in ids:
        sent = await http.post(
            f"/api/topics/{TOPIC}/tasks", json={"body": {"id": task_id}, "task_id": task_id},
            headers=P,
        )  # fmt: skip
        assert sent.status_code == 201, sent.text
    kept = await http.post(
        f"/api/topics/{TOPIC}/tasks", json={"body": {}, "task_id": ids[0]}, headers=P
    )
    assert kept.json()["outcome"] == "kept"
    info = (await http.get(f"/api/topics/{TOPIC}/tasks/{ids[5]}", headers=R)).json()
    assert info["body"] == {"id": ids[5]}
    stats = (await http.get("/api/stats", headers=R)).json()
    assert {t["name"]: t["ready"] for t in stats["topics"]} == {TOPIC: len(ids)}
    leased: list[dict[str, Any]] = []
    while len(leased) < len(ids):
        reply = await http.post(f"/api/topics/{TOPIC}/reserve", json={"max": 10}, headers=C)
        assert reply.status_code == 200, reply.text
        leased += reply.json()["tasks"]
    assert sorted(t["id"] for t in leased) == sorted(ids)
    *done, failed = leased
    for task in done:
        ack = await http.post(f"/api/leases/{task['lease_token']}/ack", headers=C)
        assert ack.status_code == 204, ack.text
    dead = await http.post(
        f"/api/leases/{failed['lease_token']}/nack", json={"dead": True, "error": "no"}, headers=C
    )
    assert dead.json()["outcome"] == "dead"
    page = (await http.get(f"/api/topics/{TOPIC}/dead", headers=R)).json()
    assert [t["id"] for t in page["tasks"]] == [failed["id"]]
    history = await http.get(f"/api/topics/{TOPIC}/history?limit=1", headers=R)
    assert history.status_code == 200 and history.json()["next_before"] is None, history.text
    counts = await queue.stats([TOPIC])
    assert (counts[TOPIC].dead, counts[TOPIC].ready, counts[TOPIC].reserved) == (1, 0, 0)


async def test_the_api_on_a_sharded_topic(
    http: httpx.AsyncClient, queue: Queue, queues: Callable[[], Queue]
) -> None:
    await declare(queues())
    await round_trip(http, queue)


async def test_the_api_on_a_sharded_topic_on_a_cluster(cluster: Any, queue_name: str) -> None:
    owner = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    served = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        await declare(owner)
        transport = httpx.ASGITransport(app=create_app(served, tokens()))
        async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as http:
            await round_trip(http, served)
    finally:
        await owner.close()
        await served.close()
