"""The HTTP API against a real Redis: producers, operators and consumers, and its errors."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio
from fastapi import FastAPI

from delayq import Queue
from delayq.web import create_app
from delayq.web.app import DelayqApp
from tests.helpers import expire_lease, stored, wait_for
from tests.web.conftest import auth, tokens

P, R, C, A = auth("produce"), auth("read"), auth("consume"), auth("admin")


async def send(client: httpx.AsyncClient, topic: str = "t", **fields: object) -> str:
    response = await client.post(
        f"/api/topics/{topic}/tasks", json={"body": {}, **fields}, headers=P
    )
    assert response.status_code == 201, response.text
    task_id: str = response.json()["id"]
    return task_id


async def test_send_get_reschedule_cancel(client: httpx.AsyncClient, queue: Queue) -> None:
    response = await client.post(
        "/api/topics/orders/tasks",
        json={"body": {"order": 7}, "delay": 60, "task_id": "order-7", "max_attempts": 3},
        headers=P,
    )
    assert response.status_code == 201
    assert response.json() == {"id": "order-7", "topic": "orders", "outcome": "created"}
    again = await client.post(
        "/api/topics/orders/tasks", json={"body": {"order": 8}, "task_id": "order-7"}, headers=P
    )
    assert again.json()["outcome"] == "kept"
    info = (await client.get("/api/topics/orders/tasks/order-7", headers=R)).json()
    assert (info["state"], info["body"], info["max_attempts"]) == ("delayed", {"order": 7}, 3)
    at = datetime.now(UTC) + timedelta(hours=2)
    moved = await client.post(
        "/api/topics/orders/tasks/order-7/reschedule", json={"at": at.isoformat()}, headers=P
    )
    assert moved.status_code == 200, moved.text
    assert abs(datetime.fromisoformat(moved.json()["due_at"]) - at) < timedelta(seconds=1)
    assert (await client.delete("/api/topics/orders/tasks/order-7", headers=P)).status_code == 204
    assert (await client.get("/api/topics/orders/tasks/order-7", headers=R)).status_code == 404
    gone = await client.delete("/api/topics/orders/tasks/order-7", headers=P)
    assert (gone.status_code, gone.json()["error"]) == (404, "not_found")
    assert await queue.get("orders", "order-7") is None


async def test_replace_debounces(client: httpx.AsyncClient, queue: Queue) -> None:
    await send(client, task_id="digest", delay=60)
    response = await client.post(
        "/api/topics/t/tasks",
        json={"body": {"v": 2}, "task_id": "digest", "delay": 300, "on_conflict": "replace"},
        headers=P,
    )
    assert response.json()["outcome"] == "replaced"
    assert (await stored(queue, "t", "digest")).body == {"v": 2}


async def test_send_at_and_now(client: httpx.AsyncClient, queue: Queue) -> None:
    now_id = await send(client)
    assert (await stored(queue, "t", now_id)).state == "ready"
    at = datetime.now(UTC) + timedelta(minutes=5)
    at_id = await send(client, at=at.isoformat())
    assert abs((await stored(queue, "t", at_id)).due_at - at) < timedelta(seconds=1)


async def test_a_running_task_cannot_be_cancelled_or_moved(
    client: httpx.AsyncClient, queue: Queue
) -> None:
    task_id = await send(client)
    await queue.consumer.lease("t")
    cancel = await client.delete(f"/api/topics/t/tasks/{task_id}", headers=P)
    assert (cancel.status_code, cancel.json()["error"]) == (409, "conflict")
    move = await client.post(
        f"/api/topics/t/tasks/{task_id}/reschedule", json={"delay": 5}, headers=P
    )
    assert move.status_code == 409
    assert (await stored(queue, "t", task_id)).state == "reserved"


@pytest.mark.parametrize(
    ("path", "payload", "field"),
    [
        ("/api/topics/t/tasks", {"body": {}, "delay": -1}, "delay"),
        ("/api/topics/t/tasks", {"body": {}, "delay": 1e12}, "delay"),
        ("/api/topics/t/tasks", {"body": {}, "delay": False}, "delay"),
        ("/api/topics/t/tasks", {"body": {}, "delay": "5"}, "delay"),
        ("/api/topics/t/tasks", {"body": {}, "max_attempts": 2.0}, "max_attempts"),
        ("/api/topics/t/tasks", {"body": {}, "delay": 1, "at": "2030-01-01T00:00:00Z"}, "at"),
        ("/api/topics/t/tasks", {"body": {}, "at": "2030-01-01T00:00:00"}, "at"),
        ("/api/topics/t/tasks", {"body": {}, "at": "2001-01-01T00:00:00Z"}, "at"),
        ("/api/topics/t/tasks", {"body": {}, "ttr": 0}, "ttr"),
        ("/api/topics/t/tasks", {"body": {}, "max_attempts": 0}, "max_attempts"),
        ("/api/topics/t/tasks", {"body": {}, "task_id": ""}, "task_id"),
        ("/api/topics/t/tasks", {"body": {}, "task_id": "a\u0001b"}, "task_id"),
        ("/api/topics/t/tasks", {"body": {}, "task_id": "\u00e9" * 200}, "task_id"),
        ("/api/topics/t/tasks", {"body": {}, "colour": "red"}, "colour"),
        ("/api/topics/t/tasks", {"delay": 1}, "body"),
        ("/api/topics/t/tasks", [1, 2], None),
        ("/api/topics/a%20b/tasks", {"body": {}}, "topic"),
        ("/api/topics/" + "x" * 201 + "/tasks", {"body": {}}, "topic"),
    ],
)
async def test_bad_sends_name_the_field_and_write_nothing(
    client: httpx.AsyncClient, queue: Queue, path: str, payload: object, field: str | None
) -> None:
    response = await client.post(path, json=payload, headers=P)
    assert response.status_code == 422, response.text
    error = response.json()
    assert (error["error"], error["field"]) == ("invalid_input", field), error
    assert await queue.topic_names() == []


async def test_malformed_json_is_refused(client: httpx.AsyncClient, queue: Queue) -> None:
    response = await client.post(
        "/api/topics/t/tasks",
        content=b'{"body": ',
        headers={**P, "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_input"
    form = await client.post("/api/topics/t/tasks", content=b'{"body": 1}', headers=P)
    assert form.status_code == 422
    assert "Content-Type: application/json" in form.json()["message"]
    assert await queue.topic_names() == []


async def test_a_body_over_the_limit_is_413(queue: Queue, redis_url: str) -> None:
    small = Queue.from_url(redis_url, name=queue.name, max_body_bytes=1000)
    try:
        transport = httpx.ASGITransport(app=create_app(small, tokens()))
        async with httpx.AsyncClient(transport=transport, base_url="http://d") as client:
            big = {"body": "x" * 100_000}
            response = await client.post("/api/topics/t/tasks", json=big, headers=P)
            assert (response.status_code, response.json()["error"]) == (413, "too_large")
            over = {"body": "x" * 2000}  # past max_body_bytes, within the request margin
            response = await client.post("/api/topics/t/tasks", json=over, headers=P)
            assert (response.status_code, response.json()["field"]) == (422, "body")
    finally:
        await small.close()
    assert await queue.topic_names() == []


async def test_names_with_slashes_travel_encoded(client: httpx.AsyncClient, queue: Queue) -> None:
    response = await client.post(
        "/api/topics/orders%2Feu/tasks", json={"body": 1, "task_id": "a/b/c"}, headers=P
    )
    assert response.json() == {"id": "a/b/c", "topic": "orders/eu", "outcome": "created"}
    found = await client.get("/api/topics/orders%2Feu/tasks/a%2Fb%2Fc", headers=R)
    assert found.status_code == 200 and found.json()["id"] == "a/b/c"
    page = await client.get("/api/topics/orders%2Feu/upcoming?limit=5", headers=R)
    assert [t["id"] for t in page.json()["tasks"]] == ["a/b/c"]
    unknown = await client.get("/api/topics/orders%2Feu/upcoming?limt=5", headers=R)
    assert (unknown.status_code, unknown.json()["field"]) == (422, "limt")
    assert (await stored(queue, "orders/eu", "a/b/c")).body == 1


async def test_stats_pages_through_topics(client: httpx.AsyncClient, queue: Queue) -> None:
    for n in range(12):
        await queue.send_delayed(f"topic-{n:02d}", {}, delay=60)
    await queue.send("topic-00", {})
    page = (await client.get("/api/stats?offset=2&limit=5", headers=R)).json()
    assert page["total"] == 12
    assert [t["name"] for t in page["topics"]] == [f"topic-{n:02d}" for n in range(2, 7)]
    first = (await client.get("/api/stats?prefix=topic-0&limit=1", headers=R)).json()
    assert first["total"] == 10
    assert first["topics"] == [
        {"name": "topic-00", "delayed": 1, "ready": 1, "reserved": 0, "dead": 0,
         "paused": False, "rate_limit": None, "max_running": None, "consumers": 0,
         "oldest_ready_age": first["topics"][0]["oldest_ready_age"], "throughput": 0.0}
    ]  # fmt: skip
    assert 0 <= first["topics"][0]["oldest_ready_age"] < 60
    await queue.pause("topic-00")
    paused = (await client.get("/api/stats?prefix=topic-00", headers=R)).json()
    assert paused["topics"][0]["paused"] is True
    bad = await client.get("/api/stats?limit=0", headers=R)
    assert (bad.status_code, bad.json()["field"]) == (422, "limit")


async def test_dead_letters_page_and_replay(client: httpx.AsyncClient, queue: Queue) -> None:
    task_id = await send(client)
    (task,) = await queue.consumer.lease("t")
    await queue.consumer.nack(task.lease_token, dead=True, error="Boom: no")
    page = (await client.get("/api/topics/t/dead", headers=R)).json()
    assert page["total"] == 1
    assert [(t["id"], t["last_error"]) for t in page["tasks"]] == [(task_id, "Boom: no")]
    replay = await client.post(f"/api/topics/t/dead/{task_id}/replay", headers=A)
    assert replay.status_code == 204
    assert (await stored(queue, "t", task_id)).state == "ready"
    again = await client.post(f"/api/topics/t/dead/{task_id}/replay", headers=A)
    assert again.status_code == 404


async def test_upcoming_and_timeline(client: httpx.AsyncClient, queue: Queue) -> None:
    ids = [await send(client, delay=30 + n) for n in range(3)]
    page = (await client.get("/api/topics/t/upcoming?limit=2", headers=R)).json()
    assert [t["id"] for t in page["tasks"]] == ids[:2]
    rest = await client.get("/api/topics/t/upcoming", params={"cursor": page["cursor"]}, headers=R)
    assert [t["id"] for t in rest.json()["tasks"]] == ids[2:]
    bad = await client.get("/api/topics/t/upcoming?cursor=nope", headers=R)
    assert (bad.status_code, bad.json()["field"]) == (422, "cursor")
    timeline = (await client.get("/api/topics/t/timeline?window=60&windows=2", headers=R)).json()
    assert [w["count"] for w in timeline["windows"]] == [3, 0]


async def test_a_consumer_round_over_http(client: httpx.AsyncClient, queue: Queue) -> None:
    ids = {await send(client, max_attempts=2) for _ in range(3)}
    reply = await client.post("/api/topics/t/reserve", json={"max": 10, "ttr": 60}, headers=C)
    assert reply.status_code == 200, reply.text
    tasks = reply.json()["tasks"]
    assert {t["id"] for t in tasks} == ids
    done, failed, held = tasks
    assert (
        await client.post(f"/api/leases/{done['lease_token']}/ack", headers=C)
    ).status_code == 204
    again = await client.post(f"/api/leases/{done['lease_token']}/ack", headers=C)
    assert (again.status_code, again.json()["error"]) == (409, "conflict")
    nack = await client.post(
        f"/api/leases/{failed['lease_token']}/nack", json={"delay": 30, "error": "Oops"}, headers=C
    )
    assert nack.json()["outcome"] == "retry"
    assert (await stored(queue, "t", failed["id"])).last_error == "Oops"
    extend = await client.post(
        f"/api/leases/{held['lease_token']}/extend", json={"seconds": 600}, headers=C
    )
    deadline = datetime.fromisoformat(extend.json()["lease_deadline"])
    assert deadline - datetime.fromisoformat(held["lease_deadline"]) > timedelta(seconds=500)
    assert await queue.get("t", done["id"]) is None


async def test_a_stale_lease_gets_409_and_changes_nothing(
    client: httpx.AsyncClient, queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    task_id = await send(client)
    (first,) = (await client.post("/api/topics/t/reserve", headers=C)).json()["tasks"]
    await expire_lease(redis_client, queue.keys("t"), task_id)
    (second,) = (await client.post("/api/topics/t/reserve", headers=C)).json()["tasks"]
    before = await stored(queue, "t", task_id)
    stale = first["lease_token"]
    for path, body in (("ack", None), ("nack", {"dead": True}), ("extend", {"seconds": 9})):
        response = await client.post(f"/api/leases/{stale}/{path}", json=body, headers=C)
        assert response.status_code == 409, (path, response.text)
    assert await stored(queue, "t", task_id) == before
    ok = await client.post(f"/api/leases/{second['lease_token']}/ack", headers=C)
    assert ok.status_code == 204


async def test_a_malformed_lease_token_names_the_token(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/leases/1nonsense/ack", headers=C)
    assert (response.status_code, response.json()["field"]) == (422, "token")


async def test_reserve_is_a_long_poll(client: httpx.AsyncClient, queue: Queue) -> None:
    waiting = asyncio.create_task(
        client.post("/api/topics/t/reserve", json={"wait": 20}, headers=C)
    )
    await wait_for(queue.redis.pubsub_numpat, 10, "the long poll to subscribe")
    assert not waiting.done()
    task_id = await queue.send("t", {"late": True})
    reply = await asyncio.wait_for(waiting, 15)
    assert [t["id"] for t in reply.json()["tasks"]] == [task_id]
    empty = await client.post("/api/topics/t/reserve", json={"wait": 0.2}, headers=C)
    assert empty.json() == {"tasks": []}
    for wait in (31, False, "1", None):
        bad = await client.post("/api/topics/t/reserve", json={"wait": wait}, headers=C)
        assert (bad.status_code, bad.json()["field"]) == (422, "wait")


async def test_an_unreachable_redis_is_503() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = Queue.from_url(f"redis://127.0.0.1:{port}/0", name="down")
    try:
        transport = httpx.ASGITransport(app=create_app(queue, tokens()))
        async with httpx.AsyncClient(transport=transport, base_url="http://d") as client:
            for method, path in (("GET", "/api/stats"), ("POST", "/api/topics/t/tasks")):
                response = await client.request(method, path, json={"body": 1}, headers=A)
                assert response.status_code == 503, response.text
                assert response.json()["error"] == "unavailable"
    finally:
        await queue.close()


async def test_the_app_mounts_under_a_prefix(queue: Queue) -> None:
    outer = FastAPI()
    outer.mount("/delayq", create_app(queue, tokens()))
    transport = httpx.ASGITransport(app=outer)
    async with httpx.AsyncClient(transport=transport, base_url="http://d") as client:
        response = await client.post("/delayq/api/topics/a%2Fb/tasks", json={"body": 1}, headers=P)
        assert response.status_code == 201, response.text
        assert (await client.get("/delayq/api/openapi.json")).status_code == 200
        bare = await client.get("/delayq")
        assert (bare.status_code, bare.headers["location"]) == (307, "http://d/delayq/")
        page = await client.get("/delayq/")
        assert page.status_code == 200 and 'src="static/app.js"' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        script = await client.get("/delayq/static/app.js")
        assert script.status_code == 200 and "sessionStorage" in script.text
        for module in ("core", "overview", "topic", "task", "charts"):  # what app.js imports
            served = await client.get(f"/delayq/static/{module}.js")
            assert "javascript" in served.headers["content-type"], module
        icon = await client.get("/delayq/favicon.ico")
        assert (icon.status_code, icon.headers["content-type"]) == (200, "image/svg+xml")
        assert 'rel="icon"' in page.text
        assert (await client.get("/delayq/static/../app.py")).status_code == 404
    assert await queue.topic_names() == ["a/b"]


async def test_one_topic_and_its_pause(client: httpx.AsyncClient, queue: Queue) -> None:
    await send(client, delay=60)
    row = (await client.get("/api/topics/t", headers=R)).json()
    assert (row["delayed"], row["paused"]) == (1, False)
    assert (await client.post("/api/topics/t/pause", headers=A)).status_code == 204
    assert (await client.get("/api/topics/t", headers=R)).json()["paused"] is True
    assert (await client.post("/api/topics/t/resume", headers=A)).status_code == 204
    assert (await client.get("/api/topics/t", headers=R)).json()["paused"] is False
    empty = (await client.get("/api/topics/nothing-here", headers=R)).json()
    assert empty["delayed"] == 0


def test_the_openapi_document_types_every_model(app: DelayqApp) -> None:
    document = app.openapi()
    schemas = document["components"]["schemas"]
    for wanted in ("SendRequest", "TaskInfo", "LeasedTask", "ReserveResult", "ApiError",
                   "Timeline", "UpcomingPage", "StatsPage", "NackResult"):  # fmt: skip
        assert wanted in schemas
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            ok = [code for code in operation["responses"] if code.startswith("2")]
            assert ok, (method, path)
            for code in ok:
                content = operation["responses"][code].get("content")
                if code != "204":
                    assert content["application/json"]["schema"], (method, path)
            assert "422" in operation["responses"] and "401" in operation["responses"]


async def test_workers_lists_the_live_workers(client: httpx.AsyncClient, queue: Queue) -> None:
    from delayq.worker.heartbeat import Heartbeat

    assert (await client.get("/api/workers", headers=R)).json() == {"workers": []}
    beat = Heartbeat(queue.registry, kind="worker", topics=["t"], concurrency=4,
                     running=lambda: 2, interval=60)  # fmt: skip
    await beat.beat()
    await queue.send("t", {})
    listed = (await client.get("/api/workers", headers=R)).json()["workers"]
    assert [(w["id"], w["kind"], w["topics"], w["running"]) for w in listed] == [
        (beat.id, "worker", ["t"], 2)
    ]
    assert set(listed[0]) == {"id", "host", "pid", "kind", "started_at", "last_seen", "topics",
                              "concurrency", "running", "version"}  # fmt: skip
    row = (await client.get("/api/topics/t", headers=R)).json()
    assert row["consumers"] == 1 and row["oldest_ready_age"] is not None
    assert (await client.get("/api/workers", headers=auth("produce"))).status_code == 403
    await beat.leave()
    assert (await client.get("/api/workers", headers=R)).json() == {"workers": []}
