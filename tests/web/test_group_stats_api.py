"""``GET /api/topics/{topic}/groups``: a grouped topic's groups over HTTP (scope ``read``),
on a real Redis with tasks sent and leased through the real grouped paths."""

from __future__ import annotations

import httpx

from delayq import Queue
from tests.test_group_stats import grouped, send
from tests.web.conftest import auth

R = auth("read")


async def test_groups_most_ready_first(client: httpx.AsyncClient, queue: Queue) -> None:
    await grouped(queue, "orders/eu", max_running_per_group=1)
    await send(queue, "orders/eu", "a", ready=2, delayed=1)
    await send(queue, "orders/eu", "b", ready=4)
    await queue.consumer.lease("orders/eu", limit=10)  # one of each, both at their cap
    reply = await client.get("/api/topics/orders%2Feu/groups", headers=R)
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "topic": "orders/eu",
        "groups": [
            {"group": "b", "ready": 3, "delayed": 0, "running": 1, "limited": True},
            {"group": "a", "ready": 1, "delayed": 1, "running": 1, "limited": True},
        ],
    }
    top = await client.get("/api/topics/orders%2Feu/groups?limit=1", headers=R)
    assert [g["group"] for g in top.json()["groups"]] == ["b"]
    plain = await client.get("/api/topics/plain/groups", headers=R)
    assert plain.json() == {"topic": "plain", "groups": []}


async def test_bad_queries_answer_4xx_naming_the_field(client: httpx.AsyncClient) -> None:
    for query, field in (("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"),
                         ("limt=5", "limt")):  # fmt: skip
        reply = await client.get(f"/api/topics/t/groups?{query}", headers=R)
        assert reply.status_code == 422, (query, reply.text)
        assert reply.json()["field"] == field, reply.json()
    bad_name = await client.get("/api/topics/%00bad/groups", headers=R)
    assert bad_name.status_code in (404, 422)
    assert bad_name.json()["field"] == "topic"


async def test_groups_need_a_token_with_read(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/topics/t/groups")).status_code == 401
    assert (await client.get("/api/topics/t/groups", headers=auth("produce"))).status_code == 403
