"""Task buckets split as a topic grows (linear hashing in ``_layout.lua``).

A split needs a bucket past 64 fields, i.e. about 100,000 tasks in a topic; these tests
reach it with a few hundred ids chosen to land in the buckets that split next.
"""

from __future__ import annotations

import itertools

import pytest
import redis.asyncio

from delayq import Queue, RedisCommandError
from delayq.redis.keys import BODY_FIELD_SUFFIX, BUCKETS_MIN, TopicKeys
from tests.helpers import bucket_count, reserve

SPLIT_AT_TASKS = 32  # a send into a bucket holding 32 tasks (64 fields) splits one bucket


def ids_in_bucket(keys: TopicKeys, count: int, number: int, how_many: int, tag: str) -> list[str]:
    """``how_many`` ids that land in bucket ``number`` when the topic has ``count`` buckets."""
    wanted = f"{keys.prefix}tasks:{number:03x}"
    candidates = (f"{tag}-{n}" for n in itertools.count())
    return list(
        itertools.islice((i for i in candidates if keys.bucket(i, count) == wanted), how_many)
    )


async def assert_each_task_in_its_bucket(
    redis_client: redis.asyncio.Redis, keys: TopicKeys, task_ids: list[str]
) -> None:
    """Every id's header and body sit in the bucket the current count gives, and the
    buckets hold nothing else."""
    count = await bucket_count(redis_client, keys)
    for task_id in task_ids:
        header, body = await redis_client.hmget(
            keys.bucket(task_id, count), [task_id, task_id + BODY_FIELD_SUFFIX]
        )
        assert header is not None and body is not None, task_id
    fields = 0
    async for bucket in redis_client.scan_iter(match=f"{keys.prefix}tasks:*", count=1000):
        fields += await redis_client.hlen(bucket)
    assert fields == 2 * len(task_ids)


@pytest.mark.parametrize("count", [BUCKETS_MIN, 4097, 6000, 8191, 8192, 12345])
async def test_python_and_lua_agree_on_the_bucket(
    queue: Queue, redis_client: redis.asyncio.Redis, count: int
) -> None:
    keys = queue.keys("t")
    if count != BUCKETS_MIN:
        await redis_client.set(keys.buckets, count)
    task_ids = [f"agree-{n}" for n in range(300)]
    await queue.send_many("t", [{} for _ in task_ids], delay=60, task_ids=task_ids)
    await assert_each_task_in_its_bucket(redis_client, keys, task_ids)


