"""The connections ``Queue.from_url`` opens: hiredis packing, the held connection, task ids."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import redis.asyncio
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from delayq import Queue
from delayq.connection import HiredisPacking, with_hiredis_packing
from delayq.ids import _RANDOM_BYTE_TO_CHAR, ID_ALPHABET, ID_CHARS, new_task_id, new_task_ids
from tests.helpers import schedule_entries

COMMANDS: list[tuple[object, ...]] = [
    ("EVALSHA", "a" * 40, 4, "delayq:{q:t}:schedule", b"\x00\xff body", -1, 0, 2**70),
    ("SET", "d\u00e9lai \u2603", 1.5, 0.1, 1e20, float("nan"), memoryview(b"view")),
    ("SCRIPT LOAD", "return 1"),  # redis-py splits a first argument with a space
    ("PING",),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_hiredis_packing_sends_the_bytes_redis_py_would(args: tuple[object, ...]) -> None:
    fast, plain = with_hiredis_packing(Connection)(), Connection()
    assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args))  # type: ignore[arg-type]


def test_hiredis_packing_leaves_other_encodings_and_bad_values_to_redis_py() -> None:
    latin = with_hiredis_packing(Connection)(encoding="latin-1")
    assert b"".join(latin.pack_command("SET", "\u00e9")) == b"*2\r\n$3\r\nSET\r\n$1\r\n\xe9\r\n"
    with pytest.raises(DataError):
        with_hiredis_packing(Connection)().pack_command("SET", True)  # type: ignore[arg-type]


def test_each_connection_class_is_mixed_once() -> None:
    unix = with_hiredis_packing(UnixDomainSocketConnection)
    assert issubclass(unix, HiredisPacking) and issubclass(unix, UnixDomainSocketConnection)
    assert with_hiredis_packing(UnixDomainSocketConnection) is unix
    assert with_hiredis_packing(unix) is unix


def test_every_id_character_is_equally_likely() -> None:
    # 5 random bits per character: each of the 32 characters stands for 8 of the 256 bytes.
    assert Counter(_RANDOM_BYTE_TO_CHAR) == dict.fromkeys(ID_ALPHABET, 4)


def test_generated_ids_are_16_distinct_characters_of_the_alphabet() -> None:
    ids = [*new_task_ids(1000), new_task_id()]
    assert len(set(ids)) == 1001
    assert all(len(i) == ID_CHARS and set(i) <= set(ID_ALPHABET.decode()) for i in ids)
    assert set("".join(ids)) == set(ID_ALPHABET.decode())
    assert new_task_ids(0) == []


async def test_the_held_connection_is_not_taken_from_the_pool(
    redis_url: str, queue_name: str, redis_client: redis.asyncio.Redis
) -> None:
    # With one pooled connection, concurrent sends use it and the held one: had the held one
    # come out of the pool, every call finding it busy would wait for the pool in vain.
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
        # The next calls (on the held connection again) read their own replies.
        info = await queue.get("t", "first")
        assert info is not None and info.body == {"warm": True}
        assert await queue.send("t", {"after": True}, task_id="after") == "after"
        info = await queue.get("t", "after")
        assert info is not None and info.body == {"after": True}
