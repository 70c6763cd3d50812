"""Strict topics: a queue opened with ``strict_topics=True`` refuses sends to topics this
process registered no handler for, before writing anything; the default accepts them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue, UnknownTopicError


@pytest.fixture
async def strict(redis_url: str, queue_name: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(redis_url, name=queue_name, strict_topics=True)

    @queue.topic("order.close")
    async def close(body: dict[str, int]) -> None: ...

    @queue.topic("order.open")
    async def open_(body: dict[str, int]) -> None: ...

    try:
        yield queue
    finally:
        await queue.close()


async def nothing_stored(client: redis.asyncio.Redis, queue_name: str) -> bool:
    return [key async for key in client.scan_iter(match=f"*{queue_name}*")] == []


async def test_every_send_to_an_unknown_topic_is_refused_and_writes_nothing(
    strict: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    at = datetime.now(UTC) + timedelta(minutes=1)
    sends = {
        "send": strict.send("order.clsoe", {}),
        "send_delayed": strict.send_delayed("order.clsoe", {}, delay=5),
        "send_at": strict.send_at("order.clsoe", {}, at),
        "send_many": strict.send_many("order.clsoe", [{}, {}], delay=0),
    }
    for name, call in sends.items():
        with pytest.raises(UnknownTopicError) as raised:
            await call
        error = raised.value
        assert isinstance(error, InvalidInputError), name
        assert (error.topic, error.nearest[0]) == ("order.clsoe", "order.close"), name
        assert "'order.clsoe'" in str(error) and "did you mean 'order.close'" in str(error)
    assert await nothing_stored(redis_client, queue_name)


async def test_a_registered_topic_is_sent_to_and_far_names_suggest_nothing(
    strict: Queue,
) -> None:
    sent = await strict.send_delayed("order.close", {"id": 1}, delay=60)
    assert sent.outcome == "created"
    with pytest.raises(UnknownTopicError) as raised:
        await strict.send("billing", {})
    assert raised.value.nearest == []
    assert "did you mean" not in str(raised.value)


async def test_the_default_accepts_any_topic(queue: Queue) -> None:
    assert (await queue.send("anything", {})).outcome == "created"  # other consumers' topics


async def test_a_topic_registered_after_opening_counts_at_once(strict: Queue) -> None:
    with pytest.raises(UnknownTopicError):
        await strict.send("late", {})

    @strict.topic("late")
    async def handler(body: dict[str, int]) -> None: ...

    assert (await strict.send("late", {})).outcome == "created"


async def test_from_sentinel_takes_the_flag_and_refuses_before_connecting() -> None:
    queue = Queue.from_sentinel([("127.0.0.1", 1)], service="nowhere", strict_topics=True)
    try:
        with pytest.raises(UnknownTopicError):
            await queue.send("t", {})  # no Sentinel listens on port 1: nothing was tried
    finally:
        await queue.close()


async def test_the_http_send_answers_404_unknown_topic(
    strict: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    # The web extra is imported here: the rest of this file runs at the lowest core versions.
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from delayq.web import create_app
    from tests.web.conftest import auth, tokens

    transport = httpx.ASGITransport(app=create_app(strict, tokens()))
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        refused = await client.post(
            "/api/topics/order.clsoe/tasks", json={"body": {}}, headers=auth("produce")
        )
        assert refused.status_code == 404, refused.text
        error = refused.json()
        assert (error["error"], error["field"]) == ("unknown_topic", "topic")
        assert "did you mean 'order.close'" in error["message"]
        assert await nothing_stored(redis_client, queue_name)
        accepted = await client.post(
            "/api/topics/order.close/tasks", json={"body": {"id": 1}}, headers=auth("produce")
        )
        assert accepted.status_code == 201, accepted.text
        assert not await nothing_stored(redis_client, queue_name)  # the check can fail
