"""Looking tasks up and managing what is stored: get, stats, dead letters, replay, and the
fleet-wide controls (pause, resume).  Plain functions that :class:`~delayq.Queue` calls.

The controls live in Redis, in each topic's ``controls`` hash, and ``reserve.lua`` enforces
them for every worker of the queue; see docs/controls.md.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import TYPE_CHECKING, Any, Protocol

from delayq.bounds import bounded_int
from delayq.redis.keys import check_task_id, check_topic, topics_key
from delayq.redis.translate import redis_errors
from delayq.task import TaskInfo, TopicStats, from_millis, stored_task_info
from delayq.topic import TopicOptions

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from redis.asyncio import Redis, RedisCluster

    from delayq.parts import QueueParts
    from delayq.redis.keys import TopicKeys
    from delayq.redis.replies import Found
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.topic import Topic


async def get_task(
    scripts: Scripts, shards: ShardMap, topic: str, task_id: str, settings: TopicSettings
) -> TaskInfo | None:
    """The task ``task_id`` of ``topic`` as stored, or None (see :meth:`delayq.Queue.get`)."""
    task_id = check_task_id(task_id)

    async def look(keys: TopicKeys) -> tuple[TopicKeys, Found | None]:
        return keys, await scripts.get(keys, task_id)

    keys, found = await shards.find(topic, task_id, look, lambda reply: reply[1] is not None)
    if found is None:
        return None
    state, score = found.state, found.score_ms
    lease = from_millis(score) if state == "reserved" else None
    dead_at = from_millis(score) if state == "dead" else None
    defaults = await topic_defaults(settings, topic, keys)
    return stored_task_info(
        topic, task_id, state, found.raw, found.error, score, lease, dead_at, found.paused,
        defaults,
    )  # fmt: skip


class TopicSettings(Protocol):
    """Where a lookup finds a topic's settings: what :class:`~delayq.Queue` has."""

    @property
    def redis(self) -> Redis | RedisCluster:
        """Reads what the workers recorded."""

    @property
    def topics(self) -> Mapping[str, Topic[Any]]:
        """The topics registered in this process, by name."""


async def topic_defaults(settings: TopicSettings, topic: str, keys: TopicKeys) -> tuple[int, int]:
    """``(ttr_ms, max_attempts)`` for ``topic``'s tasks without their own: as registered in
    this process, else as its workers recorded them in Redis (``keys``: the shard asked
    about; see ``record_settings``), else the defaults."""
    registered = settings.topics.get(topic)
    if registered is not None:
        return registered.options.ttr_ms, registered.options.max_attempts
    async with redis_errors():
        ttr_ms, attempts = await settings.redis.hmget(keys.meta, ["ttr_ms", "max_attempts"])
    default = TopicOptions()
    return (
        int(ttr_ms) if ttr_ms else default.ttr_ms,
        int(attempts) if attempts else default.max_attempts,
    )


async def topic_names(redis: Redis, queue_name: str) -> list[str]:
    """The names of the topics the queue has used, sorted."""
    async with redis_errors():
        members = await redis.smembers(topics_key(queue_name))
    return sorted(m.decode() if isinstance(m, bytes) else m for m in members)


async def topic_stats(parts: QueueParts, topics: Iterable[str] | None) -> dict[str, TopicStats]:
    """Counts and controls of each of ``topics`` (default: every topic the queue has used)
    that holds tasks or is controlled, with its live consumers (see
    :meth:`delayq.Queue.stats`)."""
    if topics is None:
        names = await topic_names(parts.redis, parts.name)
    else:
        names = [check_topic(t) for t in topics]
    scripts, shards = parts.scripts, parts.shards
    result: dict[str, TopicStats] = {}
    _now, consumers, _ = await parts.registry.consumers(names) if names else (0, [], [])
    for topic, consuming in zip(names, consumers, strict=True):
        every = await shards.every(topic)
        if len(every) == 1:
            shares = [await scripts.stats(every[0])]
        else:
            shares = await asyncio.gather(*(scripts.stats(k) for k in every))
        c = shares[0]
        delayed, ready = sum(s.delayed for s in shares), sum(s.ready for s in shares)
        reserved, dead = sum(s.reserved for s in shares), sum(s.dead for s in shares)
        controlled = c.paused or c.rate_limit or c.max_running
        oldest = min((s.oldest_ready_ms for s in shares if s.oldest_ready_ms >= 0), default=-1)
        if delayed or ready or reserved or dead or controlled:
            result[topic] = TopicStats(
                delayed=delayed, ready=ready, reserved=reserved, dead=dead,
                paused=c.paused, rate_limit=c.rate_limit, max_running=c.max_running,
                consumers=consuming,
                oldest_ready_age=max(c.now_ms - oldest, 0) / 1000 if oldest >= 0 else None,
            )  # fmt: skip
    return result


async def dead_letters(
    scripts: Scripts, shards: ShardMap, topic: str, limit: int, offset: int,
    settings: TopicSettings,
) -> list[TaskInfo]:  # fmt: skip
    """A page of ``topic``'s dead letters (see :meth:`delayq.Queue.dead_letters`)."""
    bounded_int(limit, "limit", 1)
    bounded_int(offset, "offset", 0)
    every = await shards.every(topic)
    if len(every) == 1:
        _now, rows = await scripts.dead_letters(every[0], offset=offset, limit=limit)
    else:
        pages = await asyncio.gather(*(
            scripts.dead_letters(k, offset=0, limit=offset + limit) for k in every
        ))  # fmt: skip
        merged = heapq.merge(*(page[1] for page in pages), key=lambda r: (r[3], r[0]))
        rows = list(merged)[offset : offset + limit]
    defaults = await topic_defaults(settings, topic, every[0]) if rows else (0, 0)
    return [
        stored_task_info(
            topic, task_id, "dead", raw, error, died, None, from_millis(died), defaults=defaults
        )
        for task_id, raw, error, died in rows
    ]


async def replay(scripts: Scripts, shards: ShardMap, topic: str, task_id: str) -> bool:
    """Move dead task ``task_id`` back to ready (see :meth:`delayq.Queue.replay`)."""
    task_id = check_task_id(task_id)
    return await shards.find(topic, task_id, lambda keys: scripts.replay(keys, task_id), bool)


async def set_controls(
    scripts: Scripts, shards: ShardMap, topic: str, fields: Mapping[str, str]
) -> None:
    """Write ``fields`` into the ``controls`` hash of every shard of ``topic``."""
    for keys in await shards.every(topic):
        await scripts.control(keys, fields)
