"""The fast lane (delayq/web/fast.py) answers its routes as FastAPI does: the same
requests, good and bad, through an app with it and one without, compared."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from delayq import Queue
from delayq.web import create_app
from tests.web.conftest import TOKENS, auth, tokens

JSON = {"content-type": "application/json"}
P, C = auth("produce") | JSON, auth("consume") | JSON
GOOD_LEASE = "1MV8xH3QfHzE"

CASES: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/api/topics/t/tasks", P, b'{"body": {"a": 1}, "delay": 5}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "task_id": "same"}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 2, "task_id": "same"}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "at": "2030-01-01T00:00:00+02:00"}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "delay": -1}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "delay": false}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "delay": 1, "at": "2030-01-01T00:00:00Z"}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "colour": 1}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": {"trace.id": "7", "k": ""}}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": {"bad name": "v"}}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": {"k": 1}}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": {"k": "a\\nb"}}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": ["k"]}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "headers": null}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": 1, "delay": 1e400}'),
    ("POST", "/api/topics/t/tasks", P, b"  null "),
    ("POST", "/api/topics/t/tasks", P, b'{"delay": 1}'),
    ("POST", "/api/topics/t/tasks", P, b""),
    ("POST", "/api/topics/t/tasks", P, b"null"),
    ("POST", "/api/topics/t/tasks", P, b"[1, 2]"),
    ("POST", "/api/topics/t/tasks", P, b'{"body": '),
    ("POST", "/api/topics/t/tasks", P, b"\xff\xfe"),
    ("POST", "/api/topics/t/tasks", auth("produce"), b'{"body": 1}'),
    (
        "POST",
        "/api/topics/t/tasks",
        auth("produce") | {"content-type": "text/plain"},
        b'{"body": 1}',
    ),
    ("POST", "/api/topics/t/tasks", P | {"content-type": "application/vnd.x+json"}, b'{"body": 1}'),
    ("POST", "/api/topics/a%20b/tasks", P, b'{"body": 1}'),
    ("POST", "/api/topics/a%2Fb/tasks", P, b'{"body": 1}'),
    ("POST", "/api/topics/t/tasks?x=1", P, b'{"body": 1}'),
    ("POST", "/api/topics/t/tasks", JSON, b'{"body": 1}'),
    ("POST", "/api/topics/t/tasks", {"Authorization": "Bearer nope-nope-nope-nope"}, b"{}"),
    ("POST", "/api/topics/t/tasks", {"Authorization": f"Basic {TOKENS['produce']}"}, b"{}"),
    (
        "POST",
        "/api/topics/t/tasks",
        {"Authorization": f"bearer   {TOKENS['produce']}  "} | JSON,
        b'{"body": 1}',
    ),
    ("POST", "/api/topics/t/tasks", C, b'{"body": 1}'),
    ("POST", "/api/topics/t/tasks", P, b'{"body": "' + b"x" * 600_000 + b'"}'),
    ("POST", "/api/topics/t/reserve", C, b""),
    ("POST", "/api/topics/t/reserve", C, b"null"),
    ("POST", "/api/topics/t/reserve", C, b'{"max": 3}'),
    ("POST", "/api/topics/t/reserve", C, b'{"wait": false}'),
    ("POST", "/api/topics/t/reserve", C, b'{"max": 0}'),
    ("POST", "/api/topics/t/reserve", P, b"{}"),
    ("POST", f"/api/leases/{GOOD_LEASE}/ack", C, b""),
    ("POST", "/api/leases/garbage/ack", C, b""),
    ("POST", "/api/leases/garbage/nack", C, b'{"dead": true}'),
    ("POST", f"/api/leases/{GOOD_LEASE}/nack", C, b'{"dead": 1}'),
    ("POST", f"/api/leases/{GOOD_LEASE}/extend", C, b""),
    ("POST", f"/api/leases/{GOOD_LEASE}/extend", C, b'{"seconds": 0}'),
    ("POST", f"/api/leases/{GOOD_LEASE}/extend", C, b'{"seconds": 10}'),
    ("POST", "/api/leases//ack", C, b""),
    ("POST", "/api/leases/x/ack/more", C, b""),
    ("GET", "/api/topics/t/tasks", P, b""),
]


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    fast = Queue.from_url(redis_url, name=f"f{uuid.uuid4().hex[:8]}")
    slow = Queue.from_url(redis_url, name=f"s{uuid.uuid4().hex[:8]}")
    apps = (create_app(fast, tokens()), create_app(slow, tokens(), fast_lane=False))
    try:
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(apps[0]), base_url="http://d") as a,
            httpx.AsyncClient(transport=httpx.ASGITransport(apps[1]), base_url="http://d") as b,
        ):
            yield a, b
    finally:
        await fast.close()
        await slow.close()


def shape(response: httpx.Response) -> tuple[Any, ...]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        summary = (data.get("error"), data.get("field"), data.get("outcome"), sorted(data))
        if "tasks" in data:
            summary += (len(data["tasks"]), [sorted(t) for t in data["tasks"]])
        return (response.status_code, response.headers.get("content-type"), *summary)
    return (response.status_code, data)


async def test_both_paths_answer_alike(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    fast, slow = clients
    for method, path, headers, body in CASES:
        got = [shape(await c.request(method, path, headers=headers, content=body)) for c in clients]
        assert got[0] == got[1], (method, path, headers, body[:80])
    # A lease from either path settles alike: extend, ack, then a refused nack.
    for client in (fast, slow):
        await client.post("/api/topics/u/tasks", content=b'{"body": 1}', headers=P)
        reply = await client.post("/api/topics/u/reserve", content=b"{}", headers=C)
        token = reply.json()["tasks"][0]["lease_token"]
        extend = await client.post(f"/api/leases/{token}/extend", json={"seconds": 60}, headers=C)
        assert extend.status_code == 200
        assert (await client.post(f"/api/leases/{token}/ack", headers=C)).status_code == 204
        again = await client.post(f"/api/leases/{token}/nack", json={}, headers=C)
        assert (again.status_code, again.json()["error"]) == (409, "conflict")
