"""Script-level tests: each Lua transition called directly through ``queue.scripts``.

No worker runs here.  Leases end either by waiting out a tiny ttr (50 ms) or, where the
test is about what happens *after* expiry rather than about the clock, by moving the
lease deadline into the past (``tests.helpers.expire_lease``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio

from delayq import InvalidNameError, Queue, RedisCommandError
from delayq.redis.keys import BODY_FIELD_SUFFIX
from delayq.redis.scripts import lua_source
from delayq.task import Envelope
from tests.helpers import (
    LONG_TTR_MS,
    expire_lease,
    overwrite_task,
    redis_now_ms,
    redis_time_passes,
    reserve,
    schedule_entries,
    stored,
    stored_task_keys,
    task_fields,
)


def ids(items: list[tuple[str, str, int]]) -> list[str]:
    return [task_id for task_id, _, _ in items]


async def state(queue: Queue, task_id: str, topic: str = "t") -> str | None:
    info = await queue.get(topic, task_id)
    return None if info is None else info.state


@pytest.fixture
async def wake_messages(
    redis_client: redis.asyncio.Redis, queue: Queue
) -> AsyncIterator[redis.asyncio.client.PubSub]:
    """A subscription to topic ``t``'s wake channel (subscribed before the test runs)."""
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(queue.keys("t").wake)
    # Consume the subscribe confirmation so that get_message returns only wake-ups.
    confirmation = await pubsub.get_message(timeout=1)
    assert confirmation is None or confirmation["type"] == "subscribe"
    try:
        yield pubsub
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


# -- reserve --------------------------------------------------------------------------------


async def test_reserve_on_an_empty_topic(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    before = await redis_now_ms(redis_client)
    now, wake, items = await reserve(queue, "t")
    assert (wake, items) == (-1, [])
    assert before <= now <= await redis_now_ms(redis_client)


async def test_reserve_leases_in_due_order_up_to_the_limit(queue: Queue) -> None:
    # Ids sort the other way round from due times, so the order must come from the scores.
    for n, task_id in enumerate("abcde"):
        await queue.send_delayed("t", {"n": n}, delay=0.05 - n * 0.01, task_id=task_id)
    await redis_time_passes(queue.redis, 50)  # all five are due

    now, wake, first = await reserve(queue, "t", limit=3, ttr_ms=20_000)
    assert ids(first) == ["e", "d", "c"]
    assert [attempts for _, _, attempts in first] == [1, 1, 1]
    assert wake <= now  # the remaining two are due already: the caller may come back at once
    _, _, second = await reserve(queue, "t", limit=3, ttr_ms=20_000)
    assert ids(second) == ["b", "a"]
    tokens = [int(token) for _, token, _ in first + second]
    assert tokens == sorted(set(tokens))  # fencing tokens are unique and increasing

    _, wake, third = await reserve(queue, "t", limit=3, ttr_ms=20_000)
    assert third == []
    assert wake == now + 20_000  # nothing waits: the first lease to end is the next event
    assert {task_id: await state(queue, task_id) for task_id in "abcde"} == dict.fromkeys(
        "abcde", "reserved"
    )


async def test_reserve_returns_the_envelope_with_the_new_lease(queue: Queue) -> None:
    await queue.send("t", {"k": [1, 2]}, task_id="x", max_attempts=4, ttr=2)
    _, _, raw_items = await queue.scripts.reserve(
        queue.keys("t"), limit=5, reclaim=5, ttr_ms=LONG_TTR_MS, max_attempts=3
    )
    [(task_id, raw)] = raw_items
    envelope = Envelope.parse(raw)
    assert task_id == "x"
    assert (envelope.attempts, envelope.max_attempts, envelope.ttr_ms) == (1, 4, 2_000)
    assert envelope.body == b'{"k":[1,2]}'
    assert int(envelope.token) > 0


async def test_reserve_leases_only_due_tasks(queue: Queue) -> None:
    await queue.send("t", {}, task_id="now")
    await queue.send_delayed("t", {}, 5, task_id="later")
    later = await stored(queue, "t", "later")
    due = round(later.due_at.timestamp() * 1000)

    # The next event is the earlier of the next due time and the next lease deadline.
    _, wake, items = await reserve(queue, "t", ttr_ms=30_000)
    assert ids(items) == ["now"]
    assert wake == due
    assert await state(queue, "later") == "delayed"

    await queue.send("t", {}, task_id="short")
    now, wake, items = await reserve(queue, "t", ttr_ms=1_000)
    assert ids(items) == ["short"]
    assert wake == now + 1_000


async def test_reserve_limit_zero_leases_nothing(queue: Queue) -> None:
    await queue.send("t", {}, task_id="x")
    now, wake, items = await reserve(queue, "t", limit=0)
    assert items == []
    assert wake <= now  # a due task is waiting
    assert await state(queue, "x") == "ready"


# -- fencing and lease expiry ---------------------------------------------------------------


async def test_a_stale_token_is_fenced_off(queue: Queue) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x", ttr=0.05)
    _, _, [(_, stale, _)] = await reserve(queue, "t")
    await redis_time_passes(queue.redis, 50)  # the lease ends; the next reserve re-leases it
    _, _, [(_, fresh, attempts)] = await reserve(queue, "t")
    assert (attempts, fresh != stale) == (2, True)

    assert await queue.scripts.ack(keys, [("x", stale)]) == [False]
    assert await queue.scripts.nack(keys, "x", stale, mode="retry", max_attempts=3) == (0, 0)
    assert await queue.scripts.nack(keys, "x", stale, mode="release", max_attempts=3) == (0, 0)
    assert await queue.scripts.extend(keys, "x", stale, 60_000) == 0
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts) == ("reserved", 2)
    assert info.lease_deadline is not None

    assert await queue.scripts.ack(keys, [("x", fresh)]) == [True]
    assert await queue.get("t", "x") is None


