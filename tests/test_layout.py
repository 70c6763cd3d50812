"""The bucket-and-slot layout under load: splits, ties, and lookups by id.

The model test (test_model.py) holds a handful of tasks, so it never fills a schedule slot;
these tests send thousands, with repeated due times, earlier-than-everything sends and
moves, and check the layout's invariants (docs/keys.md) and that leasing still returns
every task once, in due order.
"""

from __future__ import annotations

import random

import redis.asyncio

from delayq import Queue
from delayq.redis.keys import TopicKeys
from tests.helpers import reserve, schedule_entries, stored_task_keys

SLOT_MAX = 128  # zset-max-listpack-entries, Redis's default


async def layout_problems(redis_client: redis.asyncio.Redis, keys: TopicKeys) -> list[str]:
    """Violations of: every slot is a listpack of <= 128 entries, each >= its bound, and the
    wheel visits entries in due order."""
    problems: list[str] = []
    previous_last = float("-inf")
    for number, bound in await redis_client.zrange(keys.wheel, 0, -1, withscores=True):
        slot = keys.slot(number)
        entries = await redis_client.zrange(slot, 0, -1, withscores=True)
        if not entries:
            problems.append(f"{slot} is in the wheel but empty")
            continue
        if len(entries) > SLOT_MAX or await redis_client.object("encoding", slot) != b"listpack":
            problems.append(f"{slot} holds {len(entries)} entries")
        first, last = entries[0][1], entries[-1][1]
        if first < bound:
            problems.append(f"{slot} starts at {first}, before its bound {bound}")
        if first < previous_last:
            problems.append(f"{slot} starts at {first}, before the previous slot's end")
        previous_last = last
    return problems


async def test_thousands_of_tasks_with_ties_keep_the_layout(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    rng = random.Random(7)
    keys = queue.keys("t")
    sent: list[str] = []
    # Batches that share one due time (more than a slot holds), then scattered times with
    # repeats, then times earlier than everything already scheduled.
    for batch in range(3):
        sent += await queue.send_many("t", [{}] * 300, delay=60 + batch, batch_size=300)
    scattered = [60 + rng.randrange(0, 400) / 100 for _ in range(1_000)]
    sent += await queue.send_many("t", [{}] * len(scattered), delay=scattered)
    sent += await queue.send_many("t", [{}] * 200, delay=[30 - n / 100 for n in range(200)])
    assert await layout_problems(redis_client, keys) == []

    moved = rng.sample(sent, 300)
    for task_id in moved:
        assert await queue.reschedule("t", task_id, delay=rng.choice([20, 45, 61, 90]))
    cancelled = set(rng.sample(sorted(set(sent) - set(moved)), 300))
    for task_id in cancelled:
        assert await queue.cancel("t", task_id)
    assert await layout_problems(redis_client, keys) == []

    entries = await schedule_entries(redis_client, keys)
    assert set(entries) == set(sent) - cancelled
    for task_id in rng.sample(sorted(entries), 50):  # get finds each task from its header
        info = await queue.get("t", task_id)
        assert info is not None and info.state == "delayed"
        assert round(info.due_at.timestamp() * 1000) == entries[task_id]


async def test_leasing_thousands_returns_each_once_in_due_order(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    rng = random.Random(11)
    keys = queue.keys("t")
    delays = [rng.randrange(0, 300) / 1000 for _ in range(1_500)] + [0.1] * 500
    rng.shuffle(delays)
    sent = await queue.send_many("t", [{}] * len(delays), delay=delays)
    assert await layout_problems(redis_client, keys) == []
    due = await schedule_entries(redis_client, keys)
    leased: list[str] = []
    while len(leased) < len(sent):
        _, _, items = await reserve(queue, "t", limit=100)
        leased += [task_id for task_id, _, _ in items]
        assert await layout_problems(redis_client, keys) == []
    assert sorted(leased) == sorted(sent)
    order = [due[task_id] for task_id in leased]
    assert order == sorted(order)
    assert await schedule_entries(redis_client, keys) == {}
    assert await redis_client.exists(keys.wheel) == 0
    assert all(":tasks:" in key for key in await stored_task_keys(redis_client, keys))
