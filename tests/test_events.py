"""Task headers, send hooks and event listeners: the hooks extensions (metrics, tracing) use."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio

from delayq import (
    Backoff,
    InvalidHeadersError,
    LeaseLostError,
    Queue,
    Retry,
    Sending,
    Task,
    TaskEvent,
)
from delayq.headers import MAX_HEADERS, MAX_HEADERS_BYTES
from delayq.worker.report import tell_reclaimed
from tests.fixtures_delayq import StartWorker
from tests.helpers import Recorder, expire_lease, queue_keys, reserve, task_fields, wait_for
from tests.test_worker import Seen

FAST = Backoff(initial=0.01, jitter=0)


# -- headers --------------------------------------------------------------------------------


async def test_headers_reach_the_handler_get_and_dead_letters(
    queue: Queue, start_worker: StartWorker
) -> None:
    seen = Seen()

    @queue.topic("t", max_attempts=1)
    async def handler(body: dict[str, int], task: Task) -> None:
        seen.add(dict(task.headers))
        raise ValueError("boom")

    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x": ""}
    task_id = await queue.send_delayed("t", {"n": 1}, 60, headers=headers)
    info = await queue.get("t", task_id)
    assert info is not None and info.headers == headers and info.body == {"n": 1}
    await queue.reschedule("t", task_id, delay=0)
    await start_worker(queue)
    assert await seen.wait(1) == [headers]
    await wait_for(lambda: queue.dead_letters("t"), 2, "the dead letter")
    letters = await queue.dead_letters("t")
    assert letters[0].headers == headers and letters[0].body == {"n": 1}


async def test_send_many_and_send_at_carry_headers(queue: Queue) -> None:
    from datetime import UTC, datetime, timedelta

    ids = await queue.send_many("t", [{"n": 1}, {"n": 2}], headers={"k": "v"})
    at = await queue.send_at("t", {}, datetime.now(UTC) + timedelta(minutes=1), headers={"a": "b"})
    for task_id in ids:
        assert (await queue.get("t", task_id)).headers == {"k": "v"}  # type: ignore[union-attr]
    assert (await queue.get("t", at)).headers == {"a": "b"}  # type: ignore[union-attr]


async def test_no_headers_store_the_body_alone(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    plain = await queue.send("t", {"order_id": 7})
    empty = await queue.send("t", {"order_id": 7}, headers={})
    for task_id in (plain, empty):
        _, body = await task_fields(redis_client, queue.keys("t"), task_id)
        assert body == b'{"order_id":7}'
    assert (await queue.get("t", plain)).headers == {}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "headers, problem",
    [
        ([("a", "b")], "mapping"),
        ({"": "v"}, "header name"),
        ({"-x": "v"}, "header name"),
        ({"a b": "v"}, "header name"),
        ({"x" * 129: "v"}, "header name"),
        ({1: "v"}, "header name"),
        ({"a": 1}, "must be a str"),
        ({"a": "line\nbreak"}, "control character"),
        ({f"h{n}": "" for n in range(MAX_HEADERS + 1)}, "over the limit"),
        ({"big": "x" * MAX_HEADERS_BYTES}, "bytes encoded"),
    ],
)
async def test_bad_headers_are_refused_and_nothing_is_written(
    queue: Queue, redis_client: redis.asyncio.Redis, headers: Any, problem: str
) -> None:
    for send in (
        lambda: queue.send("t", {}, headers=headers),
        lambda: queue.send_many("t", [{}], headers=headers),
    ):
        with pytest.raises(InvalidHeadersError, match=problem):
            await send()
    assert isinstance(InvalidHeadersError("x"), ValueError)
    assert await queue_keys(redis_client, queue.name) == []


# -- send hooks -----------------------------------------------------------------------------


async def test_send_hooks_wrap_each_send_and_may_add_headers(queue: Queue) -> None:
    calls: list[str] = []

    @queue.hooks.on_send
    async def outer(sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        calls.append(f"outer {sending.topic} {len(sending.task_ids)}")
        sending.headers["traceparent"] = "00-abc"
        await call_next()
        calls.append("outer done")

    @queue.hooks.on_send
    async def inner(sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        calls.append(f"inner sees {sending.headers['traceparent']} {sending.headers.get('mine')}")
        await call_next()

    one = await queue.send("t", {}, task_id="one", headers={"mine": "1"})
    many = await queue.send_many("t", [{}, {}], delay=60)
    assert calls == [
        "outer t 1", "inner sees 00-abc 1", "outer done",
        "outer t 2", "inner sees 00-abc None", "outer done",
    ]  # fmt: skip
    assert (await queue.get("t", one)).headers == {"mine": "1", "traceparent": "00-abc"}  # type: ignore[union-attr]
    assert (await queue.get("t", many[1])).headers == {"traceparent": "00-abc"}  # type: ignore[union-attr]


async def test_a_send_hook_sees_the_send_fail_and_must_call_next_once(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    failures: list[BaseException] = []

    @queue.hooks.on_send
    async def watch(sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        sending.headers["bad header"] = "x"  # validated after the hooks: the send fails
        try:
            await call_next()
        except InvalidHeadersError as exc:
            failures.append(exc)
            raise

    with pytest.raises(InvalidHeadersError):
        await queue.send("t", {})
    assert len(failures) == 1
    assert await queue_keys(redis_client, queue.name) == []

    queue.hooks.send_hooks.clear()

    @queue.hooks.on_send
    async def forgets(sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        return None

    with pytest.raises(RuntimeError, match="did not call call_next"):
        await queue.send("t", {})
    assert await queue_keys(redis_client, queue.name) == []


# -- events ---------------------------------------------------------------------------------


class Events(Recorder[TaskEvent]):
    def kinds(self, task_id: str | None = None) -> list[str]:
        return [e.kind for e in self.items if task_id is None or e.task_id == task_id]

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 5.0) -> None:
        await self.wait_until(lambda: self.kinds().count(kind) >= count, timeout)


async def test_listeners_hear_every_outcome(queue: Queue, start_worker: StartWorker) -> None:
    events = Events()
    queue.hooks.add_listener(events)

    @queue.topic("t", max_attempts=2, backoff=FAST)
    async def handler(body: dict[str, str], task: Task) -> None:
        await asyncio.sleep(0.02)
        if body["do"] == "fail":
            raise ValueError("boom")
        if body["do"] == "retry-once" and task.attempt == 1:
            raise Retry(delay=0.01, reason="again")

    await queue.send("t", {"do": "ok"}, task_id="ok")
    await queue.send_many("t", [{"do": "fail"}, {"do": "retry-once"}], task_ids=["fail", "again"])
    cancelled = await queue.send_delayed("t", {"do": "ok"}, 60)
    assert await queue.cancel("t", cancelled)
    await start_worker(queue)
    await events.wait_for("acked", 2)
    await events.wait_for("dead")

    sent = [e for e in events.items if e.kind == "sent"]
    # A batch is named by its first id in send order (sorted by delay, then id).
    assert [(e.task_id, e.count) for e in sent] == [("ok", 1), ("again", 2), (cancelled, 1)]
    assert events.kinds("ok") == ["sent", "delivered", "acked"]
    assert events.kinds("fail") == ["delivered", "retried", "delivered", "dead"]
    assert events.kinds("again") == ["sent", "delivered", "retried", "delivered", "acked"]
    assert events.kinds(cancelled) == ["sent", "cancelled"]
    for event in events.items:
        if event.kind == "delivered":
            assert event.lateness is not None and -0.005 <= event.lateness < 5
        if event.kind in ("acked", "retried", "dead"):
            assert event.duration is not None and 0.015 <= event.duration < 5
    dead = next(e for e in events.items if e.kind == "dead")
    assert (dead.attempt, dead.error) == (2, "ValueError: boom")


async def test_listeners_hear_expired_leases_and_lost_outcomes(queue: Queue) -> None:
    events = Events()
    queue.hooks.add_listener(events)
    await queue.send("t", {}, task_id="a")
    await reserve(queue, "t", max_attempts=1)
    await expire_lease(queue.redis, queue.keys("t"), "a")
    # What a worker's fetch loop does with a reserve's reply (no handler is registered).
    found = await queue.scripts.reserve_reporting(
        queue.keys("t"), limit=10, reclaim=10, ttr_ms=60_000, max_attempts=1
    )
    assert found.reclaimed == [("a", True)]
    tell_reclaimed(queue.hooks, "t", found.reclaimed)
    assert events.kinds("a") == ["sent", "expired", "dead"]


async def test_a_failing_listener_is_logged_and_ignored(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(event: TaskEvent) -> None:
        raise RuntimeError("listener bug")

    queue.hooks.add_listener(broken)
    assert await queue.send("t", {})
    assert "listener bug" in caplog.text
    queue.hooks.remove_listener(broken)
    queue.hooks.remove_listener(broken)  # not registered any more: no error
    assert queue.hooks.listeners == []


async def test_the_lease_token_api_tells_the_listeners(queue: Queue) -> None:
    """``queue.consumer`` (what the HTTP API serves) reports its leases and their acks and
    nacks as a worker reports its deliveries, so metrics and traces cover HTTP consumers."""
    for name in ("ok", "again", "dead", "late"):
        await queue.send("http", {"n": name}, task_id=name)
    events = Events()
    queue.hooks.add_listener(events)
    leased = {t.id: t for t in await queue.consumer.lease("http", limit=4)}
    assert sorted(leased) == ["again", "dead", "late", "ok"]
    delivered = [e for e in events.items if e.kind == "delivered"]
    assert sorted(e.task_id for e in delivered) == ["again", "dead", "late", "ok"]
    assert all(e.consumer and e.attempt == 1 and e.lateness is not None for e in delivered)
    assert all(e.lateness is not None and e.lateness >= 0 for e in delivered)
    await queue.consumer.ack(leased["ok"].lease_token)
    await queue.consumer.nack(leased["again"].lease_token, delay=60, error="busy")
    await queue.consumer.nack(leased["dead"].lease_token, dead=True, error="bad")
    await expire_lease(queue.redis, queue.keys("http"), "late")
    with pytest.raises(LeaseLostError):
        await queue.consumer.ack(leased["ok"].lease_token)  # acked already
    outcomes = [(e.task_id, e.kind, e.error) for e in events.items if e.kind != "delivered"]
    assert outcomes == [
        ("ok", "acked", None), ("again", "retried", "busy"), ("dead", "dead", "bad"),
        ("ok", "lease_lost", None),
    ]  # fmt: skip
    assert all(e.consumer for e in events.items)
    # The next lease reclaims the expired one: told as a worker's reserve tells it.
    (again,) = await queue.consumer.lease("http")
    assert again.id == "late" and again.attempt == 2
    assert [(e.task_id, e.kind) for e in events.items[-2:]] == [
        ("late", "expired"), ("late", "delivered"),
    ]  # fmt: skip
