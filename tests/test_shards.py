"""Sharded topics on one Redis: key names, routing by id, the worker and the consumer across
shards, the aggregated reads, and the recorded shard count (docs/cluster.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

from delayq import (
    InvalidInputError,
    Queue,
    ShardCountError,
    Task,
    UnsupportedShardingError,
    Worker,
)
from delayq.redis.keys import TopicKeys, shard_of, shard_tags
from tests.fixtures_delayq import StartWorker
from tests.helpers import queue_keys, wait_for

TOPIC = "order.close"
SHARDS = 4


def ids_in(shard: int, count: int, shards: int = SHARDS, stem: str = "id") -> list[str]:
    """``count`` task ids that ``shard_of`` puts in ``shard``."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        candidate = f"{stem}{n}"
        if shard_of(candidate, shards) == shard:
            found.append(candidate)
        n += 1
    return found


def register(queue: Queue, shards: int = SHARDS, topic: str = TOPIC, **options: Any) -> list[str]:
    done: list[str] = []

    async def handle(body: Any, task: Task) -> None:
        if isinstance(body, dict) and body.get("fail"):
            raise RuntimeError("no")
        done.append(task.id)

    queue.topic(topic, shards=shards, **options)(handle)
    return done


# -- key names ---------------------------------------------------------------------------


def test_shard_zero_keeps_the_plain_names() -> None:
    assert TopicKeys.build("shop", "t", shard=0, shards=4) == TopicKeys.build("shop", "t")
    one = TopicKeys.build("shop", "t", shard=3, shards=4)
    tag = shard_tags("shop", "t", 4)[3]
    assert tag.startswith("shop:t:") and tag[len("shop:t:") :].isdigit()
    assert one.wheel == f"delayq:s:{{{tag}}}:wheel"
    assert one.wake == f"delayq:s:{{{tag}}}:wake"
    assert one.prefix == f"delayq:s:{{{tag}}}:"
    with pytest.raises(ValueError):
        TopicKeys.build("shop", "t", shard=4, shards=4)


@pytest.mark.parametrize("shards", [2, 3, 12, 16, 100, 1024])
def test_shard_tags_fall_one_in_each_nth_of_the_slots(shards: int) -> None:
    """So N shards spread evenly over masters that own equal runs of slots."""
    tags = shard_tags("shop", "order.close", shards)
    assert tags[0] == "shop:order.close" and len(set(tags)) == shards
    parts = sorted(key_slot(tag.encode()) * shards // 16384 for tag in tags)
    assert parts == list(range(shards))
    assert shard_tags("shop", "order.close", shards) == tags  # derived, not random


def test_twelve_shards_fall_four_on_each_of_three_equal_masters() -> None:
    """redis-cli --cluster create gives 3 masters 0-5460, 5461-10922, 10923-16383."""
    for topic in ("hot", "order.close", "t#1"):
        owners = [min(key_slot(t.encode()) // 5461, 2) for t in shard_tags("q", topic, 12)]
        assert sorted(owners.count(m) for m in range(3)) == [4, 4, 4]


def test_a_topic_named_like_a_shard_does_not_collide() -> None:
    """``{shop:t#1}`` or ``{shop:t:1}`` would be a plain topic's tag: shards avoid both."""
    shard = TopicKeys.build("shop", "t", shard=1, shards=2)
    tag = shard_tags("shop", "t", 2)[1]
    number = tag.rsplit(":", 1)[1]
    for plain in (f"t#{number}", f"t:{number}", "t/1", f"t:{number}:", f"s:{{{tag}}}"):
        keys = TopicKeys.build("shop", plain)
        assert not _names(keys) & _names(shard)


def _names(keys: TopicKeys) -> set[str]:
    return {keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.meta, keys.wake, keys.seq}


_TOPICS = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="{} "),
    min_size=1,
    max_size=12,
)


@given(_TOPICS, st.integers(0, 40), _TOPICS, st.integers(0, 40))
def test_no_two_shards_of_any_topics_share_a_name(a: str, j: int, b: str, k: int) -> None:
    if (a, j) == (b, k):
        return
    first = TopicKeys.build("q", a, shard=j, shards=41)
    second = TopicKeys.build("q", b, shard=k, shards=41)
    assert first.prefix != second.prefix
    assert not _names(first) & _names(second)


def test_the_shard_of_an_id_is_crc32_modulo_the_count() -> None:
    import zlib

    assert shard_of("abc", 12) == zlib.crc32(b"abc") % 12
    assert shard_of("abc", 1) == 0
    spread = {shard_of(f"task-{n}", 12) for n in range(500)}
    assert spread == set(range(12))


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, "4", True])
def test_bad_shard_counts_are_refused(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="shards"):
        queue.topic("t", shards=bad)


