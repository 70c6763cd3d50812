"""Groups over HTTP: a send takes "group", or the serving process derives it (group_by)."""

from __future__ import annotations

from typing import Any

import httpx

from delayq import Queue
from tests.helpers import stored
from tests.web.conftest import auth

P = auth("produce")


async def test_send_takes_a_group_or_derives_it(client: httpx.AsyncClient, queue: Queue) -> None:
    @queue.topic("sync", group_by="account_id")
    async def sync(body: dict[str, Any]) -> None: ...

    sent = await client.post(
        "/api/topics/t/tasks", json={"body": {}, "task_id": "a", "group": "acme"}, headers=P
    )
    assert sent.status_code == 201, sent.text
    assert (await stored(queue, "t", "a")).group == "acme"
    derived = await client.post(
        "/api/topics/sync/tasks", json={"body": {"account_id": 7}, "task_id": "b"}, headers=P
    )
    assert derived.status_code == 201, derived.text
    assert (await stored(queue, "sync", "b")).group == "7"


async def test_a_bad_group_is_a_422_naming_it(client: httpx.AsyncClient, queue: Queue) -> None:
    bad = await client.post("/api/topics/t/tasks", json={"body": {}, "group": "a,b"}, headers=P)
    assert bad.status_code == 422
    assert bad.json()["field"] == "group"
    assert (await queue.stats()) == {}