async def test_the_holder_may_still_ack_an_expired_lease_nobody_took(queue: Queue) -> None:
    await queue.send("t", {}, task_id="x", ttr=0.05)
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await redis_time_passes(queue.redis, 50)
    # Nobody reserved since, so the lease was not reclaimed: the late ack still counts.
    assert await queue.scripts.ack(queue.keys("t"), [("x", token)]) == [True]
    assert await queue.get("t", "x") is None


async def test_an_expired_lease_counts_as_an_attempt_until_dead(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {"v": 1}, task_id="x", max_attempts=2)
    await reserve(queue, "t")
    await expire_lease(redis_client, keys, "x")

    _, _, items = await reserve(queue, "t")
    assert [(task_id, attempts) for task_id, _, attempts in items] == [("x", 2)]
    info = await stored(queue, "t", "x")
    assert info.state == "reserved"
    assert info.last_error == "LeaseExpired: no ack within the lease (attempt 1 of 2)"

    await expire_lease(redis_client, keys, "x")
    _, wake, items = await reserve(queue, "t")
    assert (wake, items) == (-1, [])
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.body) == ("dead", 2, {"v": 1})
    assert info.last_error is not None
    assert info.last_error.startswith("LeaseExpired")
    assert [d.id for d in await queue.dead_letters("t")] == ["x"]


