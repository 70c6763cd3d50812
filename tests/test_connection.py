"""The connections ``Queue.from_url`` opens (:mod:`delayq.redis.clients`), and task ids."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis.asyncio

from delayq import Queue
from delayq.ids import _RANDOM_BYTE_TO_CHAR, ID_ALPHABET, ID_CHARS, new_task_id, new_task_ids
from tests.helpers import schedule_entries


def test_every_id_character_is_equally_likely() -> None:
    # 5 random bits per character: each of the 32 characters stands for 8 of the 256 bytes.
    assert Counter(_RANDOM_BYTE_TO_CHAR) == dict.fromkeys(ID_ALPHABET, 4)


def test_generated_ids_are_16_distinct_characters_of_the_alphabet() -> None:
    ids = [*new_task_ids(1000), new_task_id()]
    assert len(set(ids)) == 1001
    assert all(len(i) == ID_CHARS and set(i) <= set(ID_ALPHABET.decode()) for i in ids)
    assert set("".join(ids)) == set(ID_ALPHABET.decode())
    assert new_task_ids(0) == []


async def test_concurrent_sends_need_no_more_than_one_pooled_connection(
    redis_url: str, queue_name: str, redis_client: redis.asyncio.Redis
) -> None:
    # The script lane sends the calls of one turn as one pipeline on one connection.
    async with Queue.from_url(redis_url, name=queue_name, max_connections=1, timeout=2) as queue:
        ids = await asyncio.gather(*(queue.send("t", {"i": i}) for i in range(50)))
        scheduled = await schedule_entries(redis_client, queue.keys("t"))
        assert set(scheduled) == set(ids) and len(ids) == 50


async def test_a_call_cancelled_in_flight_leaves_no_reply_behind(
    redis_url: str, queue_name: str, redis_client: redis.asyncio.Redis
) -> None:
    async with Queue.from_url(redis_url, name=queue_name) as queue:
        await queue.send("t", {"warm": True}, task_id="first")
        await redis_client.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        stuck = asyncio.create_task(queue.send("t", {}, task_id="cancelled"))
        await asyncio.sleep(0.1)  # written, its reply held back by the pause
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        # The next calls read their own replies.
        info = await queue.get("t", "first")
        assert info is not None and info.body == {"warm": True}
        assert await queue.send("t", {"after": True}, task_id="after") == "after"
        info = await queue.get("t", "after")
        assert info is not None and info.body == {"after": True}
