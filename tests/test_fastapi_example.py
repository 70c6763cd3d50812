"""examples/fastapi_app.py driven through its ASGI interface, lifespan included: its
embedded worker runs the close handler on the app's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from delayq.testing import PrivateRedis
from examples.fastapi_app import create_app


@pytest.fixture
async def app(redis_url: str, queue_name: str) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered: the queue open and its embedded worker running."""
    app = create_app(redis_url, queue_name)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
        yield client


async def order_view(client: httpx.AsyncClient, order_id: int) -> dict[str, Any]:
    response = await client.get(f"/orders/{order_id}")
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    return view


async def test_unpaid_order_is_closed_and_paid_order_is_not(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    created = await client.post("/orders", json={"item": "book", "pay_within": 0.2})
    assert created.status_code == 201, created.text
    unpaid = created.json()
    assert unpaid["status"] == "pending"
    paid = (await client.post("/orders", json={"item": "pen", "pay_within": 0.2})).json()

    view = await order_view(client, unpaid["id"])
    assert view["close"]["id"] == f"order-{unpaid['id']}"
    assert view["close"]["state"] == "delayed"
    assert view["close"]["body"] == {"order_id": unpaid["id"]}

    cancelled = await client.delete(f"/orders/{paid['id']}/close")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {"cancelled": True}

    async with asyncio.timeout(5):  # the handler fired in the worker
        while (view := await order_view(client, unpaid["id"]))["order"]["status"] != "closed":
            await asyncio.sleep(0.02)
    async with asyncio.timeout(5):  # and its task was acked
        while (await order_view(client, unpaid["id"]))["close"] is not None:
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    view = await order_view(client, paid["id"])
    assert view == {"order": {**paid, "status": "paid"}, "close": None}

    too_late = await client.delete(f"/orders/{unpaid['id']}/close")
    assert too_late.status_code == 409


async def test_bad_requests(client: httpx.AsyncClient) -> None:
    assert (await client.get("/orders/999")).status_code == 404
    assert (await client.delete("/orders/999/close")).status_code == 404
    invalid = await client.post("/orders", json={"item": "book", "pay_within": -1})
    assert invalid.status_code == 422


async def test_an_unreachable_redis_answers_503_with_retry_after(
    make_redis_server: Callable[..., PrivateRedis], queue_name: str
) -> None:
    server = make_redis_server()
    app = create_app(server.url, queue_name, embedded_worker=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://s") as client,
    ):
        assert (await client.post("/orders", json={"item": "book"})).status_code == 201
        server.kill()
        response = await client.post("/orders", json={"item": "pen"})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert response.json()["error"] == "unavailable"
