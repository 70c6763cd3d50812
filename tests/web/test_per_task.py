"""The five per-task routes (delayq/web/endpoint.py), good and bad requests alike: each
answers with the status, error and field the API documents."""

from __future__ import annotations

import httpx
import pytest

from tests.web.conftest import TOKENS, auth

JSON = {"content-type": "application/json"}
P, C = auth("produce") | JSON, auth("consume") | JSON
GOOD_LEASE = "1MV8xH3QfHzE"
"""A well-formed lease token that no lease holds."""

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
EXPECTED: list[tuple[int, str | None, str | None, str | None]] = [
    # (status, error, field, outcome), one per case above
    (201, None, None, "created"), (201, None, None, "created"), (201, None, None, "kept"),
    (201, None, None, "created"), (422, "invalid_input", "delay", None),
    (422, "invalid_input", "delay", None), (422, "invalid_input", "at", None),
    (422, "invalid_input", "colour", None), (201, None, None, "created"),
    (422, "invalid_input", "headers", None), (422, "invalid_input", "headers.k", None),
    (422, "invalid_input", "headers", None), (422, "invalid_input", "headers", None),
    (201, None, None, "created"), (422, "invalid_input", "delay", None),
    (422, "invalid_input", None, None), (422, "invalid_input", "body", None),
    (422, "invalid_input", None, None), (422, "invalid_input", None, None),
    (422, "invalid_input", None, None), (422, "invalid_input", None, None),
    (422, "invalid_input", None, None), (422, "invalid_input", None, None),
    (422, "invalid_input", None, None), (201, None, None, "created"),
    (422, "invalid_input", "topic", None), (201, None, None, "created"),
    (422, "invalid_input", "x", None), (401, "unauthorized", None, None),
    (401, "unauthorized", None, None), (401, "unauthorized", None, None),
    (201, None, None, "created"), (403, "forbidden", None, None),
    (413, "too_large", None, None), (200, None, None, None), (200, None, None, None),
    (200, None, None, None), (422, "invalid_input", "wait", None),
    (422, "invalid_input", "max", None), (403, "forbidden", None, None),
    (422, "invalid_input", "token", None), (422, "invalid_input", "token", None),
    (422, "invalid_input", "token", None), (422, "invalid_input", "dead", None),
    (422, "invalid_input", None, None), (422, "invalid_input", "seconds", None),
    (422, "invalid_input", "token", None), (404, "not_found", None, None),
    (404, "not_found", None, None), (405, "method_not_allowed", None, None),
]  # fmt: skip


def summary(response: httpx.Response) -> tuple[int, str | None, str | None, str | None]:
    data = response.json() if response.content else {}
    if isinstance(data, dict) and "tasks" not in data:
        assert response.headers["content-type"] == "application/json"
        return response.status_code, data.get("error"), data.get("field"), data.get("outcome")
    return response.status_code, None, None, None


@pytest.mark.parametrize(("case", "expected"), list(zip(CASES, EXPECTED, strict=True)))
async def test_each_request_gets_its_documented_answer(
    client: httpx.AsyncClient,
    case: tuple[str, str, dict[str, str], bytes],
    expected: tuple[int, str | None, str | None, str | None],
) -> None:
    method, path, headers, body = case
    if expected[3] == "kept":  # the same task id, sent before
        first = b'{"body": 1, "task_id": "same"}'
        await client.post("/api/topics/t/tasks", content=first, headers=P)
    response = await client.request(method, path, headers=headers, content=body)
    assert summary(response) == expected, response.text


async def test_a_lease_is_extended_acked_then_refused(client: httpx.AsyncClient) -> None:
    await client.post("/api/topics/u/tasks", content=b'{"body": 1}', headers=P)
    reply = await client.post("/api/topics/u/reserve", content=b"{}", headers=C)
    token = reply.json()["tasks"][0]["lease_token"]
    extend = await client.post(f"/api/leases/{token}/extend", json={"seconds": 60}, headers=C)
    assert extend.status_code == 200
    assert set(extend.json()) == {"lease_deadline"}
    assert (await client.post(f"/api/leases/{token}/ack", headers=C)).status_code == 204
    again = await client.post(f"/api/leases/{token}/nack", json={}, headers=C)
    assert (again.status_code, again.json()["error"]) == (409, "conflict")
