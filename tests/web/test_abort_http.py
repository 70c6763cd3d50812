"""Aborting a running task over HTTP: ``DELETE /api/topics/{topic}/tasks/{id}?running=true``,
and the aborted lease's token refused to an HTTP consumer (one Redis and the local cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from delayq import Queue
from delayq.web import create_app
from tests.test_abort import aq  # noqa: F401 (the fixture: one Redis, then the cluster)
from tests.web.conftest import auth, tokens

P, R, C = auth("produce"), auth("read"), auth("consume")


@pytest.fixture
async def api(aq: Queue) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    transport = httpx.ASGITransport(app=create_app(aq, tokens()))
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        yield client


async def test_delete_with_running_aborts_a_leased_task(api: httpx.AsyncClient) -> None:
    await api.post("/api/topics/t/tasks", json={"body": {}, "task_id": "x"}, headers=P)
    [leased] = (await api.post("/api/topics/t/reserve", headers=C)).json()["tasks"]
    refused = await api.delete("/api/topics/t/tasks/x", headers=P)
    assert (refused.status_code, refused.json()["error"]) == (409, "conflict")
    for flag in ("false", "0"):
        kept = await api.delete(f"/api/topics/t/tasks/x?running={flag}", headers=P)
        assert kept.status_code == 409
    aborted = await api.delete("/api/topics/t/tasks/x?running=true", headers=P)
    assert aborted.status_code == 204, aborted.text
    assert (await api.get("/api/topics/t/tasks/x", headers=R)).status_code == 404
    token = leased["lease_token"]
    for path, body in (("ack", None), ("nack", {"delay": 1}), ("extend", {"seconds": 9})):
        response = await api.post(f"/api/leases/{token}/{path}", json=body, headers=C)
        assert (response.status_code, response.json()["error"]) == (409, "conflict"), path
    gone = await api.delete("/api/topics/t/tasks/x?running=true", headers=P)
    assert gone.status_code == 404


async def test_running_true_cancels_a_waiting_task_too(api: httpx.AsyncClient) -> None:
    await api.post("/api/topics/t/tasks", json={"body": {}, "task_id": "x", "delay": 60}, headers=P)
    response = await api.delete("/api/topics/t/tasks/x?running=true", headers=P)
    assert response.status_code == 204


@pytest.mark.parametrize("value", ["maybe", "2", ""])
async def test_a_bad_running_flag_names_the_field(api: httpx.AsyncClient, value: str) -> None:
    await api.post("/api/topics/t/tasks", json={"body": {}, "task_id": "x"}, headers=P)
    response = await api.delete(f"/api/topics/t/tasks/x?running={value}", headers=P)
    assert response.status_code == 422, response.text
    assert (response.json()["error"], response.json()["field"]) == ("invalid_input", "running")
    assert (await api.get("/api/topics/t/tasks/x", headers=R)).json()["state"] == "ready"
