"""The script lane (``delayq.redis.lane``): calls of one turn pipelined, each with its own
reply or error; redis-py's settings, retry and timeout, against real Redis servers."""

from __future__ import annotations

import asyncio
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
from delayq.redis.clients import open_clients
from delayq.redis.lane import ScriptLane
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


@pytest.mark.parametrize(
    ("options", "connections"),
    [({}, 1), ({"health_check_interval": 30}, 2)],
    ids=["delayqs-connection", "redis-pys-connection"],
)
async def test_calls_made_together_share_few_connections_and_get_their_own_replies(
    make_lane: Callable[..., ScriptLane],
    redis_url: str,
    redis_client: redis.asyncio.Redis,
    queue_name: str,
    options: dict[str, Any],
    connections: int,
) -> None:
    lane = make_lane(redis_url, client_name=queue_name, **options)
    assert await echo(lane, "warm") == b"warm"
    # 300 calls at once.  On delayq's own connection all of them are pipelined on it; with
    # settings it does not take (a health check), the first goes on the lane's held
    # connection and the other 299 as one pipeline on a pooled one.  Sent one by one on
    # the pool, they would open up to its 100.
    replies = await asyncio.gather(*(echo(lane, f"v{i}") for i in range(300)))
    assert replies == [f"v{i}".encode() for i in range(300)]
    names = [c["name"] for c in await redis_client.client_list()]
    assert names.count(queue_name) == connections


async def test_pipelined_calls_from_many_turns_keep_their_replies(
    make_lane: Callable[..., ScriptLane], redis_url: str
) -> None:
    lane = make_lane(redis_url)

    async def sender(who: int) -> None:
        for n in range(40):
            assert await echo(lane, f"{who}:{n}") == f"{who}:{n}".encode()

    await asyncio.gather(*(sender(who) for who in range(50)))


@pytest.mark.parametrize("calls", [1, 20], ids=["alone", "pipelined"])
async def test_a_flushed_script_is_loaded_again(
    make_lane: Callable[..., ScriptLane],
    redis_url: str,
    redis_client: redis.asyncio.Redis,
    calls: int,
) -> None:
    lane = make_lane(redis_url)
    assert await echo(lane, "a") == b"a"
    await redis_client.script_flush()
    # NOSCRIPT, SCRIPT LOAD, then run
    replies = await asyncio.gather(*(echo(lane, f"b{i}") for i in range(calls)))
    assert replies == [f"b{i}".encode() for i in range(calls)]


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
    # In a pipeline, the failing call alone gets its error.
    failing = lane.evalsha(sha, fail, [], ["OOM command not allowed"])
    replies = await asyncio.gather(
        echo(lane, "x"), failing, echo(lane, "y"), return_exceptions=True
    )
    assert replies[0] == b"x" and replies[2] == b"y"
    assert isinstance(replies[1], OutOfMemoryError)


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
    lanes = [c for c in await redis_client.client_list() if c["name"] == queue_name]
    assert lanes and all(c["db"] == "5" for c in lanes)


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


async def test_closing_fails_pipelined_calls_in_flight_and_a_later_call_works(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url, retry=Retry(NoBackoff(), 0))
    assert await echo(lane, "warm") == b"warm"
    await redis_client.execute_command("CLIENT", "PAUSE", 300, "ALL")
    # The first call goes alone on the lane's connection, the others as a pipeline.
    calls = (echo(lane, "alone"), echo(lane, "cut 1"), echo(lane, "cut 2"))
    in_flight = asyncio.gather(*calls, return_exceptions=True)
    await asyncio.sleep(0.05)
    await lane.aclose()
    assert [type(e) for e in await in_flight] == [RedisConnectionError] * 3
    assert await echo(lane, "again") == b"again"


async def test_a_caller_cancelled_leaves_the_others_of_its_pipeline_their_replies(
    make_lane: Callable[..., ScriptLane], redis_url: str, redis_client: redis.asyncio.Redis
) -> None:
    lane = make_lane(redis_url)
    assert await echo(lane, "warm") == b"warm"
    # The first call goes alone; the second leads the pipeline of the others, the third
    # rides along: each is cancelled before the pipeline is sent, and after.
    for cancelled in (1, 2):
        for pause in (0.0, 0.1):
            await redis_client.execute_command("CLIENT", "PAUSE", 200, "ALL")
            calls = [asyncio.ensure_future(echo(lane, f"c{i}")) for i in range(5)]
            await asyncio.sleep(pause)
            calls[cancelled].cancel()
            replies = await asyncio.gather(*calls, return_exceptions=True)
            assert isinstance(replies.pop(cancelled), asyncio.CancelledError)
            assert replies == [f"c{i}".encode() for i in range(5) if i != cancelled]


async def test_a_redis_that_is_down_fails_the_call(
    make_lane: Callable[..., ScriptLane], make_redis_server: Callable[..., PrivateRedis]
) -> None:
    server = make_redis_server()
    lane = make_lane(server.url)
    assert await echo(lane, "up") == b"up"
    server.stop()
    with pytest.raises(RedisConnectionError):
        await echo(lane, "down")


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
