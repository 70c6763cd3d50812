"""The operator's routes for a topic as a whole, history by outcome, and create_app's
token argument, against a real Redis."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest

from delayq import Queue
from delayq.web import api, create_app, operate
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease
from tests.web.conftest import TOKENS, auth

A, R = auth("admin"), auth("read")


async def _bury(queue: Queue, topic: str, count: int) -> None:
    for n in range(count):
        await queue.send(topic, {"n": n}, task_id=f"d{n}")
    for task in await queue.consumer.lease(topic, limit=count):
        await queue.consumer.nack(task.lease_token, dead=True, error="boom")


async def test_replay_all_and_delete_all_answer_the_count(
    client: httpx.AsyncClient, queue: Queue
) -> None:
    await _bury(queue, "t", 3)
    refused = await client.post("/api/topics/t/dead/replay", headers=auth("produce"))
    assert refused.status_code == 403
    replayed = await client.post("/api/topics/t/dead/replay", headers=A)
    assert (replayed.status_code, replayed.json()) == (200, {"count": 3})
    assert (await queue.stats(["t"]))["t"].ready == 3
    await _bury(queue, "u", 2)
    deleted = await client.delete("/api/topics/u/dead", headers=A)
    assert (deleted.status_code, deleted.json()) == (200, {"count": 2})
    assert await queue.stats(["u"]) == {}
    assert (await client.delete("/api/topics/u/dead", headers=A)).json() == {"count": 0}
    # A single letter's replay is still its own route.
    assert (await client.post("/api/topics/u/dead/d0/replay", headers=A)).status_code == 404


async def test_history_filters_by_outcome_and_pages(
    client: httpx.AsyncClient, queue: Queue
) -> None:
    @queue.topic("h", history=100)
    async def handler(body: object) -> None: ...

    for n in range(5):
        await queue.send_delayed("h", {"n": n}, 60, task_id=f"c{n}")
        assert await queue.cancel("h", f"c{n}")
    await _bury(queue, "h", 2)
    page = (await client.get("/api/topics/h/history?outcome=cancelled&limit=3", headers=R)).json()
    assert [r["id"] for r in page["records"]] == ["c4", "c3", "c2"]
    after = page["next_before"]
    rest = await client.get(
        f"/api/topics/h/history?outcome=cancelled&limit=3&before={after}", headers=R
    )
    assert [r["id"] for r in rest.json()["records"]] == ["c1", "c0"]
    assert rest.json()["next_before"] is None
    dead = (await client.get("/api/topics/h/history?outcome=dead", headers=R)).json()
    assert sorted(r["id"] for r in dead["records"]) == ["d0", "d1"]
    bad = await client.get("/api/topics/h/history?outcome=done", headers=R)
    assert (bad.status_code, bad.json()["field"]) == (422, "outcome")


async def test_create_app_takes_a_plain_mapping_of_tokens(queue: Queue) -> None:
    app = create_app(queue, tokens={TOKENS["admin"]: ["read", "produce"]})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        sent = await client.post("/api/topics/t/tasks", json={"body": 1}, headers=A)
        assert sent.status_code == 201
        who = await client.get("/api/whoami", headers=A)
        assert who.json()["scopes"] == ["produce", "read"]


@pytest.mark.parametrize("tokens", [["read-token-0123456789"], "read-token-0123456789", 5])
def test_create_app_refuses_anything_else_at_once(queue: Queue, tokens: object) -> None:
    with pytest.raises(TypeError, match="Tokens or a mapping of token -> scopes"):
        create_app(queue, tokens=tokens)  # type: ignore[arg-type]


async def test_the_overview_sweeps_idle_topics_a_step_at_a_time(
    client: httpx.AsyncClient, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operate, "IDLE", timedelta(milliseconds=1))
    monkeypatch.setattr(operate, "SWEEP_EVERY", 0.0)
    monkeypatch.setattr(operate, "SWEEP_STEP", 2)
    monkeypatch.setattr(api, "NAMES_TTL", -1.0)
    await queue.announce(["a", "b", "c", "typo"])
    await queue.send_delayed("b", {}, 60)
    await queue.pause("c")

    async def names() -> list[str]:
        page = (await client.get("/api/stats", headers=R)).json()
        return [t["name"] for t in page["topics"]]

    assert await names() == ["a", "b", "c", "typo"]  # a and b first seen idle (a) or not
    async with asyncio.timeout(5):
        while await names() != ["b", "c"]:
            await asyncio.sleep(0.01)
    assert await queue.topic_names() == ["b", "c"]


async def test_running_lists_leases_and_flags_the_expired(
    client: httpx.AsyncClient, queue: Queue
) -> None:
    for n in range(3):
        await queue.send("r", {"n": n}, task_id=f"r{n}")
    leases = await queue.consumer.lease("r", limit=3, ttr=60)
    assert len(leases) == 3
    await expire_lease(queue.redis, queue.keys("r"), "r1")
    page = (await client.get("/api/topics/r/running", headers=R)).json()
    assert page["total"] == 3
    flags = {t["id"]: t["lease_expired"] for t in page["tasks"]}
    assert flags == {"r0": False, "r1": True, "r2": False}
    assert all(t["state"] == "reserved" and t["lease_deadline"] for t in page["tasks"])
    assert page["tasks"][0]["id"] == "r1"  # soonest deadline first
    second = (await client.get("/api/topics/r/running?offset=1&limit=1", headers=R)).json()
    assert len(second["tasks"]) == 1 and second["tasks"][0]["id"] != "r1"
    await queue.consumer.ack(leases[0].lease_token)
    assert (await client.get("/api/topics/r/running", headers=R)).json()["total"] == 2
    assert (await client.get("/api/topics/none/running", headers=R)).json()["tasks"] == []


async def test_the_sweep_keeps_a_topic_a_live_worker_consumes(
    client: httpx.AsyncClient,
    queue: Queue,
    monkeypatch: pytest.MonkeyPatch,
    start_worker: StartWorker,
) -> None:
    monkeypatch.setattr(operate, "IDLE", timedelta(milliseconds=1))
    monkeypatch.setattr(operate, "SWEEP_EVERY", 0.0)
    monkeypatch.setattr(api, "NAMES_TTL", -1.0)

    @queue.topic("consumed")
    async def handle(body: object) -> None: ...

    await start_worker(queue)
    await queue.announce(["idle"])
    async with asyncio.timeout(5):
        while "idle" in await queue.topic_names():
            await client.get("/api/stats", headers=R)
            await asyncio.sleep(0.01)
    for _ in range(3):  # more sweeps than it took to forget the other
        await client.get("/api/stats", headers=R)
    assert "consumed" in await queue.topic_names()
