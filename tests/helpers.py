"""Small helpers shared by the producer, script and model tests (real Redis only)."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import TYPE_CHECKING, Generic, TypeVar

from delayq import Backoff, Outcome

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import redis.asyncio

    from delayq import Queue, TaskInfo, TopicStats
    from delayq.redis.keys import TopicKeys

# Tests reserve with a long default lease, so a lease only ends when a test ends it.
LONG_TTR_MS = 3_600_000
DEFAULT_MAX_ATTEMPTS = 3
T = TypeVar("T")

FAST_RETRY = Backoff(initial=0.05, jitter=0)
"""A retry that comes soon and on time, so a test sees the next attempt quickly."""


class Recorder(Generic[T]):
    """What a hook or handler recorded, with a way to wait until enough of it is there
    (on the records themselves, never a fixed sleep)."""

    timeout = 10.0
    """How long ``wait`` and ``wait_until`` wait by default before the test fails."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._changed = asyncio.Event()

    def add(self, item: T) -> None:
        self.items.append(item)
        self._changed.set()

    def __call__(self, item: T) -> None:
        self.add(item)

    async def wait_until(self, enough: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until ``enough()`` holds, checking again after each new record."""
        async with asyncio.timeout(self.timeout if timeout is None else timeout):
            while not enough():
                self._changed.clear()
                await self._changed.wait()

    async def wait(self, count: int, timeout: float | None = None) -> list[T]:
        """Wait until at least ``count`` records exist; return them all."""
        await self.wait_until(lambda: len(self.items) >= count, timeout)
        return self.items


class Outcomes(Recorder[Outcome]):
    """A worker's ``on_outcome`` hook that tests can wait on."""

    def kinds(self) -> list[str]:
        return [o.outcome for o in self.items]


async def wait_for(
    condition: Callable[[], object | Awaitable[object]],
    timeout: float = 10.0,
    what: str = "the condition",
    step: float = 0.01,
) -> float:
    """Poll ``condition`` (sync or async) until it is truthy and return the seconds that
    took; fail the test after ``timeout`` seconds.  The one way a test waits for something
    to happen: on the condition itself, with a deadline, never a fixed sleep."""
    start = time.monotonic()
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(step)


async def assert_only_earlier_wakes(
    redis: redis.asyncio.Redis,
    channel: str,
    later: Callable[[], Awaitable[object]],
    earlier: Callable[[], Awaitable[object]],
) -> None:
    """``later`` (a change that makes nothing due sooner) publishes no wake-up on the
    topic's ``channel``; ``earlier`` (one that does) then publishes one."""
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(channel)
    try:
        await later()
        assert await pubsub.get_message(timeout=0.2) is None  # later: nobody needs waking
        await earlier()
        async with asyncio.timeout(5):
            while await pubsub.get_message(timeout=1) is None:
                pass
    finally:
        await pubsub.aclose()


async def queue_keys(redis: redis.asyncio.Redis, queue_name: str) -> list[str]:
    """Every key delayq holds for ``queue_name``: per-topic (and per-shard) keys and the
    queue's topic set.

    ``{`` and ``}`` are not glob characters, so the patterns match literally.
    """
    found: list[str] = []
    patterns = (f"delayq:{{{queue_name}:*", f"delayq:{{{queue_name}}}:*",
                f"delayq:s:{{{queue_name}:*")  # fmt: skip
    for pattern in patterns:
        async for key in redis.scan_iter(match=pattern, count=1000):
            found.append(key.decode() if isinstance(key, bytes) else key)
    return sorted(found)


async def redis_now_ms(redis: redis.asyncio.Redis) -> int:
    """Redis's clock in Unix milliseconds (delayq's only clock)."""
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def redis_time_passes(redis: redis.asyncio.Redis, ms: int, timeout: float = 10.0) -> None:
    """Wait until Redis's clock is ``ms`` milliseconds past what it reads now: a lease or a
    due time measured by Redis (delayq's only clock) has then run out."""
    until = await redis_now_ms(redis) + ms

    async def passed() -> bool:
        return await redis_now_ms(redis) > until

    await wait_for(passed, timeout, f"Redis's clock to pass {until} ms")


async def stored(queue: Queue, topic: str, task_id: str) -> TaskInfo:
    """``queue.get`` for a task the test knows exists."""
    info = await queue.get(topic, task_id)
    assert info is not None, f"{topic}/{task_id} is not stored"
    return info


async def reserve(
    queue: Queue,
    topic: str,
    *,
    limit: int = 10,
    reclaim: int = 100,
    ttr_ms: int = LONG_TTR_MS,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> tuple[int, int, list[tuple[str, str, int]]]:
    """Run reserve.lua for ``topic``.

    Returns:
        (now ms, next wake-up ms or -1, [(id, token, attempts), ...]) in lease order.
    """
    from delayq.task import Envelope

    now_us, wake, items = await queue.scripts.reserve(
        queue.keys(topic), limit=limit, reclaim=reclaim, ttr_ms=ttr_ms, max_attempts=max_attempts
    )
    leased = []
    for task_id, raw in items:
        envelope = Envelope.parse(raw)
        leased.append((task_id, envelope.token, envelope.attempts))
    # reserve.lua reports its clock in microseconds; every score it writes is in ms.
    return now_us // 1000, wake, leased


async def expire_lease(redis: redis.asyncio.Redis, keys: TopicKeys, task_id: str) -> None:
    """Make a held lease look expired without waiting for it.

    The lease deadline is the task's score in the ``reserved`` ZSET; moving it to the
    epoch (``ZADD XX`` only updates an existing member) is exactly what Redis would
    see once the deadline passed, so the next reserve.lua call reclaims the task.
    """
    assert await redis.zscore(keys.reserved, task_id) is not None, f"{task_id!r} holds no lease"
    await redis.zadd(keys.reserved, {task_id: 1}, xx=True)


async def bucket_count(redis: redis.asyncio.Redis, keys: TopicKeys) -> int:
    """How many task buckets the topic has now (the ``buckets`` key, absent: BUCKETS_MIN)."""
    from delayq.redis.keys import BUCKETS_MIN

    return int(await redis.get(keys.buckets) or BUCKETS_MIN)


async def task_fields(
    redis: redis.asyncio.Redis, keys: TopicKeys, task_id: str
) -> tuple[bytes | None, bytes | None]:
    """The (header, body) stored for ``task_id`` in its bucket, None where missing."""
    from delayq.redis.keys import BODY_FIELD_SUFFIX

    bucket = keys.bucket(task_id, await bucket_count(redis, keys))
    header, body = await redis.hmget(bucket, [task_id, task_id + BODY_FIELD_SUFFIX])
    return header, body


async def overwrite_task(
    redis: redis.asyncio.Redis, keys: TopicKeys, task_id: str, header: bytes, body: bytes | None
) -> None:
    """Replace a stored task's header and body by hand (``body=None`` deletes the body)."""
    from delayq.redis.keys import BODY_FIELD_SUFFIX

    bucket = keys.bucket(task_id, await bucket_count(redis, keys))
    await redis.hset(bucket, task_id, header)
    if body is None:
        await redis.hdel(bucket, task_id + BODY_FIELD_SUFFIX)
    else:
        await redis.hset(bucket, task_id + BODY_FIELD_SUFFIX, body)


async def schedule_entries(redis: redis.asyncio.Redis, keys: TopicKeys) -> dict[str, int]:
    """Every scheduled id -> due ms, read slot by slot (independent of the scripts' lookup)."""
    entries: dict[str, int] = {}
    for number in await redis.zrange(keys.wheel, 0, -1):
        for member, score in await redis.zrange(keys.slot(number), 0, -1, withscores=True):
            task_id = member.decode() if isinstance(member, bytes) else member
            assert task_id not in entries, f"{task_id!r} is scheduled twice"
            entries[task_id] = int(score)
    return entries


async def stored_task_keys(redis: redis.asyncio.Redis, keys: TopicKeys) -> list[str]:
    """The topic's task buckets and schedule slots that exist (empty ones do not)."""
    found: list[str] = []
    for pattern in (f"{keys.prefix}tasks:*", f"{keys.prefix}slot:*"):
        async for key in redis.scan_iter(match=pattern, count=1000):
            found.append(key.decode() if isinstance(key, bytes) else key)
    return sorted(found)


RECOUNT = """
local kept = redis.call('HGET', KEYS[1] .. 'meta', 'scheduled')
local counted = 0
for _, n in ipairs(redis.call('ZRANGE', KEYS[1] .. 'wheel', 0, -1)) do
  counted = counted + redis.call('ZCARD', KEYS[1] .. 'slot:' .. n)
end
return { kept or false, counted }
"""
"""(kept count, entries counted slot by slot) in one atomic step, so that it holds while
workers run; written here rather than shared with the scripts, as an independent check."""


async def recount(redis: redis.asyncio.Redis, keys: TopicKeys) -> tuple[int | None, int]:
    """(the scheduled count the scripts keep in the meta hash, the schedule counted entry by
    entry), to compare: the first must equal the second after any sequence of scripts."""
    kept, counted = await redis.eval(RECOUNT, 1, keys.prefix)  # type: ignore[misc]
    return (int(kept) if kept else None), int(counted)


async def assert_counts_exact(redis: redis.asyncio.Redis, keys: TopicKeys) -> None:
    """Fail unless the kept count equals a full recount (a topic never scheduled has none)."""
    kept, counted = await recount(redis, keys)
    assert (kept or 0) == counted, f"{keys.topic}: count kept {kept}, recounted {counted}"


def counted(stats: dict[str, TopicStats]) -> dict[str, TopicStats]:
    """``stats`` without what depends on the moment and on live workers (``consumers``,
    ``oldest_ready_age``): the counts and controls a test can compare exactly."""
    blank = {"consumers": 0, "oldest_ready_age": None}
    return {topic: s.model_copy(update=blank) for topic, s in stats.items()}