async def test_an_expired_lease_uses_the_topic_default_limit(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send("t", {}, task_id="x")
    await reserve(queue, "t", max_attempts=1)
    await expire_lease(redis_client, queue.keys("t"), "x")
    assert (await reserve(queue, "t", max_attempts=1))[2] == []
    info = await stored(queue, "t", "x")
    assert info.state == "dead"
    assert info.last_error == "LeaseExpired: no ack within the lease (attempt 1 of 1)"


async def test_a_reclaimed_task_waits_behind_older_due_tasks(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send("t", {}, task_id="x")
    await reserve(queue, "t")
    await queue.send("t", {}, task_id="older")
    await expire_lease(redis_client, queue.keys("t"), "x")

    _, _, items = await reserve(queue, "t", limit=1)
    assert ids(items) == ["older"]
    info = await stored(queue, "t", "x")
    # Back in the schedule, due at once, the failed attempt counted and explained.
    assert (info.state, info.attempts) == ("ready", 1)
    assert info.last_error is not None
    assert info.last_error.startswith("LeaseExpired")


async def test_reclaim_is_bounded_per_call(queue: Queue, redis_client: redis.asyncio.Redis) -> None:
    keys = queue.keys("t")
    for task_id in ("a", "b", "c"):
        await queue.send("t", {}, task_id=task_id)
    await reserve(queue, "t")
    for task_id in ("a", "b", "c"):
        await expire_lease(redis_client, keys, task_id)

    _, _, items = await reserve(queue, "t", limit=0, reclaim=2)
    assert items == []
    assert [await state(queue, task_id) for task_id in ("a", "b", "c")] == [
        "ready",
        "ready",
        "reserved",
    ]
    await reserve(queue, "t", limit=0, reclaim=2)
    assert await state(queue, "c") == "ready"


# -- nack -----------------------------------------------------------------------------------


async def test_nack_release_does_not_count_the_attempt(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x", max_attempts=1)
    _, _, [(_, token, _)] = await reserve(queue, "t")
    outcome, due = await queue.scripts.nack(
        keys, "x", token, mode="release", delay_ms=60_000, max_attempts=3
    )
    assert outcome == 1
    assert abs(due - await redis_now_ms(redis_client)) < 100  # due now; the delay is ignored
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.last_error) == ("ready", 0, None)

    # Had the attempt counted, max_attempts=1 would now dead-letter it on retry.
    _, _, [(_, token, attempts)] = await reserve(queue, "t")
    assert attempts == 1
    assert (await queue.scripts.nack(keys, "x", token, mode="retry", max_attempts=3))[0] == 2


async def test_nack_retry_reschedules_until_the_limit(queue: Queue) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x", max_attempts=2)
    now, _, [(_, token, _)] = await reserve(queue, "t")
    outcome, due = await queue.scripts.nack(
        keys, "x", token, mode="retry", delay_ms=30_000, error="TimeoutError: slow", max_attempts=9
    )
    assert outcome == 1
    assert now + 30_000 <= due < now + 30_500
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.last_error) == ("delayed", 1, "TimeoutError: slow")
    assert round(info.due_at.timestamp() * 1000) == due

    assert await queue.reschedule("t", "x", delay=0)
    _, _, [(_, token, attempts)] = await reserve(queue, "t")
    assert attempts == 2
    outcome, _ = await queue.scripts.nack(
        keys, "x", token, mode="retry", delay_ms=30_000, error="TimeoutError: again", max_attempts=9
    )
    assert outcome == 2  # the task's own limit of 2, not the topic default of 9
    info = await stored(queue, "t", "x")
    assert (info.state, info.last_error) == ("dead", "TimeoutError: again")


async def test_nack_dead_skips_the_remaining_attempts(queue: Queue) -> None:
    await queue.send("t", {}, task_id="x", max_attempts=10)
    _, _, [(_, token, _)] = await reserve(queue, "t")
    outcome, _ = await queue.scripts.nack(
        queue.keys("t"), "x", token, mode="dead", error="BodyValidationError: no", max_attempts=10
    )
    assert outcome == 2
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.last_error) == ("dead", 1, "BodyValidationError: no")


