"""Many workers racing for one ready task: reserve.lua must hand it to exactly one."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
import redis.asyncio

from delayq import Queue
from delayq.redis.scripts import lua_source, reserve_keys
from tests.helpers import LONG_TTR_MS

RESERVERS = 50
ROUNDS = 1_000
TOPICS_PER_BATCH = 100

pytestmark = pytest.mark.slow  # 50,000 racing script calls: a stress run, the slow tier


async def test_exactly_one_of_many_reservers_wins_each_task(
    redis_url: str, queue_name: str, redis_client: redis.asyncio.Redis
) -> None:
    """50 separate clients (50 connections) reserve at once, 1,000 times over.

    Each of the 1,000 races is on its own topic holding one ready task.  To stay fast,
    every client pipelines its reserve calls for a batch of 100 topics (in its own random
    order) and all 50 pipelines run at once: Redis interleaves the connections, so each
    topic still sees 50 competing reserve.lua calls from 50 connections.
    """
    async with contextlib.AsyncExitStack() as stack:
        racers = [
            # 50 pipelines of 100 scripts queue up in one Redis: on a loaded machine a
            # reply can take longer than the 2 s a silent Redis is given by default.
            await stack.enter_async_context(
                Queue.from_url(redis_url, name=queue_name, socket_timeout=30)
            )
            for _ in range(RESERVERS)
        ]
        producer = racers[0]
        for first in range(0, ROUNDS, TOPICS_PER_BATCH):
            topics = [f"race-{n}" for n in range(first, first + TOPICS_PER_BATCH)]
            await asyncio.gather(*(producer.send(t, {"t": t}, task_id="prize") for t in topics))
            leases = await asyncio.gather(*(reserve_each(racer, topics) for racer in racers))
            for topic in topics:
                winners = [won[topic] for won in leases if topic in won]
                assert winners == ["prize"], f"{topic}: {len(winners)} reservers got the task"

        # Every prize was leased once; no topic holds anything else.
        stats = await producer.stats()
        assert len(stats) == ROUNDS
        assert {(s.delayed, s.ready, s.reserved, s.dead) for s in stats.values()} == {(0, 0, 1, 0)}
        assert await redis_client.get(producer.keys("race-0").seq) == b"1"


async def reserve_each(racer: Queue, topics: list[str]) -> dict[str, str]:
    """Pipeline one reserve.lua call per topic; return {topic: leased id} for the wins."""
    script = racer.redis.register_script(lua_source("reserve"))
    order = random.sample(topics, len(topics))
    async with racer.redis.pipeline(transaction=False) as pipe:
        for topic in order:
            keys = racer.keys(topic)
            await script(
                keys=reserve_keys(keys),
                args=[1, 1, LONG_TTR_MS, 3],
                client=pipe,
            )
        replies: list[Any] = await pipe.execute()
    # A reply is {now_us, next_ms, skipped, id, envelope, ...}: more than three entries is a lease.
    return {
        topic: reply[3].decode()
        for topic, reply in zip(order, replies, strict=True)
        if len(reply) > 3
    }
