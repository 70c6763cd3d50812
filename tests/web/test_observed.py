"""What the API shows of observability: task headers, a topic's history and activity, a
finished task's record, and throughput per topic on the overview."""

from __future__ import annotations

import httpx
import pytest

from delayq import Queue
from tests.web.conftest import auth

P, R, C = auth("produce"), auth("read"), auth("consume")


def history_topic(queue: Queue, name: str = "h") -> None:
    """Register ``name`` with history in this process: HTTP consumers' acks record it."""

    @queue.topic(name, history=100)
    async def handler(body: object) -> None:
        return None


async def test_headers_are_sent_and_shown(client: httpx.AsyncClient, queue: Queue) -> None:
    headers = {"traceparent": "00-abc-def-01", "tenant.id": "7"}
    sent = await client.post(
        "/api/topics/t/tasks",
        json={"body": {"x": 1}, "delay": 60, "task_id": "a", "headers": headers},
        headers=P,
    )
    assert sent.status_code == 201, sent.text
    assert (await queue.get("t", "a")).headers == headers  # type: ignore[union-attr]
    shown = (await client.get("/api/topics/t/tasks/a", headers=R)).json()
    assert (shown["state"], shown["headers"]) == ("delayed", headers)
    plain = await client.post("/api/topics/t/tasks", json={"body": 1, "task_id": "b"}, headers=P)
    assert plain.status_code == 201
    assert (await client.get("/api/topics/t/tasks/b", headers=R)).json()["headers"] == {}


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ({"bad name": "v"}, "headers"),
        ({"-x": "v"}, "headers"),
        ({"k": "line\nbreak"}, "headers"),
        ({"k": 1}, "headers.k"),
        ({"k": None}, "headers.k"),
        ({f"h{n}": "v" for n in range(33)}, "headers"),
        ({"k": "v" * 5000}, "headers"),
        (["k", "v"], "headers"),
        ("k=v", "headers"),
    ],
)
async def test_bad_headers_are_refused_naming_the_field(
    client: httpx.AsyncClient, queue: Queue, headers: object, field: str
) -> None:
    response = await client.post(
        "/api/topics/t/tasks", json={"body": 1, "task_id": "x", "headers": headers}, headers=P
    )
    assert response.status_code == 422, response.text
    assert (response.json()["error"], response.json()["field"]) == ("invalid_input", field)
    assert await queue.get("t", "x") is None  # nothing written


async def test_a_finished_task_shows_its_history_record(
    client: httpx.AsyncClient, queue: Queue
) -> None:
    history_topic(queue)
    body = {"body": {"n": 1}, "task_id": "done", "headers": {"k": "v"}}
    assert (await client.post("/api/topics/h/tasks", json=body, headers=P)).status_code == 201
    leased = (await client.post("/api/topics/h/reserve", json={}, headers=C)).json()["tasks"]
    assert leased[0]["headers"] == {"k": "v"}  # a consumer in any language gets them
    running = (await client.get("/api/topics/h/tasks/done", headers=R)).json()
    assert running["state"] == "reserved"
    token = leased[0]["lease_token"]
    assert (await client.post(f"/api/leases/{token}/ack", headers=C)).status_code == 204
    finished = await client.get("/api/topics/h/tasks/done", headers=R)
    assert finished.status_code == 200, finished.text
    shown = finished.json()
    assert (shown["state"], shown["id"], shown["topic"]) == ("finished", "done", "h")
    record = shown["history"]
    assert (record["outcome"], record["attempts"], record["body"]) == ("acked", 1, {"n": 1})
    assert record["headers"] == {"k": "v"} and record["error"] is None
    # A topic without history: a finished task is unknown, as before.
    await client.post("/api/topics/t/tasks", json={"body": 1, "task_id": "gone"}, headers=P)
    [lease] = (await client.post("/api/topics/t/reserve", json={}, headers=C)).json()["tasks"]
    await client.post(f"/api/leases/{lease['lease_token']}/ack", headers=C)
    missing = await client.get("/api/topics/t/tasks/gone", headers=R)
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    unknown = await client.get("/api/topics/h/tasks/never-sent", headers=R)
    assert unknown.status_code == 404