async def test_full_buckets_split_in_order_and_every_task_stays_reachable(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    # Buckets 0, 1 and 2 get 40 tasks each: each overflows when the split pointer is at it,
    # so each split moves tasks.  Sent one by one and in batches.
    groups = [ids_in_bucket(keys, BUCKETS_MIN, n, 40, f"g{n}") for n in range(3)]
    for task_id in groups[0]:
        await queue.send_delayed("t", {"id": task_id}, 60, task_id=task_id)
    for group in groups[1:]:
        await queue.send_many(
            "t", [{"id": i} for i in group], delay=60, task_ids=group, batch_size=7
        )
    task_ids = [i for group in groups for i in group]
    # One by one, the 33rd send splits bucket 0 and the others find 0 and 4,096 half full.
    # A batch counts every task past 32 in a bucket (as one-by-one sends would while the
    # pointer is elsewhere), so buckets 1 and 2 may split the next buckets too.
    count = await bucket_count(redis_client, keys)
    assert BUCKETS_MIN + 3 <= count <= BUCKETS_MIN + 1 + 2 * (40 - SPLIT_AT_TASKS)
    for n in range(3):  # each split bucket gave some of its tasks to bucket n + 4096
        assert 0 < await redis_client.hlen(f"{keys.prefix}tasks:{n:03x}") < 80
        assert await redis_client.hlen(f"{keys.prefix}tasks:{n + BUCKETS_MIN:03x}") > 0
    await assert_each_task_in_its_bucket(redis_client, keys, task_ids)

    for task_id in task_ids:
        info = await queue.get("t", task_id)
        assert info is not None and info.body == {"id": task_id} and info.state == "delayed"
    # A repeated send of a live id is refused wherever the task moved.
    assert await queue.send_many("t", [{}] * 3, task_ids=task_ids[:3]) == task_ids[:3]
    assert (await queue.get("t", task_ids[0])).body == {"id": task_ids[0]}  # type: ignore[union-attr]

    cancelled = task_ids[::5]
    for task_id in cancelled:
        assert await queue.cancel("t", task_id)
    kept = [i for i in task_ids if i not in cancelled]
    for task_id in kept:
        assert await queue.reschedule("t", task_id, delay=0)
    _, _, leased = await reserve(queue, "t", limit=1000)
    assert sorted(i for i, _, _ in leased) == sorted(kept)
    results = await queue.scripts.ack(keys, [(i, token) for i, token, _ in leased])
    assert results == [True] * len(leased)
    assert await redis_client.keys(f"{keys.prefix}tasks:*") == []


async def test_the_split_pointer_wraps_when_the_count_doubles(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """At 8,191 buckets the next split makes 8,192, a power of two: addresses then take one
    more bit, and the pointer starts again at bucket 0, within the same call."""
    keys = queue.keys("t")
    await redis_client.set(keys.buckets, 2 * BUCKETS_MIN - 1)
    last = ids_in_bucket(keys, 2 * BUCKETS_MIN - 1, BUCKETS_MIN - 1, SPLIT_AT_TASKS + 1, "last")
    # Bucket 0 at 8,191 buckets and at 8,192 alike (bit 13 of these ids is 0 or sends them
    # to a bucket that does not exist yet).
    first = ids_in_bucket(keys, 2 * BUCKETS_MIN, 0, SPLIT_AT_TASKS + 1, "first")
    assert {keys.bucket(i, 2 * BUCKETS_MIN - 1) for i in first} == {keys.bucket(first[0], 4096)}
    full = last[:-1] + first[:-1]
    await queue.send_many("t", [{}] * len(full), delay=60, task_ids=full)
    assert await redis_client.get(keys.buckets) == b"8191"  # both buckets at 64 fields
    # One call, two splits: bucket 4,095 into 8,191, then (level 8,192) bucket 0 into 8,192.
    await queue.send_many("t", [{}, {}], delay=60, task_ids=[last[-1], first[-1]])
    assert await bucket_count(redis_client, keys) == 2 * BUCKETS_MIN + 1
    assert await redis_client.hlen(f"{keys.prefix}tasks:{2 * BUCKETS_MIN - 1:03x}") > 0
    assert await redis_client.hlen(f"{keys.prefix}tasks:{2 * BUCKETS_MIN:03x}") > 0
    await assert_each_task_in_its_bucket(redis_client, keys, last + first)
    for task_id in last + first:
        assert await queue.get("t", task_id) is not None


async def test_a_dead_letter_sent_again_into_a_full_bucket_splits_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """Replacing a dead letter adds no task, so it must not count towards a split."""
    keys = queue.keys("t")
    group = ids_in_bucket(keys, BUCKETS_MIN, 5, SPLIT_AT_TASKS, "dead")
    await queue.send_many("t", [{}] * len(group), task_ids=group)
    _, _, leased = await reserve(queue, "t", limit=100)
    await queue.scripts.nack(
        keys, leased[0][0], leased[0][1], mode="dead", error="E: x", max_attempts=3
    )
    assert await redis_client.hlen(f"{keys.prefix}tasks:005") == 2 * SPLIT_AT_TASKS
    await queue.send("t", {}, task_id=leased[0][0])
    await queue.send_many("t", [{}], task_ids=[leased[0][0]])  # live again: refused
    assert await redis_client.get(keys.buckets) is None


@pytest.mark.parametrize("garbage", ["not a number", "4095", "4096.5", "hash"])
async def test_a_garbled_bucket_count_fails_every_call_before_it_writes(
    queue: Queue, redis_client: redis.asyncio.Redis, garbage: str
) -> None:
    keys = queue.keys("t")
    await queue.send("t", {}, task_id="known")
    await redis_client.delete(keys.buckets)
    if garbage == "hash":
        await redis_client.hset(keys.buckets, "x", 1)
    else:
        await redis_client.set(keys.buckets, garbage)
    match = "WRONGTYPE" if garbage == "hash" else "not a bucket count"
    with pytest.raises(RedisCommandError, match=match):
        await queue.send("t", {}, task_id="fresh")
    with pytest.raises(RedisCommandError, match=match):
        await queue.get("t", "known")
    with pytest.raises(RedisCommandError, match=match):
        await reserve(queue, "t")
    assert await redis_client.hexists(keys.bucket("known"), "known")
    assert not await redis_client.hexists(keys.bucket("fresh"), "fresh")


@pytest.mark.parametrize("how", ["send", "send_many"])
async def test_a_send_whose_split_meets_a_garbled_bucket_changes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, how: str
) -> None:
    """The split writes after the schedule: the buckets it touches are read before any write."""
    keys = queue.keys("t")
    group = ids_in_bucket(keys, BUCKETS_MIN, 0, SPLIT_AT_TASKS + 1, "garbled")
    await queue.send_many("t", [{}] * SPLIT_AT_TASKS, delay=60, task_ids=group[:-1])
    await redis_client.set(f"{keys.prefix}tasks:{BUCKETS_MIN:03x}", "garbage")  # the split's target
    before = {
        key: await redis_client.dump(key) for key in await redis_client.keys(f"{keys.prefix}*")
    }
    with pytest.raises(RedisCommandError, match="WRONGTYPE"):
        if how == "send":
            await queue.send_delayed("t", {}, 30, task_id=group[-1])
        else:
            await queue.send_many("t", [{}], delay=30, task_ids=group[-1:])
    after = {
        key: await redis_client.dump(key) for key in await redis_client.keys(f"{keys.prefix}*")
    }
    assert after == before


async def test_a_body_too_long_for_a_listpack_splits_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """A body over 64 bytes makes its bucket a hashtable anyway: splitting would only cost."""
    keys = queue.keys("t")
    long_body = {"note": "x" * 60}
    sent: list[str] = []
    for number, how in ((7, "send"), (8, "send_many")):
        group = ids_in_bucket(keys, BUCKETS_MIN, number, SPLIT_AT_TASKS + 1, f"long{how}")
        await queue.send_many("t", [{}] * SPLIT_AT_TASKS, delay=60, task_ids=group[:-1])
        assert (
            await redis_client.object("encoding", f"{keys.prefix}tasks:{number:03x}") == b"listpack"
        )
        if how == "send":
            await queue.send_delayed("t", long_body, 60, task_id=group[-1])
        else:
            await queue.send_many("t", [long_body], delay=60, task_ids=group[-1:])
        assert await redis_client.hlen(f"{keys.prefix}tasks:{number:03x}") == 2 * len(group)
        assert await redis_client.get(keys.buckets) is None
        sent += group
    await assert_each_task_in_its_bucket(redis_client, keys, sent)


async def test_a_bucket_already_a_hashtable_splits_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """One long body turned the bucket into a hashtable for good: short sends into it do not
    split (a topic that grew hashtable buckets before splitting existed would otherwise
    split a ~500-field bucket on every send)."""
    keys = queue.keys("t")
    group = ids_in_bucket(keys, BUCKETS_MIN, 9, SPLIT_AT_TASKS + 2, "mixed")
    await queue.send("t", {"note": "x" * 60}, task_id=group[0])
    await queue.send_many("t", [{}] * SPLIT_AT_TASKS, task_ids=group[1:-1])
    assert await redis_client.object("encoding", f"{keys.prefix}tasks:009") == b"hashtable"
    await queue.send("t", {}, task_id=group[-1])
    await queue.send_many("t", [{}], task_ids=["mixed-extra"])
    assert await redis_client.get(keys.buckets) is None


async def test_one_call_splits_at_most_64_buckets(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """A batch of ids crafted to land in one bucket asks for a split per id past 32."""
    keys = queue.keys("t")
    crowd = ids_in_bucket(keys, BUCKETS_MIN, 0, SPLIT_AT_TASKS + 100, "crowd")
    await queue.send_many("t", [{}] * len(crowd), delay=60, task_ids=crowd, batch_size=1000)
    assert await bucket_count(redis_client, keys) == BUCKETS_MIN + 64
    await assert_each_task_in_its_bucket(redis_client, keys, crowd)
