"""The HTTP API's results: ``GET .../tasks/{id}/result?wait=S`` and acks carrying a result."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from delayq import Queue
from tests.web.conftest import auth


def url(topic: str, task_id: str) -> str:
    return f"/api/topics/{topic}/tasks/{task_id}/result"


async def test_an_http_consumer_acks_with_a_result_and_a_reader_waits_for_it(
    queue: Queue, client: httpx.AsyncClient
) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> Any: ...

    await queue.send("t", {"n": 1}, task_id="a")
    waiting = asyncio.create_task(
        client.get(url("t", "a"), params={"wait": 10}, headers=auth("read"))
    )
    reply = await client.post("/api/topics/t/reserve", headers=auth("consume"))
    (lease,) = reply.json()["tasks"]
    acked = await client.post(
        f"/api/leases/{lease['lease_token']}/ack", json={"result": {"pages": 3}},
        headers=auth("consume"),
    )  # fmt: skip
    assert acked.status_code == 204, acked.text
    got = await waiting
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["outcome"] == "acked" and body["value"] == {"pages": 3}
    assert (body["id"], body["topic"], body["attempts"], body["error"]) == ("a", "t", 1, None)
    assert body["finished_at"].endswith("Z") or "+00:00" in body["finished_at"]


async def test_an_ack_without_a_body_stores_a_null_value(
    queue: Queue, client: httpx.AsyncClient
) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> Any: ...

    await queue.send("t", {}, task_id="a")
    (lease,) = (await client.post("/api/topics/t/reserve", headers=auth("consume"))).json()["tasks"]
    acked = await client.post(f"/api/leases/{lease['lease_token']}/ack", headers=auth("consume"))
    assert acked.status_code == 204
    got = await client.get(url("t", "a"), headers=auth("read"))
    assert got.status_code == 200 and got.json()["value"] is None
    wrong = await client.post(
        f"/api/leases/{lease['lease_token']}/ack", json={"value": 1}, headers=auth("consume")
    )
    assert wrong.status_code == 422 and wrong.json()["field"] == "value"


async def test_not_found_not_ready_and_invalid_wait(
    queue: Queue, client: httpx.AsyncClient
) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> Any: ...

    missing = await client.get(url("t", "nobody"), headers=auth("read"))
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    await queue.send_delayed("t", {}, 60, task_id="later")
    late = await client.get(url("t", "later"), params={"wait": 0.2}, headers=auth("read"))
    assert late.status_code == 408 and late.json()["error"] == "not_ready"
    for bad in ("31", "-1", "nan", "x"):
        refused = await client.get(url("t", "later"), params={"wait": bad}, headers=auth("read"))
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["field"] == "wait", refused.json()
    other = await client.get(url("t", "later"), params={"limit": 1}, headers=auth("read"))
    assert other.status_code == 422
    anonymous = await client.get(url("t", "later"))
    assert anonymous.status_code == 401
    cancelled = await client.delete("/api/topics/t/tasks/later", headers=auth("produce"))
    assert cancelled.status_code == 204
    got = await client.get(url("t", "later"), headers=auth("read"))
    assert got.status_code == 200 and got.json()["outcome"] == "cancelled"
    document = (await client.get("/api/openapi.json")).json()
    route = document["paths"]["/api/topics/{topic}/tasks/{task_id}/result"]["get"]
    assert route["x-scope"] == "read" and "408" in route["responses"]
    ack = document["paths"]["/api/leases/{token}/ack"]["post"]
    assert "requestBody" in ack
