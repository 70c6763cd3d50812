"""The scheduled count the scripts keep, and stats() read from it without walking the slots.

Every transition keeping the count exact is checked by the model test (test_model.py, after
each step) and by the fault suite (after each scenario); these tests cover the ready/delayed
split around now, topics scheduled before the count existed, and what stats() costs Redis.
"""

from __future__ import annotations

import redis.asyncio

from delayq import Queue, TopicStats
from tests.helpers import assert_counts_exact, counted, recount, reserve


async def _commands(redis_client: redis.asyncio.Redis, *names: str) -> int:
    stats = await redis_client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in names)


async def test_stats_splits_ready_and_delayed_on_either_side_of_now(queue: Queue) -> None:
    # Mostly ready: stats walks the few slots after now.
    await queue.send_many("ready", [{}] * 1_500)
    await queue.send_many("ready", [{}] * 200, delay=600)
    # Mostly delayed: stats walks the few slots before now.
    await queue.send_many("delayed", [{}] * 150)
    await queue.send_many("delayed", [{}] * 2_000, delay=[600 + n / 10 for n in range(2_000)])
    # Both large: either walk gives the same answer.
    await queue.send_many("both", [{}] * 900)
    await queue.send_many("both", [{}] * 1_000, delay=600)
    stats = counted(await queue.stats())
    assert stats == {
        "ready": TopicStats(delayed=200, ready=1_500, reserved=0, dead=0),
        "delayed": TopicStats(delayed=2_000, ready=150, reserved=0, dead=0),
        "both": TopicStats(delayed=1_000, ready=900, reserved=0, dead=0),
    }
    for topic in stats:
        await assert_counts_exact(queue.redis, queue.keys(topic))


async def test_a_slot_straddling_now_is_split_inside(queue: Queue) -> None:
    # One slot holds tasks due now and tasks due in a minute: stats counts inside it.
    await queue.send_many("t", [{}] * 40)
    await queue.send_many("t", [{}] * 30, delay=60)
    assert counted(await queue.stats())["t"] == TopicStats(delayed=30, ready=40, reserved=0, dead=0)


async def test_stats_on_a_large_topic_reads_a_few_slots(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_many("t", [{}] * 20_000, delay=[600 + n / 100 for n in range(20_000)])
    await queue.send_many("t", [{}] * 10)
    slots = len(await redis_client.zrange(queue.keys("t").wheel, 0, -1))
    assert slots > 150
    before = await _commands(redis_client, "zcard", "zcount")
    assert counted(await queue.stats())["t"] == TopicStats(
        delayed=20_000, ready=10, reserved=0, dead=0
    )
    assert await _commands(redis_client, "zcard", "zcount") - before <= 6  # not one per slot


async def test_a_topic_scheduled_before_the_count_existed_is_recounted(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send_many("t", [{}] * 300, delay=600)
    await queue.send_many("t", [{}] * 5, task_ids=[f"r{n}" for n in range(5)])
    await redis_client.delete(keys.meta)  # as data written before the count was kept
    # stats() counts the slots when there is no count...
    assert counted(await queue.stats())["t"] == TopicStats(delayed=300, ready=5, reserved=0, dead=0)
    assert await recount(redis_client, keys) == (None, 305)
    # ...and the first script that removes from the schedule recounts it,
    await reserve(queue, "t", limit=2)
    await assert_counts_exact(redis_client, keys)
    assert await recount(redis_client, keys) == (303, 303)
    # as does the first that adds to it.
    await redis_client.delete(keys.meta)
    await queue.send("t", {})
    assert await recount(redis_client, keys) == (304, 304)


async def test_a_count_gone_wrong_is_recounted_by_the_next_change(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    await queue.send_many("t", [{}] * 10, delay=600)
    await redis_client.hset(keys.meta, "scheduled", -50)
    await queue.cancel("t", (await queue.send_delayed("t", {}, 600)))
    await assert_counts_exact(redis_client, keys)
