"""The script lane (``delayq.redis.lane``): replies in order, redis-py's settings, errors, retry
and timeout, against real Redis servers."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq import Queue, RedisOutOfMemoryError
from delayq.redis.connection import connection_pool, open_clients
from delayq.redis.lane import ScriptLane, lane_supported
from delayq.testing import PrivateRedis

ECHO = "return ARGV[1]"
ECHO_SHA = hashlib.sha1(ECHO.encode()).hexdigest()


@pytest.fixture
async def make_lane() -> AsyncIterator[Callable[..., ScriptLane]]:
    """``make_lane(url, **options)`` -> the ScriptLane ``Queue.from_url(url, **options)``
    would use (delayq's connection defaults included)."""
    made: list[tuple[ScriptLane, redis.asyncio.Redis]] = []

    def make(url: str, **options: Any) -> ScriptLane:
        client, lane = open_clients(url, **options)
        assert lane is not None
        made.append((lane, client))
        return lane

    yield make
    for lane, client in made:
        await lane.aclose()
        await client.aclose()


async def echo(lane: ScriptLane, value: str | int | bytes) -> Any:
    return await lane.evalsha(ECHO_SHA, ECHO, [], [value])


async def connections_received(client: redis.asyncio.Redis) -> int:
    info = await client.info("stats")
    return int(info["total_connections_received"])


async def test_concurrent_calls_share_one_connection_and_get_their_own_replies(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url)
    before = await connections_received(redis_client)
    # 300 calls in flight at once, the first ones racing to open the connection.
    replies = await asyncio.gather(*(echo(lane, f"v{i}") for i in range(300)))
    assert replies == [f"v{i}".encode() for i in range(300)]
    assert await connections_received(redis_client) - before == 1


async def test_a_flushed_script_is_loaded_again(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url)
    assert await echo(lane, "a") == b"a"
    await redis_client.script_flush()
    assert await echo(lane, "b") == b"b"  # NOSCRIPT, SCRIPT LOAD, then run


async def test_error_replies_are_redis_py_exceptions(
    make_lane: Callable[..., ScriptLane], redis_url: str
) -> None:
    lane = make_lane(redis_url)
    fail = "return redis.error_reply(ARGV[1])"
    sha = hashlib.sha1(fail.encode()).hexdigest()
    with pytest.raises(OutOfMemoryError):
        await lane.evalsha(sha, fail, [], ["OOM command not allowed"])
    with pytest.raises(NoPermissionError):
        await lane.evalsha(sha, fail, [], ["NOPERM no access"])
    with pytest.raises(ResponseError, match="plain failure"):
        await lane.evalsha(sha, fail, [], ["ERR plain failure"])
    assert await echo(lane, "still aligned") == b"still aligned"


async def test_the_lane_uses_the_pools_database_name_and_decoding(
    make_lane: Callable[..., ScriptLane],
    redis_server: PrivateRedis,
    redis_client: redis.asyncio.Redis,
    queue_name: str,
) -> None:
    lane = make_lane(
        f"redis://127.0.0.1:{redis_server.port}/5", client_name=queue_name, decode_responses=True
    )
    store = "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]"
    sha = hashlib.sha1(store.encode()).hexdigest()
    assert await lane.evalsha(sha, store, [queue_name], ["in five"]) == "in five"  # str
    in_five = redis.asyncio.Redis(port=redis_server.port, db=5)
    try:
        assert await in_five.get(queue_name) == b"in five"
        await in_five.delete(queue_name)
    finally:
        await in_five.aclose()
    assert await redis_client.get(queue_name) is None
    names = [c["name"] for c in await redis_client.client_list()]
    assert names.count(queue_name) == 1


async def test_a_call_is_retried_on_a_new_connection_after_a_redis_restart(
    make_lane: Callable[..., ScriptLane], make_redis_server: Callable[..., PrivateRedis]
) -> None:
    server = make_redis_server()
    lane = make_lane(server.url)  # delayq's default policy: one retry, no backoff
    assert await echo(lane, "before") == b"before"
    server.restart()
    assert await echo(lane, "after") == b"after"  # stale connection, then a fresh one


async def test_a_silent_redis_times_out_after_socket_timeout(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    assert await echo(lane, "warm") == b"warm"
    await redis_client.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError):
        await echo(lane, "paused")
    waited = time.monotonic() - started
    assert 0.25 <= waited < 1.2
    async with asyncio.timeout(5):
        await redis_client.ping()  # answered once the pause ends
    assert await echo(lane, "resumed") == b"resumed"  # on a new connection


async def test_a_busy_lane_is_not_a_silent_one(
    make_lane: Callable[..., ScriptLane], redis_url: str
) -> None:
    # Replies that keep coming count as progress: a long stream of calls outlives the
    # timeout without tripping it.
    lane = make_lane(redis_url, socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    deadline = time.monotonic() + 0.6
    calls = 0
    while time.monotonic() < deadline:
        assert await echo(lane, calls) == str(calls).encode()
        calls += 1
    assert calls > 10


async def test_closing_fails_calls_in_flight_and_a_later_call_reconnects(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url, retry=Retry(NoBackoff(), 0))
    assert await echo(lane, "warm") == b"warm"
    await redis_client.execute_command("CLIENT", "PAUSE", 300, "ALL")
    in_flight = asyncio.create_task(echo(lane, "cut"))
    await asyncio.sleep(0.05)
    await lane.aclose()
    with pytest.raises(RedisConnectionError):
        await in_flight
    async with asyncio.timeout(5):
        await redis_client.ping()  # answered once the pause ends
    assert await echo(lane, "again") == b"again"


async def test_a_redis_that_is_down_fails_the_call(
    make_lane: Callable[..., ScriptLane], make_redis_server: Callable[..., PrivateRedis]
) -> None:
    server = make_redis_server()
    lane = make_lane(server.url)
    assert await echo(lane, "up") == b"up"
    server.stop()
    with pytest.raises(RedisConnectionError):
        await echo(lane, "down")


def test_settings_the_lane_cannot_honour_leave_scripts_on_the_pool(redis_url: str) -> None:
    assert lane_supported(connection_pool(redis_url))
    assert lane_supported(connection_pool(redis_url, decode_responses=True))
    assert not lane_supported(connection_pool(redis_url, protocol=3))
    assert not lane_supported(connection_pool(redis_url, encoding="latin-1"))
    assert open_clients(redis_url, protocol=3)[1] is None


async def test_queue_errors_from_the_lane_are_translated(
    redis_server: PrivateRedis, queue_name: str, redis_client: redis.asyncio.Redis
) -> None:
    async with Queue.from_url(redis_server.url, name=queue_name) as queue:
        await queue.send("t", {"warm": True})
        await redis_client.config_set("maxmemory", 1)
        try:
            with pytest.raises(RedisOutOfMemoryError):
                await queue.send("t", {"x": "y" * 100})
        finally:
            await redis_client.config_set("maxmemory", 0)
        assert await queue.send("t", {"after": True}, task_id="after") == "after"


def test_a_lane_used_from_a_new_event_loop_opens_a_new_connection(redis_url: str) -> None:
    # A queue created at import time may serve several asyncio.run() calls in turn (a CLI,
    # a test suite): the connection of a loop that is gone cannot serve the next one.
    client, lane = open_clients(redis_url)
    assert lane is not None
    assert asyncio.run(echo(lane, "first loop")) == b"first loop"
    # That loop closed without closing the lane, which asyncio cannot do afterwards: its
    # socket is left to the garbage collector, with asyncio's usual warning.

    async def second_loop() -> bytes:
        try:
            reply: bytes = await echo(lane, "second loop")
            return reply
        finally:
            await lane.aclose()  # in the loop that opened it, as a queue must be closed
            await client.aclose()

    with pytest.warns(ResourceWarning, match="unclosed"):
        assert asyncio.run(second_loop()) == b"second loop"
        gc.collect()


async def test_a_late_failure_does_not_close_the_connection_another_call_opened(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    # The retry hook runs when a call's failure is handled; by then another call may have
    # opened a new connection.  (Driven through the hook: the interleaving is a race.)
    lane = make_lane(redis_url)
    assert await echo(lane, "first") == b"first"
    before = await connections_received(redis_client)
    await lane._drop(RedisConnectionError("a failure of an older connection"))
    assert await echo(lane, "same connection") == b"same connection"
    assert await connections_received(redis_client) == before