async def test_nack_without_an_error_keeps_the_previous_one(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(keys, "x", token, mode="retry", error="E: first", max_attempts=5)
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(keys, "x", token, mode="release", max_attempts=5)
    assert await redis_client.hget(keys.errors, "x") == b"E: first"


# -- extend ---------------------------------------------------------------------------------


async def test_extend_pushes_the_deadline_but_never_shortens_it(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    now, _, [(_, token, _)] = await reserve(queue, "t", ttr_ms=30_000)
    deadline = now + 30_000

    assert await queue.scripts.extend(keys, "x", token, 1_000) == deadline
    assert await redis_client.zscore(keys.reserved, "x") == deadline

    before = await redis_now_ms(redis_client)
    extended = await queue.scripts.extend(keys, "x", token, 60_000)
    assert before + 60_000 <= extended <= await redis_now_ms(redis_client) + 60_000
    assert await redis_client.zscore(keys.reserved, "x") == extended
    info = await stored(queue, "t", "x")
    assert info.lease_deadline is not None
    assert round(info.lease_deadline.timestamp() * 1000) == extended

    assert await queue.scripts.extend(keys, "unknown", token, 60_000) == 0


async def test_extend_revives_an_expired_lease_nobody_took(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await expire_lease(redis_client, keys, "x")
    assert await queue.scripts.extend(keys, "x", token, 60_000) > 0
    assert (await reserve(queue, "t"))[2] == []  # not reclaimed: the lease is live again
    info = await stored(queue, "t", "x")
    assert (info.state, info.attempts, info.last_error) == ("reserved", 1, None)


async def test_extend_refuses_a_task_that_is_not_leased(queue: Queue) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(keys, "x", token, mode="release", max_attempts=3)
    # The envelope still carries the old token, but there is no lease to extend.
    assert await queue.scripts.extend(keys, "x", token, 60_000) == 0
    assert await state(queue, "x") == "ready"


# -- ack ------------------------------------------------------------------------------------


async def test_ack_batch_with_valid_and_stale_tokens(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    for task_id in ("a", "b", "c"):
        await queue.send("t", {}, task_id=task_id)
    _, _, items = await reserve(queue, "t")
    tokens = {task_id: token for task_id, token, _ in items}
    await expire_lease(redis_client, keys, "b")
    _, _, [(_, b_fresh, _)] = await reserve(queue, "t")

    acked = await queue.scripts.ack(
        keys,
        [
            ("a", tokens["a"]),
            ("b", tokens["b"]),
            ("c", tokens["c"]),
            ("zz", "1"),
            ("a", tokens["a"]),
        ],
    )
    assert acked == [True, False, True, False, False]  # the second "a" was already gone
    assert [await state(queue, task_id) for task_id in ("a", "b", "c")] == [None, "reserved", None]
    assert await queue.scripts.ack(keys, [("b", b_fresh)]) == [True]
    assert await queue.scripts.ack(keys, []) == []
    # An ack removes the task and its error record; nothing of it is left behind.
    assert await stored_task_keys(redis_client, keys) == []
    assert await redis_client.hlen(keys.errors) == 0
    # Only the member that pins the set's encoding is left (score +inf, see docs/keys.md).
    assert await redis_client.zcount(keys.reserved, "-inf", "(inf") == 0


async def test_the_reserved_set_stays_a_skiplist_and_its_pin_is_no_lease(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    # As a listpack, every lease written or looked up scans the whole set; a pin member
    # keeps it a skiplist.  The pin must never read as a lease, a due time or a task.
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="a")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    assert await redis_client.object("encoding", keys.reserved) == b"skiplist"
    assert (await queue.stats())["t"].reserved == 1
    assert await queue.scripts.ack(keys, [("a", token)]) == [True]
    assert await redis_client.object("encoding", keys.reserved) == b"skiplist"
    assert await queue.stats() == {}  # a topic with nothing in it is not listed
    [(pin, score)] = await redis_client.zrange(keys.reserved, 0, -1, withscores=True)
    assert pin.startswith(b"\0") and len(pin) > 64 and score == float("inf")
    # Nothing due and no lease left: the reply says "nothing to wait for", not +inf.
    _, wake, items = await reserve(queue, "t")
    assert (wake, items) == (-1, [])
    with pytest.raises(InvalidNameError):  # no task id can be the pin
        await queue.send("t", {}, task_id=pin.decode())


async def test_ack_takes_a_batch_as_large_as_a_busy_worker_sends(queue: Queue) -> None:
    # The acker sends every ack that piled up during one round trip: up to `concurrency`,
    # beyond the ~8,000 values Lua's unpack() takes in one call.
    await queue.send("t", {}, task_id="x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    leases = [(f"gone-{n}", "1") for n in range(9_999)] + [("x", token)]
    assert await queue.scripts.ack(queue.keys("t"), leases) == [False] * 9_999 + [True]


async def test_ack_refuses_a_waiting_task_that_carries_the_token(queue: Queue) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(keys, "x", token, mode="retry", max_attempts=3)
    assert await queue.scripts.ack(keys, [("x", token)]) == [False]
    assert await state(queue, "x") == "ready"
    # A never-leased task's envelope holds token 0: that is no lease either.
    await queue.send("t", {}, task_id="y")
    assert await queue.scripts.ack(keys, [("y", "0")]) == [False]


# -- robustness -----------------------------------------------------------------------------


async def test_every_script_survives_script_flush(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """redis-py's EVALSHA falls back to SCRIPT LOAD on NOSCRIPT (e.g. after a restart)."""
    keys = queue.keys("t")

    async def flush() -> None:
        await redis_client.script_flush()
        assert await redis_client.script_exists(*(_sha(n) for n in ("send", "reserve"))) == [
            False,
            False,
        ]

    await flush()
    await queue.send("t", {"v": 1}, task_id="x")
    await flush()
    assert await state(queue, "x") == "ready"
    await flush()
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await flush()
    assert await queue.scripts.extend(keys, "x", token, 60_000) > 0
    await flush()
    assert (await queue.scripts.nack(keys, "x", token, mode="dead", max_attempts=3))[0] == 2
    await flush()
    assert [d.id for d in await queue.dead_letters("t")] == ["x"]
    await flush()
    assert await queue.replay("t", "x")
    await flush()
    assert await queue.reschedule("t", "x", delay=0)
    await flush()
    assert (await queue.stats())["t"].ready == 1
    await flush()
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await flush()
    assert await queue.scripts.ack(keys, [("x", token)]) == [True]
    await flush()
    await queue.send("t", {}, task_id="y")
    await flush()
    assert await queue.cancel("t", "y")


def _sha(name: str) -> str:
    import hashlib

    return hashlib.sha1(lua_source(name).encode()).hexdigest()


async def test_a_corrupt_envelope_is_dead_lettered(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="bad")
    await overwrite_task(redis_client, keys, "bad", b"not,an,envelope", None)
    await queue.send("t", {}, task_id="good")

    _, _, items = await reserve(queue, "t")
    assert ids(items) == ["good"]
    info = await stored(queue, "t", "bad")
    assert (info.state, info.body) == ("dead", None)
    assert info.last_error is not None
    assert info.last_error.startswith("CorruptTask")
    assert [d.id for d in await queue.dead_letters("t")] == ["bad"]

    # It cannot be replayed (there is nothing to run), so replay drops it.
    assert await queue.replay("t", "bad") is False
    assert await queue.get("t", "bad") is None
    assert await task_fields(redis_client, keys, "bad") == (None, None)


async def test_a_corrupt_envelope_under_an_expired_lease_is_dead_lettered(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await overwrite_task(redis_client, keys, "bad", b"garbage", None)
    await redis_client.zadd(keys.reserved, {"bad": 1})
    assert (await reserve(queue, "t"))[2] == []
    info = await stored(queue, "t", "bad")
    assert info.state == "dead"
    assert info.last_error is not None
    assert info.last_error.startswith("CorruptTask")
    assert await queue.cancel("t", "bad")
    assert await queue.stats() == {}


async def test_orphan_members_without_a_task_are_dropped(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="ghost")
    await redis_client.delete(keys.bucket("ghost"))  # the schedule entry stays behind
    await redis_client.zadd(keys.reserved, {"phantom": 1})
    assert await queue.get("t", "ghost") is None

    _, wake, items = await reserve(queue, "t")
    assert (wake, items) == (-1, [])
    assert await schedule_entries(redis_client, keys) == {}
    assert await redis_client.zscore(keys.reserved, "phantom") is None
    assert await redis_client.zcard(keys.dead) == 0


async def test_reserve_reports_what_it_dropped_or_buried(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """The reply's third element lists (id, reason) of entries that reach no handler, so
    the worker can log them; reclaimed leases come first, then due tasks in due order."""
    keys = queue.keys("t")
    await redis_client.zadd(keys.reserved, {"phantom": 1, "lease-bad": 2})
    await redis_client.hset(keys.bucket("lease-bad"), "lease-bad", "garbage")
    for task_id in ("ghost", "bad", "good"):  # due in this order
        await queue.send("t", {}, task_id=task_id)
        await asyncio.sleep(0.003)
    await redis_client.hdel(keys.bucket("ghost"), "ghost", "ghost" + BODY_FIELD_SUFFIX)
    await overwrite_task(redis_client, keys, "bad", b"1,2,3", b"{}")

    found = await queue.scripts.reserve_reporting(
        keys, limit=10, reclaim=10, ttr_ms=LONG_TTR_MS, max_attempts=3
    )
    assert [task_id for task_id, _ in found.items] == ["good"]
    assert found.skipped == [
        ("phantom", "missing"), ("lease-bad", "corrupt"), ("ghost", "missing"), ("bad", "corrupt"),
    ]  # fmt: skip
    again = await queue.scripts.reserve_reporting(
        keys, limit=10, reclaim=10, ttr_ms=LONG_TTR_MS, max_attempts=3
    )
    assert (again.items, again.skipped) == ([], [])  # each is reported once


async def test_tokens_stay_integers_on_a_long_lived_topic(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    # A topic that has leased 10^14 tasks; the counter is set directly rather than earned.
    await redis_client.set(queue.keys("t").seq, 10**14 - 1)
    await queue.send("t", {}, task_id="x")
    _, _, items = await reserve(queue, "t", limit=1)
    assert [(task_id, token) for task_id, token, _ in items] == [("x", str(10**14))]
    assert await queue.scripts.ack(queue.keys("t"), [("x", str(10**14))]) == [True]


# -- wake-ups -------------------------------------------------------------------------------


async def next_wake(pubsub: redis.asyncio.client.PubSub) -> int | None:
    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
    return None if message is None else int(float(message["data"]))


async def due_ms(queue: Queue, task_id: str) -> int:
    info = await stored(queue, "t", task_id)
    return round(info.due_at.timestamp() * 1000)


async def test_a_wake_up_is_published_only_for_a_new_earliest_task(
    queue: Queue, wake_messages: redis.asyncio.client.PubSub
) -> None:
    """Each "silent" step is followed by one that must publish, so a stray message would
    show up as the wrong due time instead of needing a timeout to be noticed."""
    await queue.send_delayed("t", {}, 60, task_id="a")
    assert await next_wake(wake_messages) == await due_ms(queue, "a")

    await queue.send_delayed("t", {}, 120, task_id="b")  # later than the head: silent
    await queue.send_delayed("t", {}, 60, task_id="a")  # duplicate: silent
    await queue.reschedule("t", "b", delay=90)  # still later than the head: silent
    await queue.send_delayed("t", {}, 30, task_id="c")
    assert await next_wake(wake_messages) == await due_ms(queue, "c")

    await queue.reschedule("t", "b", delay=10)
    assert await next_wake(wake_messages) == await due_ms(queue, "b")

    await queue.send("t", {}, task_id="now")
    assert await next_wake(wake_messages) == await due_ms(queue, "now")
    _, _, [(_, token, _)] = await reserve(queue, "t")  # leases "now"

    await queue.scripts.nack(queue.keys("t"), "now", token, mode="release", max_attempts=3)
    assert await next_wake(wake_messages) == await due_ms(queue, "now")

    await queue.send_delayed("t", {}, 100, task_id="d")  # silent
    assert await queue.cancel("t", "d")  # silent
    await queue.send("t", {}, task_id="e")  # due after "now", which is still ready: silent
    assert await wake_messages.get_message(ignore_subscribe_messages=True, timeout=0.2) is None


async def test_nack_retry_and_replay_wake_the_topic(
    queue: Queue, wake_messages: redis.asyncio.client.PubSub
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="x")
    assert await next_wake(wake_messages) == await due_ms(queue, "x")
    _, _, [(_, token, _)] = await reserve(queue, "t")

    _, due = await queue.scripts.nack(
        keys, "x", token, mode="retry", delay_ms=5_000, max_attempts=3
    )
    assert await next_wake(wake_messages) == due
    assert await queue.reschedule("t", "x", delay=0)
    assert await next_wake(wake_messages) == await due_ms(queue, "x")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(keys, "x", token, mode="dead", max_attempts=3)  # nothing to wake for
    assert await queue.replay("t", "x")
    assert await next_wake(wake_messages) == await due_ms(queue, "x")
    assert await wake_messages.get_message(ignore_subscribe_messages=True, timeout=0.2) is None


async def test_wake_ups_follow_the_earliest_due_time_across_many_slots(
    queue: Queue, redis_client: redis.asyncio.Redis, wake_messages: redis.asyncio.client.PubSub
) -> None:
    """Enough tasks to fill and split many schedule slots, sent one by one and in batches at
    random times: a wake-up is published exactly when a task becomes the new earliest."""
    rng = random.Random(7)
    start = datetime.now(UTC) + timedelta(days=1)
    offsets = rng.sample(range(0, 3_600_000), 900)
    expected: list[int] = []
    earliest: int | None = None
    for n, offset in enumerate(offsets[:600]):
        due = start + timedelta(milliseconds=offset)
        await queue.send_at("t", {}, due, task_id=f"one-{n}")
        stored_ms = await due_ms(queue, f"one-{n}")
        if earliest is None or stored_ms < earliest:
            earliest = stored_ms
            expected.append(stored_ms)
    for first in range(600, 900, 100):
        batch = offsets[first : first + 100]
        now_ms = await redis_now_ms(redis_client)
        delays = [(start + timedelta(milliseconds=o)).timestamp() - now_ms / 1000 for o in batch]
        sent = await queue.send_many("t", [{}] * len(batch), delay=delays, batch_size=100)
        batch_min = min([await due_ms(queue, task_id) for task_id in sent])
        if earliest is None or batch_min < earliest:
            earliest = batch_min
            expected.append(batch_min)
    assert len(await schedule_entries(redis_client, queue.keys("t"))) == 900
    assert len(await redis_client.zrange(queue.keys("t").wheel, 0, -1)) > 7  # many slots
    published: list[int] = []
    while (message := await next_wake(wake_messages)) is not None:
        published.append(message)
    assert published == expected


async def _snapshot(redis_client: redis.asyncio.Redis, queue: Queue) -> dict[bytes, bytes | None]:
    """Every key of ``queue`` (other tests may share the server) and its serialized value."""
    keys = sorted(await redis_client.keys(f"delayq:{{{queue.name}*"))
    return {key: await redis_client.dump(key) for key in keys}


@pytest.mark.parametrize(
    "garbled", ["wheel", "slot", "slots", "bucket", "buckets", "dead", "errors", "meta"]
)
async def test_a_send_meeting_a_key_of_the_wrong_type_changes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, garbled: str
) -> None:
    """send.lua checks no types up front on its common path: each key it writes is read (or
    INCRBY'd) before its first write, so a garbled key must fail the call before any write.
    `dead` and `errors` are only touched when the id is known, so the send repeats one."""
    keys = queue.keys("t")
    await queue.send_delayed("t", {}, 60, task_id="known")
    task_id = "known" if garbled in ("dead", "errors") else "fresh"
    key = {
        "wheel": keys.wheel,
        "slot": keys.slot((await redis_client.zrange(keys.wheel, 0, 0))[0]),
        "slots": keys.prefix + "slots",
        "bucket": keys.bucket(task_id),
        "buckets": keys.buckets,
        "dead": keys.dead,
        "errors": keys.errors,
        "meta": keys.meta,
    }[garbled]
    if garbled == "slots":
        await redis_client.delete(keys.wheel)  # so that the send must number a new slot
    await redis_client.delete(key)
    if garbled in ("slots", "buckets"):  # string counters: garbage of another type
        await redis_client.hset(key, "garbage", 1)
    else:
        await redis_client.set(key, "garbage")
    before = await _snapshot(redis_client, queue)
    assert len(before) >= 3
    with pytest.raises(RedisCommandError, match="WRONGTYPE"):
        await queue.send_delayed("t", {}, 30, task_id=task_id)
    assert await _snapshot(redis_client, queue) == before
