"""Priorities: among due tasks the highest priority is leased first, each priority oldest due
first; never before its due time; priority 0 (the default) costs nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue, Task
from tests.fixtures_delayq import StartWorker
from tests.helpers import queue_keys, redis_time_passes, reserve, stored


def ids_of(leased: list[tuple[str, str, int]]) -> list[str]:
    return [task_id for task_id, _, _ in leased]


async def send(queue: Queue, task_id: str, priority: int, *, delay: float = 0) -> None:
    """A task due ``delay`` from now; tasks due now are due in the order they are sent (a
    millisecond apart)."""
    await queue.send_delayed("t", {}, delay, task_id=task_id, priority=priority)
    await asyncio.sleep(0.002)


async def test_higher_priority_first_then_earlier_due(queue: Queue) -> None:
    order = [("low-old", -3), ("zero-old", 0), ("mid-old", 5), ("high-old", 10),
             ("high-new", 10), ("zero-new", 0), ("low-new", -3), ("mid-new", 5)]  # fmt: skip
    for task_id, priority in order:
        await send(queue, task_id, priority)
    _, _, first = await reserve(queue, "t", limit=3)
    assert ids_of(first) == ["high-old", "high-new", "mid-old"]
    _, _, rest = await reserve(queue, "t", limit=10)
    assert ids_of(rest) == ["mid-new", "zero-old", "zero-new", "low-old", "low-new"]


async def test_a_delayed_high_priority_task_waits_for_its_due_time(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await send(queue, "later", 100, delay=60)
    await send(queue, "now", 0)
    now, next_ms, leased = await reserve(queue, "t")
    assert ids_of(leased) == ["now"]
    info = await stored(queue, "t", "later")
    assert (info.state, info.priority) == ("delayed", 100)
    assert now + 59_000 < next_ms <= now + 60_000  # the worker comes back when it is due
    assert (await queue.stats())["t"].delayed == 1


async def test_priority_zero_costs_no_byte_and_no_key(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await send(queue, "plain", 0)
    await send(queue, "urgent", 7)
    keys = queue.keys("t")
    plain = (await redis_client.hget(keys.bucket("plain"), "plain")).split(b",")
    urgent = (await redis_client.hget(keys.bucket("urgent"), "urgent")).split(b",")
    assert len(plain) == 6 and urgent[6:] == [b"p7"]
    assert await redis_client.zscore(keys.prio, "plain") is None
    assert await redis_client.zscore(keys.prio, "urgent") is not None


async def test_a_topic_without_priorities_has_no_priority_keys(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_many("t", [{}] * 10)
    await reserve(queue, "t")
    found = await queue_keys(redis_client, queue.name)
    assert not [key for key in found if ":prio" in key]


@pytest.mark.parametrize("bad", [1.5, "3", True, 1_000_001, -1_000_001, None])
async def test_a_bad_priority_writes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, bad: Any
) -> None:
    with pytest.raises(InvalidInputError, match="priority"):
        await queue.send("t", {}, priority=bad)
    with pytest.raises(InvalidInputError, match="priority"):
        await queue.send_many("t", [{}], priority=bad)
    assert await queue_keys(redis_client, queue.name) == []


async def test_send_many_with_a_priority_and_the_lease_order(queue: Queue) -> None:
    await queue.send_many("t", [{}] * 3, task_ids=["a0", "a1", "a2"])
    await queue.send_many("t", [{}] * 3, task_ids=["b0", "b1", "b2"], priority=2)
    await queue.send_many("t", [{}] * 2, task_ids=["c0", "c1"], priority=-1)
    _, _, leased = await reserve(queue, "t", limit=10)
    assert ids_of(leased) == ["b0", "b1", "b2", "a0", "a1", "a2", "c0", "c1"]
    info = await stored(queue, "t", "b0")
    assert (info.state, info.priority) == ("reserved", 2)


PROMOTE_MAX = 1000
"""Priority tasks one reserve.lua call moves into the lease order (_priority.lua)."""


async def test_more_due_priority_tasks_than_one_call_moves_are_never_passed_over(
    queue: Queue,
) -> None:
    n = PROMOTE_MAX * 2 + 10
    await queue.send_many("t", [{}] * n, task_ids=[f"low{i:05d}" for i in range(n)], priority=1,
                          batch_size=1000)  # fmt: skip
    await queue.send("t", {}, task_id="top", priority=9)
    await queue.send("t", {}, task_id="plain")
    calls, leased = 0, []
    while not leased:
        now, next_ms, leased = await reserve(queue, "t", limit=5)
        calls += 1
        if not leased:
            assert next_ms <= now  # come back at once: the order is still being built
    assert calls == 3 and ids_of(leased) == ["top", "low00000", "low00001", "low00002", "low00003"]


async def test_retry_release_reclaim_and_replay_keep_the_priority(queue: Queue) -> None:
    keys = queue.keys("t")
    await send(queue, "p", 4)
    await send(queue, "z", 0)
    _, _, [(task_id, token, _)] = await reserve(queue, "t", limit=1)
    assert task_id == "p"
    await queue.scripts.nack(keys, "p", token, mode="release", max_attempts=3)
    _, _, [(task_id, token, _)] = await reserve(queue, "t", limit=1)
    assert task_id == "p"  # released: due now, still first
    await queue.scripts.nack(keys, "p", token, mode="retry", delay_ms=60_000, error="x",
                             max_attempts=3)  # fmt: skip
    info = await stored(queue, "t", "p")
    assert (info.state, info.priority, info.last_error) == ("delayed", 4, "x")
    assert await queue.reschedule("t", "p", delay=0)
    _, _, [(task_id, token, _)] = await reserve(queue, "t", limit=1, ttr_ms=1)
    assert task_id == "p"
    await redis_time_passes(queue.redis, 1)
    _, _, leased = await reserve(queue, "t", limit=1)  # reclaims p's lease, leases it again
    assert ids_of(leased) == ["p"]
    await queue.scripts.nack(keys, "p", leased[0][1], mode="dead", error="no", max_attempts=3)
    assert await queue.replay("t", "p")
    _, _, leased = await reserve(queue, "t", limit=2)
    assert ids_of(leased) == ["p", "z"]


async def test_cancel_get_stats_upcoming_and_timeline_see_priority_tasks(queue: Queue) -> None:
    await send(queue, "soon", 3, delay=30)
    await send(queue, "plain", 0, delay=20)
    await send(queue, "later", -2, delay=90)
    await send(queue, "ready", 5)
    stats = (await queue.stats())["t"]
    assert (stats.delayed, stats.ready) == (3, 1)
    page = await queue.upcoming("t", limit=2)
    assert [(t.id, t.priority) for t in page.tasks] == [("ready", 5), ("plain", 0)]
    assert page.cursor is not None
    rest = await queue.upcoming("t", limit=5, cursor=page.cursor)
    assert [t.id for t in rest.tasks] == ["soon", "later"]
    timeline = await queue.timeline("t", window=60, windows=2)
    assert timeline.due == 1 and [w.count for w in timeline.windows] == [2, 1]
    assert await queue.cancel("t", "soon")
    assert not await queue.cancel("t", "soon")
    assert await queue.get("t", "soon") is None
    assert (await queue.stats())["t"].delayed == 2


async def test_replace_moves_a_task_between_priorities(queue: Queue) -> None:
    await send(queue, "x", 0, delay=60)
    replaced = await queue.send("t", {"v": 2}, task_id="x", on_conflict="replace", priority=8)
    assert replaced.outcome == "replaced"
    info = await stored(queue, "t", "x")
    assert (info.state, info.priority, info.body) == ("ready", 8, {"v": 2})
    assert (await queue.stats())["t"].ready == 1
    back = await queue.send_delayed("t", {}, 60, task_id="x", on_conflict="replace")
    assert back.outcome == "replaced" and (await stored(queue, "t", "x")).priority == 0
    assert (await queue.stats())["t"].delayed == 1


async def test_the_handler_sees_its_priority(queue: Queue, start_worker: StartWorker) -> None:
    seen: list[int] = []
    done = asyncio.Event()

    @queue.topic("t")
    async def handler(body: Any, task: Task) -> None:
        seen.append(task.priority)
        done.set()

    await start_worker(queue)
    await queue.send("t", {}, priority=-7)
    async with asyncio.timeout(10):
        await done.wait()
    assert seen == [-7]


async def test_upcoming_pages_through_ties_between_priority_and_plain_tasks(queue: Queue) -> None:
    """Tasks of both kinds due in the same millisecond: paging one at a time lists each
    once, in (due time, id) order, whichever kind the cursor's task is."""
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    for task_id, priority in [("a", 0), ("b", 4), ("c", 0), ("d", -1), ("e", 0), ("f", 4)]:
        await queue.send_at("t", {}, at, task_id=task_id, priority=priority)
    await queue.send_at("t", {}, at + timedelta(seconds=1), task_id="later", priority=2)
    seen, cursor = [], None
    while True:
        page = await queue.upcoming("t", limit=1, cursor=cursor)
        seen += [task.id for task in page.tasks]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ["a", "b", "c", "d", "e", "f", "later"]
