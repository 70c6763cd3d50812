"""The producer and management API against a real Redis: send*, get, cancel, reschedule,
stats, dead letters and replay, and the clients a Queue can be built on.

Leases are taken by calling reserve.lua directly (``tests.helpers.reserve``), so no worker
timing is involved except in the one end-to-end test on a ``decode_responses`` client.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import redis.asyncio
from pydantic import BaseModel

from delayq import InvalidInputError, Queue, RedisCommandError, Task, TopicStats
from tests.fixtures_delayq import StartWorker
from tests.helpers import (
    LONG_TTR_MS,
    counted,
    queue_keys,
    redis_now_ms,
    reserve,
    schedule_entries,
    stored,
    task_fields,
    wait_for,
)

# Slack for comparing a due time with Redis's clock read by the test around the call.
CLOCK_SLACK_MS = 250


class Greeting(BaseModel):
    name: str
    times: int = 1


def ms(moment: datetime | None) -> int:
    assert moment is not None
    return round(moment.timestamp() * 1000)


async def lease(queue: Queue, topic: str, task_id: str) -> str:
    """Reserve ``task_id`` (it must be the only due task of ``topic``) and return its token."""
    _, _, items = await reserve(queue, topic)
    assert [i for i, _, _ in items] == [task_id]
    return items[0][1]


async def bury(queue: Queue, topic: str, task_id: str, error: str = "Boom: it broke") -> None:
    """Lease ``task_id`` and dead-letter it, as a worker does with an unrecoverable task."""
    token = await lease(queue, topic, task_id)
    outcome, _ = await queue.scripts.nack(
        queue.keys(topic), task_id, token, mode="dead", error=error, max_attempts=3
    )
    assert outcome == 2


@pytest.fixture
async def decoding_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


# -- sending --------------------------------------------------------------------------------


async def test_send_stores_a_ready_task(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    before = await redis_now_ms(redis_client)
    task_id = await queue.send("emails", {"to": "a@b.c", "n": [1, 2]})
    after = await redis_now_ms(redis_client)

    info = await stored(queue, "emails", task_id)
    assert (info.id, info.topic, info.state) == (task_id, "emails", "ready")
    assert info.body == {"to": "a@b.c", "n": [1, 2]}
    assert (info.attempts, info.max_attempts, info.last_error) == (0, 5, None)  # the default
    assert (info.lease_deadline, info.dead_at) == (None, None)
    assert before <= ms(info.enqueued_at) == ms(info.due_at) <= after


@pytest.mark.parametrize(
    ("delay", "expected_ms"),
    [
        (10, 10_000),
        (0.25, 250),
        (0.0001, 1),  # rounded up: a delay is never shortened
        (1.0005, 1001),
        (timedelta(milliseconds=1500), 1500),
        (timedelta(hours=1), 3_600_000),
        (timedelta(0), 0),
    ],
    ids=repr,
)
async def test_send_delayed_counts_from_redis_time(
    queue: Queue, redis_client: redis.asyncio.Redis, delay: Any, expected_ms: int
) -> None:
    before = await redis_now_ms(redis_client)
    task_id = await queue.send_delayed("t", {}, delay=delay)
    after = await redis_now_ms(redis_client)

    info = await stored(queue, "t", task_id)
    # enqueued and due come from one TIME call inside send.lua, so they differ by the delay exactly.
    assert ms(info.due_at) - ms(info.enqueued_at) == expected_ms
    assert before <= ms(info.enqueued_at) <= after
    if expected_ms == 0:
        assert info.state == "ready"
    elif expected_ms >= 1_000:
        assert info.state == "delayed"


async def test_a_delayed_task_becomes_ready_when_due(queue: Queue) -> None:
    task_id = await queue.send_delayed("t", {}, delay=0.1)
    info = await stored(queue, "t", task_id)
    assert info.state == "delayed"
    assert counted(await queue.stats()) == {"t": TopicStats(delayed=1, ready=0, reserved=0, dead=0)}

    async def is_ready() -> bool:
        return (await stored(queue, "t", task_id)).state == "ready"

    await wait_for(is_ready, 5, "the task to fall due")
    assert counted(await queue.stats()) == {"t": TopicStats(delayed=0, ready=1, reserved=0, dead=0)}


async def test_send_at_stores_the_given_time(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    at = datetime.fromtimestamp((await redis_now_ms(redis_client) + 60_000) / 1000, tz=UTC)
    task_id = await queue.send_at("t", {}, at=at)
    info = await stored(queue, "t", task_id)
    assert info.state == "delayed"
    assert ms(info.due_at) == ms(at)


async def test_send_at_accepts_any_time_zone(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    utc = datetime.fromtimestamp((await redis_now_ms(redis_client) + 60_000) / 1000, tz=UTC)
    tokyo = utc.astimezone(timezone(timedelta(hours=9)))
    task_id = await queue.send_at("t", {}, at=tokyo)
    info = await stored(queue, "t", task_id)
    assert ms(info.due_at) == ms(utc)


async def test_the_due_time_follows_redis_clock(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    task_id = await queue.send_delayed("t", {}, delay=30)
    redis_now = await redis_now_ms(redis_client)
    info = await stored(queue, "t", task_id)
    assert abs(ms(info.due_at) - (redis_now + 30_000)) <= CLOCK_SLACK_MS


async def test_send_options_are_stored_with_the_task(queue: Queue) -> None:
    task_id = await queue.send("t", {}, ttr=timedelta(seconds=7), max_attempts=9)
    info = await stored(queue, "t", task_id)
    assert info.max_attempts == 9
    # The task's own ttr decides its lease, whatever the consumer's topic default.
    now, _, _ = await reserve(queue, "t", ttr_ms=1_000)
    info = await stored(queue, "t", task_id)
    assert ms(info.lease_deadline) == now + 7_000


@pytest.mark.parametrize(
    "body", [{"a": 1}, [1, "two", None], "text", 42, 1.5, None, True, {"nested": {"x": [{}]}}]
)
async def test_any_json_body_without_a_handler(queue: Queue, body: Any) -> None:
    task_id = await queue.send("free", body)
    info = await stored(queue, "free", task_id)
    assert info.body == body


async def test_a_model_body_is_sent_as_json_without_a_handler(queue: Queue) -> None:
    task_id = await queue.send("greet", Greeting(name="ada", times=2))
    info = await stored(queue, "greet", task_id)
    assert info.body == {"name": "ada", "times": 2}


async def test_typed_handle_sends(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    @queue.topic("greet", max_attempts=2)
    async def greet(body: Greeting, task: Task) -> None:
        pass

    now_id = await greet.send(Greeting(name="a"))
    later_id = await greet.send_delayed(Greeting(name="b", times=3), 60, max_attempts=7)
    at = datetime.fromtimestamp((await redis_now_ms(redis_client) + 90_000) / 1000, tz=UTC)
    at_id = await greet.send_at(Greeting(name="c"), at, task_id="greet-c")
    # A dict is validated into the model and stored in its canonical form.
    dict_id = await greet.send({"name": "d", "times": "4"})  # type: ignore[arg-type]

    now_info = await stored(queue, "greet", now_id)
    assert (now_info.state, now_info.body) == ("ready", {"name": "a", "times": 1})
    later = await stored(queue, "greet", later_id)
    assert (later.state, later.max_attempts) == ("delayed", 7)
    assert at_id == "greet-c"
    assert ms((await stored(queue, "greet", at_id)).due_at) == ms(at)
    assert (await stored(queue, "greet", dict_id)).body == {"name": "d", "times": 4}


async def test_generated_ids_are_unique(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    ids: list[str] = []
    for _ in range(40):  # redis-py's async pool holds 100 connections at most
        ids += await asyncio.gather(*(queue.send("t", {"i": i}) for i in range(50)))
    assert len(set(ids)) == 2_000
    assert len(await schedule_entries(redis_client, queue.keys("t"))) == 2_000
    assert counted(await queue.stats()) == {
        "t": TopicStats(delayed=0, ready=2_000, reserved=0, dead=0)
    }


# -- idempotent send ------------------------------------------------------------------------


async def assert_resend_adds_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str, task_id: str
) -> None:
    before = {
        key: await redis_client.dump(key) for key in await queue_keys(redis_client, queue_name)
    }
    info_before = await stored(queue, "t", task_id)
    assert await queue.send_delayed("t", {"v": 2}, 999, task_id=task_id, max_attempts=9) == task_id
    assert await queue.send("t", {"v": 3}, task_id=task_id) == task_id
    after = {
        key: await redis_client.dump(key) for key in await queue_keys(redis_client, queue_name)
    }
    assert after == before
    info_after = await stored(queue, "t", task_id)
    # A delayed task may turn ready between the two reads; nothing else may differ.
    assert info_after == info_before.model_copy(update={"state": info_after.state})


async def test_resending_a_delayed_id_adds_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    assert await queue.send_delayed("t", {"v": 1}, 60, task_id="order-1") == "order-1"
    await assert_resend_adds_nothing(queue, redis_client, queue_name, "order-1")
    info = await stored(queue, "t", "order-1")
    assert (info.state, info.body, info.max_attempts) == ("delayed", {"v": 1}, 5)


async def test_resending_a_ready_id_adds_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    await queue.send("t", {"v": 1}, task_id="order-1")
    await assert_resend_adds_nothing(queue, redis_client, queue_name, "order-1")
    info = await stored(queue, "t", "order-1")
    assert (info.state, info.body) == ("ready", {"v": 1})


async def test_resending_a_reserved_id_adds_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    await queue.send("t", {"v": 1}, task_id="order-1")
    await lease(queue, "t", "order-1")
    await assert_resend_adds_nothing(queue, redis_client, queue_name, "order-1")
    info = await stored(queue, "t", "order-1")
    assert (info.state, info.attempts) == ("reserved", 1)


async def test_a_dead_id_may_be_sent_again(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    await queue.send("t", {"v": 1}, task_id="order-1", max_attempts=4)
    await bury(queue, "t", "order-1")
    assert await queue.send_delayed("t", {"v": 2}, 60, task_id="order-1") == "order-1"

    info = await stored(queue, "t", "order-1")
    assert (info.state, info.body, info.attempts) == ("delayed", {"v": 2}, 0)
    assert (info.max_attempts, info.last_error, info.dead_at) == (5, None, None)  # the default
    assert await queue.dead_letters("t") == []
    assert await redis_client.hexists(queue.keys("t").errors, "order-1") == 0


# -- get ------------------------------------------------------------------------------------


async def test_send_many_stores_every_task_across_batches(queue: Queue) -> None:
    """Several batches (two are in flight at a time): every task stored with its own body and
    delay, ids returned in the order of the bodies."""
    delays = [60 + n for n in range(45)]
    ids = await queue.send_many("t", [{"n": n} for n in range(45)], delay=delays, batch_size=7)
    assert len(set(ids)) == 45
    for n, task_id in enumerate(ids):
        info = await stored(queue, "t", task_id)
        assert (info.state, info.body) == ("delayed", {"n": n})
        assert info.due_at is not None and info.enqueued_at is not None
        assert ms(info.due_at) - ms(info.enqueued_at) == delays[n] * 1000


@pytest.mark.parametrize(
    ("options", "max_attempts", "lease_ms"),
    [
        ({"ttr": timedelta(seconds=7), "max_attempts": 9}, 9, 7_000),
        ({"max_attempts": 2}, 2, 1_000),  # the ttr stays the consumer's default
        ({"ttr": 3}, 5, 3_000),  # max_attempts: the default
        ({}, 5, 1_000),
    ],
)
async def test_send_many_stores_the_options_with_every_task(
    queue: Queue, options: dict[str, Any], max_attempts: int, lease_ms: int
) -> None:
    """Overrides travel with each task of every batch (two more fields a task on the wire),
    and a batch without them stores the topic defaults (0) and the right bodies; lookups
    report the limit that applies."""
    ids = await queue.send_many("t", [{"n": n} for n in range(5)], batch_size=2, **options)
    for n, task_id in enumerate(ids):
        info = await stored(queue, "t", task_id)
        assert (info.body, info.max_attempts) == ({"n": n}, max_attempts)
    now, _, items = await reserve(queue, "t", ttr_ms=1_000)
    assert sorted(task_id for task_id, _, _ in items) == sorted(ids)
    for task_id in ids:
        assert ms((await stored(queue, "t", task_id)).lease_deadline) == now + lease_ms


async def test_send_many_skips_live_ids_and_repeats_across_batches(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {"v": "first"}, 60, task_id="a")
    task_ids = ["a", "b", "c", "d", "b", "e", "c"]  # "b" and "c" again in later batches
    bodies = [{"v": task_id, "n": n} for n, task_id in enumerate(task_ids)]
    assert await queue.send_many("t", bodies, task_ids=task_ids, delay=30, batch_size=2) == task_ids
    assert (await stored(queue, "t", "a")).body == {"v": "first"}
    assert (await stored(queue, "t", "b")).body == {"v": "b", "n": 1}
    assert (await stored(queue, "t", "c")).body == {"v": "c", "n": 2}
    assert sorted(await schedule_entries(redis_client, queue.keys("t"))) == [
        "a",
        "b",
        "c",
        "d",
        "e",
    ]


async def test_send_many_reorders_for_redis_but_not_for_the_caller(queue: Queue) -> None:
    """Tasks go to Redis sorted by (delay, id), which is cheaper to insert, yet every id keeps
    its own body and delay; with a repeated id nothing is reordered, and the first send of
    it wins even when the second is due earlier."""
    task_ids = ["m", "z", "a", "k"]
    delays = [50, 10, 50, 30]
    bodies = [{"i": n} for n in range(4)]
    assert await queue.send_many("t", bodies, task_ids=task_ids, delay=delays, batch_size=2) == (
        task_ids
    )
    for n, task_id in enumerate(task_ids):
        info = await stored(queue, "t", task_id)
        assert info.body == {"i": n}
        assert ms(info.due_at) - ms(info.enqueued_at) == delays[n] * 1000
    await queue.send_many("t", [{"v": 1}, {"v": 2}], task_ids=["dup", "dup"], delay=[60, 5])
    info = await stored(queue, "t", "dup")
    assert info.body == {"v": 1}
    assert ms(info.due_at) - ms(info.enqueued_at) == 60_000


async def test_send_many_validates_everything_before_writing(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    bodies: list[Any] = [{"n": n} for n in range(20)] + [{"bad": object()}]
    with pytest.raises(InvalidInputError):
        await queue.send_many("t", bodies, batch_size=5)
    with pytest.raises(InvalidInputError):
        await queue.send_many("t", [{}] * 3, delay=[1, 2])
    assert await schedule_entries(redis_client, queue.keys("t")) == {}


async def test_send_many_raises_the_first_failure_and_leaves_no_call_behind(
    queue: Queue, redis_client: redis.asyncio.Redis, recwarn: pytest.WarningsRecorder
) -> None:
    await redis_client.set(queue.keys("t").wheel, "garbage")  # every batch fails
    with pytest.raises(RedisCommandError, match="WRONGTYPE"):
        await queue.send_many("t", [{}] * 20, delay=30, batch_size=5)
    current = asyncio.current_task()
    await wait_for(lambda: asyncio.all_tasks() == {current}, 5, "every batch's call to end")
    assert not [w for w in recwarn if "never retrieved" in str(w.message)]


async def test_get_reports_each_state(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    await queue.send_delayed("t", {"s": "d"}, 60, task_id="delayed")
    await queue.send("t", {"s": "r"}, task_id="ready")
    await queue.send("u", {"s": "l"}, task_id="leased", max_attempts=2)
    await queue.send("v", {"s": "x"}, task_id="dead")

    delayed = await stored(queue, "t", "delayed")
    assert (delayed.state, delayed.body, delayed.lease_deadline) == ("delayed", {"s": "d"}, None)
    ready = await stored(queue, "t", "ready")
    assert (ready.state, ready.attempts) == ("ready", 0)

    now, _, _ = await reserve(queue, "u", ttr_ms=45_000)
    leased = await stored(queue, "u", "leased")
    assert (leased.state, leased.attempts, leased.max_attempts) == ("reserved", 1, 2)
    assert ms(leased.lease_deadline) == now + 45_000
    assert leased.dead_at is None

    before = await redis_now_ms(redis_client)
    await bury(queue, "v", "dead", error="ValueError: bad")
    dead = await stored(queue, "v", "dead")
    assert (dead.state, dead.attempts, dead.last_error) == ("dead", 1, "ValueError: bad")
    assert dead.body == {"s": "x"}
    assert dead.lease_deadline is None
    assert before <= ms(dead.dead_at) <= before + CLOCK_SLACK_MS


async def test_get_returns_none_for_unknown_and_finished_tasks(queue: Queue) -> None:
    assert await queue.get("t", "nope") is None
    await queue.send("t", {}, task_id="x")
    token = await lease(queue, "t", "x")
    assert await queue.scripts.ack(queue.keys("t"), [("x", token)]) == [True]
    assert await queue.get("t", "x") is None
    assert await queue.stats() == {}


# -- cancel ---------------------------------------------------------------------------------


async def assert_gone(queue: Queue, redis_client: redis.asyncio.Redis, task_id: str) -> None:
    keys = queue.keys("t")
    assert await queue.get("t", task_id) is None
    assert task_id not in await schedule_entries(redis_client, keys)
    for zset in (keys.reserved, keys.dead):
        assert await redis_client.zscore(zset, task_id) is None
    assert await task_fields(redis_client, keys, task_id) == (None, None)
    assert await redis_client.hexists(keys.errors, task_id) == 0


@pytest.mark.parametrize("delay", [0, 60], ids=["ready", "delayed"])
async def test_cancel_a_waiting_task(
    queue: Queue, redis_client: redis.asyncio.Redis, delay: int
) -> None:
    await queue.send_delayed("t", {}, delay, task_id="x")
    assert await queue.cancel("t", "x") is True
    await assert_gone(queue, redis_client, "x")
    assert await queue.cancel("t", "x") is False


async def test_cancel_a_dead_task(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    await queue.send("t", {}, task_id="x")
    await bury(queue, "t", "x")
    assert await queue.cancel("t", "x") is True
    await assert_gone(queue, redis_client, "x")
    assert await queue.dead_letters("t") == []


async def test_cancel_leaves_a_reserved_task_running(queue: Queue) -> None:
    await queue.send("t", {}, task_id="x")
    token = await lease(queue, "t", "x")
    assert await queue.cancel("t", "x") is False
    info = await stored(queue, "t", "x")
    assert info.state == "reserved"
    # The holder can still finish it.
    assert await queue.scripts.ack(queue.keys("t"), [("x", token)]) == [True]


async def test_cancel_an_unknown_task(queue: Queue) -> None:
    assert await queue.cancel("t", "nope") is False


# -- reschedule -----------------------------------------------------------------------------


async def test_reschedule_moves_a_delayed_task(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {}, 60, task_id="x")
    assert await queue.reschedule("t", "x", delay=120) is True
    now = await redis_now_ms(redis_client)
    info = await stored(queue, "t", "x")
    assert abs(ms(info.due_at) - (now + 120_000)) <= CLOCK_SLACK_MS
    assert (await schedule_entries(redis_client, queue.keys("t")))["x"] == ms(info.due_at)

    assert await queue.reschedule("t", "x", delay=0) is True
    info = await stored(queue, "t", "x")
    assert info.state == "ready"


async def test_reschedule_delays_a_ready_task(queue: Queue) -> None:
    await queue.send("t", {}, task_id="x")
    assert await queue.reschedule("t", "x", delay=timedelta(minutes=5)) is True
    info = await stored(queue, "t", "x")
    assert info.state == "delayed"
    _, wake, items = await reserve(queue, "t")
    assert items == []
    assert wake == ms(info.due_at)


async def test_reschedule_at(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    await queue.send_delayed("t", {}, 60, task_id="x")
    at = datetime.fromtimestamp((await redis_now_ms(redis_client) + 600_000) / 1000, tz=UTC)
    assert await queue.reschedule("t", "x", at=at) is True
    info = await stored(queue, "t", "x")
    assert ms(info.due_at) == ms(at)

    # Slightly in the past (within the tolerance) means now.
    at = datetime.fromtimestamp((await redis_now_ms(redis_client) - 1_000) / 1000, tz=UTC)
    assert await queue.reschedule("t", "x", at=at) is True
    info = await stored(queue, "t", "x")
    assert info.state == "ready"
    assert ms(info.due_at) > ms(at)


async def test_reschedule_refuses_reserved_dead_and_unknown_tasks(queue: Queue) -> None:
    await queue.send("t", {}, task_id="leased")
    await lease(queue, "t", "leased")
    await queue.send("t", {}, task_id="dead")
    await bury(queue, "t", "dead")

    for task_id in ("leased", "dead", "unknown"):
        assert await queue.reschedule("t", task_id, delay=60) is False
        assert await queue.reschedule("t", task_id, at=datetime.now(UTC)) is False
    leased = await stored(queue, "t", "leased")
    assert leased.state == "reserved"
    dead = await stored(queue, "t", "dead")
    assert dead.state == "dead"
    assert await queue.get("t", "unknown") is None


# -- stats ----------------------------------------------------------------------------------


async def test_stats_counts_each_state_of_each_topic(queue: Queue) -> None:
    assert await queue.stats() == {}
    await queue.send_delayed("a", {}, 60)
    await queue.send_delayed("a", {}, 60)
    await queue.send("a", {})
    await queue.send("b", {}, task_id="leased")
    await lease(queue, "b", "leased")
    await queue.send("b", {}, task_id="dead")
    await bury(queue, "b", "dead")
    await queue.send("c", {}, task_id="gone")
    assert await queue.cancel("c", "gone")

    assert counted(await queue.stats()) == {
        "a": TopicStats(delayed=2, ready=1, reserved=0, dead=0),
        "b": TopicStats(delayed=0, ready=0, reserved=1, dead=1),
    }


async def test_stats_is_per_queue(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    other = Queue(redis_client, name=f"{queue.name}x")
    await other.send("a", {})
    assert await queue.stats() == {}
    await queue.send("a", {})
    await queue.send("a", {})
    assert counted(await other.stats()) == {"a": TopicStats(delayed=0, ready=1, reserved=0, dead=0)}
    assert counted(await queue.stats()) == {"a": TopicStats(delayed=0, ready=2, reserved=0, dead=0)}


# -- dead letters and replay ----------------------------------------------------------------


async def test_dead_letters_lists_oldest_first_with_paging(queue: Queue) -> None:
    for n in range(5):
        await queue.send("t", {"n": n}, task_id=f"d{n}")
        await bury(queue, "t", f"d{n}", error=f"Error: number {n}")
        await asyncio.sleep(0.002)  # distinct death times make "oldest first" observable
    await queue.send("t", {}, task_id="alive")

    letters = await queue.dead_letters("t")
    assert [info.id for info in letters] == [f"d{n}" for n in range(5)]
    assert [info.last_error for info in letters] == [f"Error: number {n}" for n in range(5)]
    assert all(info.state == "dead" and info.dead_at is not None for info in letters)
    assert [info.body for info in letters] == [{"n": n} for n in range(5)]
    assert [ms(info.dead_at) for info in letters] == sorted(ms(info.dead_at) for info in letters)
    assert letters[0] == await queue.get("t", "d0")

    page = await queue.dead_letters("t", limit=2, offset=1)
    assert [info.id for info in page] == ["d1", "d2"]
    assert await queue.dead_letters("t", offset=5) == []
    assert await queue.dead_letters("empty") == []


async def test_replay_makes_a_dead_task_ready_again(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {"v": 1}, 0.01, task_id="x", max_attempts=1)

    async def is_ready() -> bool:
        return (await stored(queue, "t", "x")).state == "ready"

    await wait_for(is_ready, 5, "the task to fall due")
    token = await lease(queue, "t", "x")
    outcome, _ = await queue.scripts.nack(
        queue.keys("t"), "x", token, mode="retry", error="KeyError: 'k'", max_attempts=3
    )
    assert outcome == 2  # max_attempts=1 was used up

    before = await redis_now_ms(redis_client)
    assert await queue.replay("t", "x") is True
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.last_error, info.dead_at) == ("ready", 0, None, None)
    assert (info.body, info.max_attempts) == ({"v": 1}, 1)
    assert before <= ms(info.due_at) <= before + CLOCK_SLACK_MS
    assert await queue.dead_letters("t") == []

    assert await queue.replay("t", "x") is False  # no longer dead
    _, _, items = await reserve(queue, "t")
    assert [(i, attempts) for i, _, attempts in items] == [("x", 1)]


async def test_replay_refuses_tasks_that_are_not_dead(queue: Queue) -> None:
    await queue.send_delayed("t", {}, 60, task_id="waiting")
    await queue.send("t", {}, task_id="leased")
    await reserve(queue, "t")
    for task_id in ("waiting", "leased", "unknown"):
        assert await queue.replay("t", task_id) is False
    assert counted(await queue.stats()) == {"t": TopicStats(delayed=1, ready=0, reserved=1, dead=0)}


# -- the client a Queue is built on ---------------------------------------------------------


async def test_queue_on_an_existing_client(
    redis_client: redis.asyncio.Redis, queue_name: str
) -> None:
    async with Queue(redis_client, name=queue_name) as queue:
        task_id = await queue.send("t", {"a": 1})
        info = await stored(queue, "t", task_id)
        assert info.body == {"a": 1}
    # The queue does not close a client it did not open.
    assert await redis_client.ping() is True
    bucket = hashlib.sha1(task_id.encode()).hexdigest()[:3]
    assert await redis_client.hexists(f"delayq:{{{queue_name}:t}}:tasks:{bucket}", task_id) == 1


async def test_from_url_passes_options_through(redis_url: str, queue_name: str) -> None:
    queue = Queue.from_url(redis_url, name=queue_name, max_body_bytes=10, health_check_interval=5)
    try:
        assert queue.max_body_bytes == 10
        assert queue.redis.connection_pool.connection_kwargs["health_check_interval"] == 5
        await queue.send("t", [1, 2])
    finally:
        await queue.close()


async def test_everything_works_on_a_decode_responses_client(
    decoding_client: redis.asyncio.Redis, queue_name: str
) -> None:
    queue = Queue(decoding_client, name=queue_name)
    await queue.send_delayed("t", {"k": "d\u00e9lai"}, 60, task_id="later")
    await queue.send("t", {"k": "now"}, task_id="now")
    assert await queue.send("t", {}, task_id="now") == "now"

    info = await stored(queue, "t", "later")
    assert (info.state, info.body) == ("delayed", {"k": "d\u00e9lai"})
    assert counted(await queue.stats()) == {"t": TopicStats(delayed=1, ready=1, reserved=0, dead=0)}

    now, wake, items = await reserve(queue, "t")
    assert [(i, a) for i, _, a in items] == [("now", 1)]
    assert wake == ms(info.due_at)  # "later" is due before the long lease ends
    token = items[0][1]
    assert await queue.scripts.extend(queue.keys("t"), "now", token, LONG_TTR_MS * 2) > now
    outcome, _ = await queue.scripts.nack(
        queue.keys("t"), "now", token, mode="dead", error="E: \u2603", max_attempts=3
    )
    assert outcome == 2
    letters = await queue.dead_letters("t")
    assert [(d.id, d.last_error, d.body) for d in letters] == [("now", "E: \u2603", {"k": "now"})]
    assert await queue.replay("t", "now") is True
    _, _, items = await reserve(queue, "t")
    assert await queue.scripts.ack(queue.keys("t"), [("now", items[0][1])]) == [True]

    assert await queue.reschedule("t", "later", delay=0) is True
    assert await queue.cancel("t", "later") is True
    assert await queue.stats() == {}


async def test_a_worker_runs_on_a_decode_responses_client(
    decoding_client: redis.asyncio.Redis, queue_name: str, start_worker: StartWorker
) -> None:
    queue = Queue(decoding_client, name=queue_name)
    seen: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    @queue.topic("greet")
    async def greet(body: Greeting, task: Task) -> None:
        seen.put_nowait((body.name, task.attempt))

    await start_worker(queue, concurrency=2)
    await greet.send(Greeting(name="ada"))
    await greet.send_delayed(Greeting(name="bob"), 0.05)
    async with asyncio.timeout(5):
        assert {await seen.get(), await seen.get()} == {("ada", 1), ("bob", 1)}
        while await queue.stats():  # the ack is batched; wait for it to land
            await asyncio.sleep(0.01)
