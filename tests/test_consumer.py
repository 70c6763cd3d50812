"""Queue.consumer: leasing without a handler (the HTTP API's consumers), fenced like a worker."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest
import redis.asyncio

from delayq import InvalidInputError, LeaseLostError, Queue
from delayq.consumer import MAX_WAIT_SECONDS, LeaseHandle
from tests.helpers import expire_lease, stored, wait_for


async def test_lease_then_ack_deletes_the_task(queue: Queue) -> None:
    task_id = await queue.send("t", {"n": 1}, max_attempts=4)
    (task,) = await queue.consumer.lease("t", limit=5)
    assert (task.id, task.topic, task.attempt, task.max_attempts) == (task_id, "t", 1, 4)
    assert task.body == {"n": 1}
    assert task.lease_deadline > task.due_at
    assert (await stored(queue, "t", task_id)).state == "reserved"
    await queue.consumer.ack(task.lease_token)
    assert await queue.get("t", task_id) is None
    with pytest.raises(LeaseLostError):
        await queue.consumer.ack(task.lease_token)


async def test_the_default_lease_is_the_topics(queue: Queue) -> None:
    @queue.topic("t", ttr=120, max_attempts=9)
    async def handler(body: dict[str, int]) -> None: ...

    await queue.send("t", {"n": 1})
    (task,) = await queue.consumer.lease("t")
    assert task.max_attempts == 9
    lease_s = (task.lease_deadline - task.due_at).total_seconds()
    assert 110 < lease_s < 130
    (other,) = [await queue.send("t", {"n": 2})]
    (shorter,) = await queue.consumer.lease("t", ttr=5)
    assert shorter.id == other
    assert (shorter.lease_deadline - shorter.due_at).total_seconds() < 30


async def test_a_stale_lease_changes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    task_id = await queue.send("t", {})
    (first,) = await queue.consumer.lease("t")
    await expire_lease(redis_client, queue.keys("t"), task_id)
    (second,) = await queue.consumer.lease("t")  # reclaims, then leases again
    assert second.id == task_id and second.attempt == 2
    assert second.lease_token != first.lease_token
    before = await stored(queue, "t", task_id)
    for call in (
        queue.consumer.ack(first.lease_token),
        queue.consumer.nack(first.lease_token, dead=True),
        queue.consumer.nack(first.lease_token, delay=0),
        queue.consumer.extend(first.lease_token, 60),
    ):
        with pytest.raises(LeaseLostError):
            await call
    assert await stored(queue, "t", task_id) == before
    await queue.consumer.ack(second.lease_token)
    assert await queue.get("t", task_id) is None


async def test_nack_retries_after_the_delay_or_buries(queue: Queue) -> None:
    retried = await queue.send("t", {}, max_attempts=3)
    buried = await queue.send("t", {})
    leases = {t.id: t for t in await queue.consumer.lease("t", limit=2)}
    result = await queue.consumer.nack(leases[retried].lease_token, delay=60, error="boom")
    assert result.outcome == "retry"
    info = await stored(queue, "t", retried)
    assert (info.state, info.last_error, info.attempts) == ("delayed", "boom", 1)
    assert info.due_at == result.at
    dead = await queue.consumer.nack(leases[buried].lease_token, dead=True, error="no")
    assert dead.outcome == "dead"
    info = await stored(queue, "t", buried)
    assert (info.state, info.last_error) == ("dead", "no")


async def test_nack_of_the_last_attempt_buries(queue: Queue) -> None:
    task_id = await queue.send("t", {}, max_attempts=1)
    (task,) = await queue.consumer.lease("t")
    result = await queue.consumer.nack(task.lease_token)  # the topic's backoff, no attempts left
    assert result.outcome == "dead"
    assert (await stored(queue, "t", task_id)).state == "dead"


async def test_extend_moves_the_deadline_later_only(queue: Queue) -> None:
    await queue.send("t", {})
    (task,) = await queue.consumer.lease("t", ttr=10)
    later = await queue.consumer.extend(task.lease_token, 600)
    assert (later - task.lease_deadline).total_seconds() > 500
    assert await queue.consumer.extend(task.lease_token, 1) == later  # never shortened
    info = await stored(queue, "t", task.id)
    assert info.lease_deadline == later


async def test_a_waiting_lease_returns_when_a_task_is_sent(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    waiting = asyncio.create_task(queue.consumer.lease("t", wait=MAX_WAIT_SECONDS))
    await wait_for(redis_client.pubsub_numpat, 5, "the lease to subscribe")
    assert not waiting.done()
    started = time.monotonic()
    task_id = await queue.send("t", {"x": 1})
    (task,) = await asyncio.wait_for(waiting, 10)
    assert task.id == task_id
    # Woken by the publish, not by its 2 s idle recheck (generous: a loaded host).
    assert time.monotonic() - started < MAX_WAIT_SECONDS / 2


async def test_a_waiting_lease_returns_when_a_delayed_task_falls_due(queue: Queue) -> None:
    task_id = await queue.send_delayed("t", {}, delay=0.3)
    started = time.monotonic()
    (task,) = await queue.consumer.lease("t", wait=10)
    assert task.id == task_id
    assert time.monotonic() - started >= 0.25


async def test_waiters_do_not_steal_each_others_wakeups(queue: Queue) -> None:
    waiters = [asyncio.create_task(queue.consumer.lease("t", wait=20)) for _ in range(3)]
    await asyncio.sleep(0.2)
    sent = set()
    for n in range(3):
        sent.add(await queue.send("t", {"n": n}))
        await asyncio.sleep(0.05)
    got = await asyncio.wait_for(asyncio.gather(*waiters), 15)
    assert {task.id for batch in got for task in batch} == sent


async def test_a_wait_that_runs_out_returns_nothing_without_polling(queue: Queue) -> None:
    calls = 0
    reserve = queue.scripts.reserve_reporting

    async def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return await reserve(*args, **kwargs)  # type: ignore[arg-type]

    queue.scripts.reserve_reporting = counting  # type: ignore[method-assign]
    assert await queue.consumer.lease("t", wait=0.5) == []
    assert calls == 2  # one look, one after the wait: no loop of reserves


async def test_a_waiting_lease_survives_a_lost_subscription(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    assert await queue.consumer.lease("t", wait=0.05) == []  # opens the subscription
    await redis_client.client_kill_filter(_type="pubsub")
    waiting = asyncio.create_task(queue.consumer.lease("t", wait=20))
    await wait_for(redis_client.pubsub_numpat, 10, "the lease to subscribe again")
    task_id = await queue.send("t", {})
    (task,) = await asyncio.wait_for(waiting, 15)
    assert task.id == task_id


async def test_bad_arguments_lease_nothing(queue: Queue) -> None:
    await queue.send("t", {})
    for kwargs in ({"limit": 0}, {"limit": 101}, {"limit": True}, {"wait": -1}, {"wait": 31},
                   {"ttr": 0}, {"ttr": "1"}):  # fmt: skip
        with pytest.raises(InvalidInputError):
            await queue.consumer.lease("t", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await queue.consumer.lease("bad topic")
    assert (await queue.stats())["t"].ready == 1


def token_of(text: str) -> str:
    return "1" + base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "token",
    [
        "",
        "1",
        "2" + token_of("5\x1f1\x1ft\x1fid")[1:],  # unknown version
        token_of("5\x1f1\x1ft\x1fid") + "=",  # padding: not the canonical form
        token_of("5\x1f1\x1ft\x1fid")[:-1] + "!",
        token_of("5\x1f1\x1ft"),  # three fields
        token_of("5\x1f1\x1ft\x1fid\x1fmore"),
        token_of("05\x1f1\x1ft\x1fid"),  # leading zero
        token_of("-5\x1f1\x1ft\x1fid"),
        token_of("5\x1f0\x1ft\x1fid"),  # attempt 0
        token_of("5\x1f1\x1fbad topic\x1fid"),
        token_of("5\x1f1\x1ft\x1f"),  # empty id
        token_of("5\x1f1\x1ft\x1f" + "x" * 257),
        "1" + base64.urlsafe_b64encode(b"\xff\xfe").rstrip(b"=").decode(),
        "1" + "A" * 2000,
    ],
)
async def test_malformed_lease_tokens_are_refused(queue: Queue, token: str) -> None:
    for call in (
        queue.consumer.ack(token),
        queue.consumer.nack(token),
        queue.consumer.extend(token, 1),
    ):
        with pytest.raises(InvalidInputError):
            await call


async def test_a_forged_token_cannot_touch_another_task(queue: Queue) -> None:
    mine = await queue.send("t", {})
    theirs = await queue.send("t", {})
    leases = {t.id: t for t in await queue.consumer.lease("t", limit=2)}
    handle = LeaseHandle.parse(leases[mine].lease_token)
    forged = LeaseHandle("t", theirs, handle.fencing_token, 1).encode()
    with pytest.raises(LeaseLostError):
        await queue.consumer.ack(forged)
    assert (await stored(queue, "t", theirs)).state == "reserved"
    assert LeaseHandle.parse(leases[theirs].lease_token).task_id == theirs


def test_lease_handles_round_trip() -> None:
    handle = LeaseHandle("orders/eu", "id with spaces/and:colons", "123456789012345", 7)
    assert LeaseHandle.parse(handle.encode()) == handle
    assert handle.encode().replace("-", "").replace("_", "").isalnum()