async def test_history_pages_newest_first(client: httpx.AsyncClient, queue: Queue) -> None:
    history_topic(queue)
    for n in range(5):
        await client.post("/api/topics/h/tasks", json={"body": n, "task_id": f"t{n}"}, headers=P)
    leased = (await client.post("/api/topics/h/reserve", json={"max": 5}, headers=C)).json()
    for task in leased["tasks"]:  # one ack a call: one record each, in order
        await client.post(f"/api/leases/{task['lease_token']}/ack", headers=C)
    acked = [task["id"] for task in reversed(leased["tasks"])]  # newest first
    first = (await client.get("/api/topics/h/history?limit=3", headers=R)).json()
    assert [r["id"] for r in first["records"]] == acked[:3]
    assert first["next_before"] == first["records"][-1]["seq"]
    before = first["next_before"]
    second = (await client.get(f"/api/topics/h/history?limit=3&before={before}", headers=R)).json()
    assert [r["id"] for r in second["records"]] == acked[3:]
    assert second["next_before"] is None
    empty = (await client.get("/api/topics/nothing/history", headers=R)).json()
    assert (empty["records"], empty["next_before"]) == ([], None)


@pytest.mark.parametrize(
    ("query", "field"),
    [("limit=0", "limit"), ("limit=501", "limit"), ("limit=x", "limit"), ("before=0", "before"),
     ("before=-5", "before"), ("colour=red", "colour")],
)  # fmt: skip
async def test_bad_history_queries_are_refused(
    client: httpx.AsyncClient, query: str, field: str
) -> None:
    response = await client.get(f"/api/topics/h/history?{query}", headers=R)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field


async def test_bad_topics_are_refused_by_the_new_reads(client: httpx.AsyncClient) -> None:
    for path in ("history", "activity"):
        response = await client.get(f"/api/topics/a%20b/{path}", headers=R)
        assert (response.status_code, response.json()["field"]) == (422, "topic"), path
    response = await client.get("/api/topics/a%20b/tasks/x", headers=R)
    assert (response.status_code, response.json()["field"]) == (422, "topic")


async def test_activity_and_overview_throughput(client: httpx.AsyncClient, queue: Queue) -> None:
    # Two windows' counts, as workers add them (rollup.lua picks Redis's current window).
    keys = queue.keys("h")
    await queue.scripts.rollup(keys, ["acked", 30, "dead", 2, "late_n", 32, "l1", 30, "l8", 2])
    await queue.send("h", {})  # the topic is listed once it was used
    page = (await client.get("/api/topics/h/activity", headers=R)).json()
    assert page["window_seconds"] == 10
    [window] = page["windows"]
    assert (window["acked"], window["dead"], window["started"]) == (30, 2, 32)
    assert window["throughput"] == pytest.approx(3.2)
    assert (window["lateness_p50"], window["lateness_p99"]) == (0.002, 0.5)
    stats = (await client.get("/api/stats", headers=R)).json()
    [row] = [t for t in stats["topics"] if t["name"] == "h"]
    assert 32 / 70 <= row["throughput"] <= 32 / 60  # over the last minute and this window
    none = (await client.get("/api/topics/other/activity", headers=R)).json()
    assert none["windows"] == []


async def test_the_openapi_document_types_the_new_models(client: httpx.AsyncClient) -> None:
    document = (await client.get("/api/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert {"HistoryPage", "HistoryRecord", "ActivityPage", "ActivityPoint", "FinishedTask"} <= set(
        schemas
    )
    send = schemas["SendRequest"]["properties"]["headers"]
    typed = {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 32}
    assert typed in send["anyOf"]
    get = document["paths"]["/api/topics/{topic}/tasks/{task_id}"]["get"]
    ok = get["responses"]["200"]["content"]["application/json"]["schema"]
    refs = {option["$ref"].rsplit("/", 1)[1] for option in ok["anyOf"]}
    assert refs == {"TaskInfo", "FinishedTask"}
    for path in ("history", "activity"):
        assert document["paths"][f"/api/topics/{{topic}}/{path}"]["get"]["x-scope"] == "read"


async def test_wrong_scopes_are_refused_by_the_new_reads(client: httpx.AsyncClient) -> None:
    for path in ("/api/topics/h/history", "/api/topics/h/activity", "/api/topics/h/tasks/x"):
        assert (await client.get(path)).status_code == 401
        assert (await client.get(path, headers=P)).status_code == 403
        assert (await client.get(path, headers=C)).status_code == 403
    refused = await client.post("/api/topics/h/tasks", json={"body": 1, "headers": {}}, headers=R)
    assert refused.status_code == 403
