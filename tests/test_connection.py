"""The connections ``Queue.from_url`` opens: hiredis packing, write timeouts, the held
connection, task ids."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq import Queue
from delayq.ids import _RANDOM_BYTE_TO_CHAR, ID_ALPHABET, ID_CHARS, new_task_id, new_task_ids
from delayq.redis.connection import (
    HiredisPacking,
    TimerOnlyWhenBlocked,
    connection_pool,
    with_fast_paths,
)
from delayq.testing import PrivateRedis
from tests.helpers import schedule_entries

COMMANDS: list[tuple[object, ...]] = [
    ("EVALSHA", "a" * 40, 4, "delayq:{q:t}:schedule", b"\x00\xff body", -1, 0, 2**70),
    ("SET", "d\u00e9lai \u2603", 1.5, 0.1, 1e20, float("nan"), memoryview(b"view")),
    ("SCRIPT LOAD", "return 1"),  # redis-py splits a first argument with a space
    ("PING",),
]


@pytest.mark.parametrize("args", COMMANDS)
def test_hiredis_packing_sends_the_bytes_redis_py_would(args: tuple[object, ...]) -> None:
    fast, plain = with_fast_paths(Connection)(), Connection()
    assert b"".join(fast.pack_command(*args)) == b"".join(plain.pack_command(*args))  # type: ignore[arg-type]


def test_hiredis_packing_leaves_other_encodings_and_bad_values_to_redis_py() -> None:
    latin = with_fast_paths(Connection)(encoding="latin-1")
    assert b"".join(latin.pack_command("SET", "\u00e9")) == b"*2\r\n$3\r\nSET\r\n$1\r\n\xe9\r\n"
    with pytest.raises(DataError):
        with_fast_paths(Connection)().pack_command("SET", True)  # type: ignore[arg-type]


def test_each_connection_class_is_mixed_once() -> None:
    unix = with_fast_paths(UnixDomainSocketConnection)
    assert issubclass(unix, HiredisPacking) and issubclass(unix, TimerOnlyWhenBlocked)
    assert issubclass(unix, UnixDomainSocketConnection)
    assert with_fast_paths(UnixDomainSocketConnection) is unix
    assert with_fast_paths(unix) is unix


async def tasks_created_by(work: Callable[[], Awaitable[None]]) -> int:
    """How many asyncio Tasks ``work`` creates."""
    loop = asyncio.get_running_loop()
    created = 0

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting_factory)
    try:
        await work()
    finally:
        loop.set_task_factory(None)
    return created


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "redis-py"])
async def test_a_write_the_kernel_takes_at_once_runs_no_task(
    redis_server: PrivateRedis, fast: bool
) -> None:
    """redis-py times each write with asyncio.wait_for, a Task per command on Python 3.11;
    the fast path arms no timer for a write that cannot block (the redis-py case shows that
    the count can tell the two apart)."""
    connection = (with_fast_paths(Connection) if fast else Connection)(
        port=redis_server.port, socket_timeout=5
    )
    await connection.connect()
    try:

        async def ping_20_times() -> None:
            for _ in range(20):
                await connection.send_command("PING")
                assert await connection.read_response() in (b"PONG", "PONG")

        assert await tasks_created_by(ping_20_times) == (0 if fast else 20)
    finally:
        await connection.disconnect()


async def test_a_blocked_write_times_out_and_closes_the_connection(
    make_redis_server: Callable[..., PrivateRedis],
) -> None:
    """A write the frozen server does not read fills the socket buffers; socket_timeout
    then fails it as redis-py would, and the connection is closed, not left half-written."""
    server = make_redis_server()
    pool = connection_pool(server.url, socket_timeout=0.5)
    connection = pool.make_connection()
    await connection.connect()
    assert connection._writer is not None
    transport = connection._writer.transport
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
            async with asyncio.timeout(10):
                await connection.send_command("SET", "big", b"x" * 64_000_000)
        assert 0.4 < time.monotonic() - started < 5
        assert not connection.is_connected
    finally:
        # Closing waits for the 64 MB still buffered to be written; a test need not wait.
        transport.abort()
        await asyncio.sleep(0)  # the transport closes its socket on the next loop turn
        server.resume()
        await pool.disconnect()
    client = redis.asyncio.Redis.from_pool(connection_pool(server.url, socket_timeout=5))
    try:
        assert await client.ping()  # the pool's next connection works
    finally:
        await client.aclose()


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
