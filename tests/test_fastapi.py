"""delayq.fastapi.install_exception_handlers in a user's FastAPI app, against a real Redis:
bad input answers 422 naming the field, an unreachable Redis 503 with Retry-After, both in
the HTTP API's error shape."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from delayq import Queue
from delayq.fastapi import install_exception_handlers
from delayq.testing import PrivateRedis


def shop(queue: Queue) -> FastAPI:
    app = FastAPI()
    install_exception_handlers(app)

    @app.post("/orders/{order_id}/close")
    async def schedule_close(order_id: str, delay: float) -> dict[str, str]:
        sent = await queue.send_delayed("order.close", {"order": order_id}, delay)
        return {"id": str(sent)}

    @app.post("/fail")
    async def fail() -> None:
        raise RuntimeError("not delayq's")

    return app


@pytest.fixture
async def client_for() -> AsyncIterator[Callable[[Queue], httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []

    def make(queue: Queue) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=shop(queue), raise_app_exceptions=False)
        clients.append(httpx.AsyncClient(transport=transport, base_url="http://shop"))
        return clients[-1]

    yield make
    for client in clients:
        await client.aclose()


async def test_bad_input_answers_422_naming_the_field(
    queue: Queue, client_for: Callable[[Queue], httpx.AsyncClient]
) -> None:
    client = client_for(queue)
    response = await client.post("/orders/7/close", params={"delay": -5})
    assert response.status_code == 422
    body: dict[str, Any] = response.json()
    assert body["error"] == "invalid_input"
    assert body["field"] == "delay"
    assert "delay" in body["message"]
    assert sorted(body) == ["error", "field", "message"]
    assert await queue.stats(["order.close"]) == {}  # nothing was written

    good = await client.post("/orders/7/close", params={"delay": 60})
    assert good.status_code == 200, good.text
    assert (await queue.stats(["order.close"]))["order.close"].delayed == 1


async def test_an_unreachable_redis_answers_503_with_retry_after(
    make_redis_server: Callable[..., PrivateRedis],
    client_for: Callable[[Queue], httpx.AsyncClient],
) -> None:
    server = make_redis_server()
    queue = Queue.from_url(server.url, name="shop")
    try:
        client = client_for(queue)
        assert (await client.post("/orders/1/close", params={"delay": 1})).status_code == 200
        server.kill()
        response = await client.post("/orders/2/close", params={"delay": 1})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        body = response.json()
        assert body["error"] == "unavailable"
        assert body["message"].startswith("RedisUnavailableError")
        assert body["field"] is None
    finally:
        await queue.close()


async def test_other_errors_are_left_to_the_app(
    queue: Queue, client_for: Callable[[Queue], httpx.AsyncClient]
) -> None:
    response = await client_for(queue).post("/fail")
    assert response.status_code == 500
    assert response.text == "Internal Server Error"