def test_limits_on_a_sharded_topic_are_refused(queue: Queue) -> None:
    with pytest.raises(UnsupportedShardingError, match="rate_limit or max_running"):
        queue.topic("t", shards=2, rate_limit="5/s")
    with pytest.raises(UnsupportedShardingError):
        queue.topic("t", shards=2, max_running=3)
    assert isinstance(UnsupportedShardingError("x"), ValueError)
    queue.topic("t", shards=1, max_running=3)  # unsharded: as before


# -- layout ------------------------------------------------------------------------------


async def test_an_unsharded_topic_keeps_todays_layout(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    register(queue, shards=1)
    await queue.send(TOPIC, {}, task_id="a")
    keys = await queue_keys(redis_client, queue.name)
    assert keys and not any(k.startswith("delayq:s:") for k in keys)
    assert await redis_client.hget(queue.keys(TOPIC).meta, "shards") is None


async def test_tasks_spread_over_the_shards(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    register(queue)
    sent = await queue.send_many(TOPIC, [{}] * 200, delay=60)
    every = queue.shard_keys(TOPIC)
    sizes = [await redis_client.hget(k.meta, "scheduled") for k in every]
    assert all(int(size) > 20 for size in sizes), sizes
    assert sum(int(size) for size in sizes) == 200
    assert await redis_client.hget(every[0].meta, "shards") == b"4"
    for task_id in sent[:20]:
        info = await queue.get(TOPIC, task_id)
        assert info is not None and info.state == "delayed"


# -- by id -------------------------------------------------------------------------------


async def test_calls_by_id_reach_the_tasks_shard(queue: Queue) -> None:
    register(queue, max_attempts=1)
    ids = [ids_in(shard, 1)[0] for shard in range(SHARDS)]
    for task_id in ids:
        assert (await queue.send_delayed(TOPIC, {"n": 1}, 60, task_id=task_id)).outcome == "created"
        assert (await queue.send_delayed(TOPIC, {"n": 2}, 60, task_id=task_id)).outcome == "kept"
        info = await queue.get(TOPIC, task_id)
        assert info is not None and info.body == {"n": 1}
        assert await queue.reschedule(TOPIC, task_id, delay=120)
    assert await queue.cancel(TOPIC, ids[1])
    assert await queue.get(TOPIC, ids[1]) is None
    replaced = await queue.send_delayed(TOPIC, {"n": 3}, 60, task_id=ids[2], on_conflict="replace")
    assert replaced.outcome == "replaced"
    assert (await queue.stats())[TOPIC].delayed == SHARDS - 1


async def test_send_many_groups_by_shard_and_keeps_the_callers_order(queue: Queue) -> None:
    register(queue)
    first = ids_in(1, 2) + ids_in(3, 2) + ids_in(0, 1)
    results = await queue.send_many(TOPIC, [{"n": n} for n in range(5)], task_ids=first, delay=60)
    assert results == first and {r.outcome for r in results} == {"created"}
    again = [first[0], "fresh", first[3]]
    results = await queue.send_many(TOPIC, [{}, {}, {}], task_ids=again, delay=60)
    assert [r.outcome for r in results] == ["kept", "created", "kept"]
    assert (await queue.stats())[TOPIC].delayed == 6


# -- worker ------------------------------------------------------------------------------


async def test_a_worker_drains_every_shard_and_dead_letters_aggregate(
    queue: Queue, start_worker: StartWorker
) -> None:
    done = register(queue, max_attempts=1)
    sent = await queue.send_many(TOPIC, [{}] * 40)
    later = await queue.send_many(TOPIC, [{}] * 8, delay=0.3)
    bad = [ids_in(shard, 1, stem="bad")[0] for shard in range(SHARDS)]
    await queue.send_many(TOPIC, [{"fail": True}] * SHARDS, task_ids=bad)
    await start_worker(queue, concurrency=8)
    await wait_for(lambda: len(done) == 48)
    assert sorted(done) == sorted(sent + later)
    dead: list[Any] = []
    for _ in range(100):
        dead = await queue.dead_letters(TOPIC)
        if len(dead) == SHARDS:
            break
        await asyncio.sleep(0.05)
    assert sorted(d.id for d in dead) == sorted(bad)
    died = [d.dead_at for d in dead]
    assert died == sorted(died)  # merged by time of death
    assert [d.id for d in await queue.dead_letters(TOPIC, limit=2, offset=1)] == [
        d.id for d in dead[1:3]
    ]
    stats = (await queue.stats())[TOPIC]
    assert (stats.dead, stats.delayed, stats.ready) == (SHARDS, 0, 0)
    # Paused, so the worker cannot lease the replayed task and dead-letter it again
    # before the stats are read (it fails every time).
    await queue.pause(TOPIC)
    assert await queue.replay(TOPIC, bad[2])
    stats = (await queue.stats())[TOPIC]
    assert (stats.dead, stats.ready) == (SHARDS - 1, 1)


async def test_no_shard_starves_while_another_is_busy(
    queue: Queue, start_worker: StartWorker
) -> None:
    """One shard holds hundreds of ready tasks; a task due soon on each other shard still
    runs while that backlog is being worked off (each shard has its own fetch loop)."""
    order: list[str] = []

    async def handle(body: Any, task: Task) -> None:
        order.append(task.id)
        await asyncio.sleep(0.005)

    queue.topic(TOPIC, shards=SHARDS)(handle)
    busy = ids_in(0, 400, stem="busy")
    await queue.send_many(TOPIC, [{}] * len(busy), task_ids=busy)
    others = [ids_in(shard, 1, stem="soon")[0] for shard in range(1, SHARDS)]
    await queue.send_many(TOPIC, [{}] * len(others), task_ids=others, delay=0.2)
    await start_worker(queue, concurrency=4)
    await wait_for(lambda: len(order) == len(busy) + len(others), 60)
    positions = [order.index(task_id) for task_id in others]
    # Each ran before the busy shard's backlog was gone (400 tasks take ~0.5 s at best).
    assert max(positions) < len(order) - 20, positions


async def test_pause_and_resume_cover_every_shard(queue: Queue, start_worker: StartWorker) -> None:
    done = register(queue)
    await queue.pause(TOPIC)
    ids = [ids_in(shard, 1, stem="p")[0] for shard in range(SHARDS)]
    await queue.send_many(TOPIC, [{}] * SHARDS, task_ids=ids)
    assert (await queue.stats())[TOPIC].paused
    await start_worker(queue, concurrency=4)
    await asyncio.sleep(0.3)
    assert done == []
    await queue.resume(TOPIC)
    await wait_for(lambda: len(done) == SHARDS)


# -- reads -------------------------------------------------------------------------------


async def test_upcoming_pages_merge_the_shards_in_due_order(queue: Queue) -> None:
    register(queue)
    ids = [f"u{n:02d}" for n in range(30)]
    await queue.send_many(TOPIC, [{}] * 30, task_ids=ids, delay=[60 + n for n in range(30)])
    seen: list[str] = []
    cursor = None
    while True:
        page = await queue.upcoming(TOPIC, limit=7, cursor=cursor)
        seen += [t.id for t in page.tasks]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == ids
    timeline = await queue.timeline(TOPIC, window=20, windows=6)
    assert sum(w.count for w in timeline.windows) == 30


# -- the recorded count ------------------------------------------------------------------


async def test_another_count_is_refused_while_tasks_are_stored(
    queue: Queue, queues: Callable[[], Queue]
) -> None:
    register(queue)
    await queue.send(TOPIC, {}, task_id=ids_in(3, 1)[0])
    other = queues()
    register(other, shards=2)
    with pytest.raises(ShardCountError, match="Changing a topic's shard count") as refused:
        await other.send(TOPIC, {})
    assert "shards=2" in str(refused.value) and "shards=4" in str(refused.value)
    with pytest.raises(ShardCountError):
        await other.get(TOPIC, "x")
    with pytest.raises(ShardCountError):
        async with asyncio.timeout(10):
            await Worker(other).run(handle_signals=False)
    plain = queues()
    register(plain, shards=1)
    with pytest.raises(ShardCountError):
        await plain.stats([TOPIC])
    assert (await queue.stats())[TOPIC].ready == 1  # nothing written


async def test_an_empty_topic_takes_a_new_count(
    queue: Queue, queues: Callable[[], Queue], redis_client: redis.asyncio.Redis
) -> None:
    register(queue)
    task_id = await queue.send(TOPIC, {})
    assert await queue.cancel(TOPIC, task_id)
    six = queues()
    register(six, shards=6)
    await six.send_delayed(TOPIC, {}, 60, task_id="x")
    assert await redis_client.hget(queue.keys(TOPIC).meta, "shards") == b"6"
    assert await six.cancel(TOPIC, "x")
    one = queues()
    register(one, shards=1)
    await one.send_delayed(TOPIC, {}, 60, task_id="y")
    assert await redis_client.hget(queue.keys(TOPIC).meta, "shards") is None


async def test_an_undeclared_topic_uses_the_recorded_count(
    queue: Queue, queues: Callable[[], Queue]
) -> None:
    register(queue)
    ids = [ids_in(shard, 1, stem="d")[0] for shard in range(SHARDS)]
    await queue.send_many(TOPIC, [{"n": 1}] * SHARDS, task_ids=ids, delay=60)
    reader = queues()  # no handler: a CLI or the web API
    for task_id in ids:
        info = await reader.get(TOPIC, task_id)
        assert info is not None and info.body == {"n": 1}
    assert (await reader.stats())[TOPIC].delayed == SHARDS
    assert (await reader.send_delayed(TOPIC, {}, 60, task_id=ids[1])).outcome == "kept"
    assert await reader.shards.count(TOPIC) == SHARDS


# -- consumer ----------------------------------------------------------------------------


async def test_a_consumer_leases_every_shard_and_acks_by_token(queue: Queue) -> None:
    register(queue)
    ids = [ids_in(shard, 2, stem="c") for shard in range(SHARDS)]
    flat = [task_id for pair in ids for task_id in pair]
    await queue.send_many(TOPIC, [{}] * len(flat), task_ids=flat)
    leased = await queue.consumer.lease(TOPIC, limit=5)
    assert len(leased) == 5
    leased += await queue.consumer.lease(TOPIC, limit=5)
    assert sorted(t.id for t in leased) == sorted(flat)
    for task in leased:
        await queue.consumer.ack(task.lease_token)
    assert TOPIC not in await queue.stats()


async def test_a_long_poll_wakes_for_a_send_to_any_shard(
    queue: Queue, queues: Callable[[], Queue], redis_client: redis.asyncio.Redis
) -> None:
    register(queue)
    consumer = queues()
    target = ids_in(3, 1, stem="w")[0]
    await queue.send_delayed(TOPIC, {}, 60, task_id="far")  # the topic exists, nothing due
    poll = asyncio.create_task(consumer.consumer.lease(TOPIC, wait=10))
    await wait_for(redis_client.pubsub_numpat, 5, "the long poll to subscribe")
    await queue.send(TOPIC, {}, task_id=target)
    leased = await asyncio.wait_for(poll, 8)
    assert [t.id for t in leased] == [target]


# -- history -----------------------------------------------------------------------------


async def test_history_of_a_sharded_topic_merges_the_shards(
    queue: Queue, start_worker: StartWorker
) -> None:
    done = register(queue, history=100)
    ids = [ids_in(shard, 2, stem="h") for shard in range(SHARDS)]
    flat = [task_id for pair in ids for task_id in pair]
    await queue.send_many(TOPIC, [{}] * len(flat), task_ids=flat)
    await start_worker(queue, concurrency=4)
    await wait_for(lambda: len(done) == len(flat))
    records: list[Any] = []
    for _ in range(100):
        records = await queue.history(TOPIC)
        if len(records) == len(flat):
            break
        await asyncio.sleep(0.05)
    assert sorted(r.id for r in records) == sorted(flat)
    finished = [r.finished_at for r in records]
    assert finished == sorted(finished, reverse=True)
    assert len(await queue.history(TOPIC, limit=3)) == 3
    for task_id in (ids[1][0], ids[3][1]):
        found = await queue.history.find(TOPIC, task_id)
        assert found is not None and found.outcome == "acked"
    with pytest.raises(InvalidInputError, match="sharded"):
        await queue.history(TOPIC, before=5)
