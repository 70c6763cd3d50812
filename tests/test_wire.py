"""The script lane's own connection (``delayq.redis.wire``): which settings it serves, and
that it greets Redis, authenticates and fails as redis-py's connection does, against real
Redis servers."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.connection import Connection
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import AuthenticationError
from redis.maint_notifications import MaintNotificationsConfig

from delayq.redis.clients import open_clients
from delayq.redis.lane import ScriptLane
from delayq.redis.wire import wire_settings
from delayq.testing import PrivateRedis

ECHO = "return ARGV[1]"
ECHO_SHA = hashlib.sha1(ECHO.encode()).hexdigest()
FAIL = "return redis.error_reply(ARGV[1])"
FAIL_SHA = hashlib.sha1(FAIL.encode()).hexdigest()


class OwnConnection(Connection):
    """A user's connection class: the wire cannot know what it changes."""


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redis://127.0.0.1:7000/0", {}),
        ("redis://app:secret@127.0.0.1:7000/3", {"client_name": "shop"}),
        ("redis://:secret@127.0.0.1:7000", {"decode_responses": True}),
        ("redis://127.0.0.1:7000?protocol=2", {}),
        ("unix:///tmp/redis.sock?db=2", {}),
        ("unix://app:secret@/tmp/redis.sock", {}),
    ],
)
def test_the_wire_serves_plain_tcp_and_unix_sockets(url: str, options: dict[str, Any]) -> None:
    assert wire_settings(BlockingConnectionPool.from_url(url, **options)) is not None


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("rediss://127.0.0.1:7000", {}),
        ("redis://127.0.0.1:7000", {"credential_provider": UsernamePasswordCredentialProvider()}),
        ("redis://127.0.0.1:7000", {"health_check_interval": 5}),
        ("redis://127.0.0.1:7000", {"encoding": "latin-1"}),
        ("redis://127.0.0.1:7000", {"encoding_errors": "replace"}),
        ("redis://127.0.0.1:7000", {"connection_class": OwnConnection}),
        ("redis://127.0.0.1:7000", {"redis_connect_func": print}),
        ("redis://app@127.0.0.1:7000", {}),  # a user without a password
        (
            "redis://127.0.0.1:7000",
            {"maint_notifications_config": MaintNotificationsConfig(enabled=True)},
        ),
    ],
)
def test_anything_else_keeps_redis_pys_connection(url: str, options: dict[str, Any]) -> None:
    assert wire_settings(BlockingConnectionPool.from_url(url, **options)) is None


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory for a unix socket (its path may hold at most ~100 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dq-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def lanes() -> AsyncIterator[Callable[..., tuple[redis.asyncio.Redis, ScriptLane]]]:
    """``lanes(url, **options)`` -> the client and lane ``Queue.from_url`` would open."""
    made: list[tuple[redis.asyncio.Redis, ScriptLane]] = []

    def make(url: str, **options: Any) -> tuple[redis.asyncio.Redis, ScriptLane]:
        client, lane = open_clients(url, **options)
        made.append((client, lane))
        return client, lane

    yield make
    for client, lane in made:
        await lane.aclose()
        await client.aclose()


def with_user(server: PrivateRedis) -> PrivateRedis:
    """``server`` with the ACL user ``app`` (password ``secret``)."""
    admin = server.client()
    try:
        admin.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all")
    finally:
        admin.close()
    return server


@pytest.mark.parametrize("over", ["tcp", "unix"])
@pytest.mark.parametrize("protocol", [2, 3])
async def test_the_lanes_connection_is_greeted_as_redis_pys(
    make_redis_server: Callable[..., PrivateRedis],
    lanes: Callable[..., tuple[redis.asyncio.Redis, ScriptLane]],
    socket_dir: Path,
    queue_name: str,
    over: str,
    protocol: int,
) -> None:
    sock = socket_dir / "redis.sock"
    server = with_user(make_redis_server(extra_args=["--unixsocket", str(sock)]))
    if over == "unix":
        where = f"unix://app:secret@{sock}?db=3"
    else:
        where = f"redis://app:secret@127.0.0.1:{server.port}/3"
    client, lane = lanes(where, client_name=queue_name, protocol=protocol)
    assert await lane.evalsha(ECHO_SHA, ECHO, [], ["hi"]) == b"hi"
    assert await client.ping()  # a pooled connection of redis-py's
    admin = server.client()
    try:
        named = [c for c in admin.client_list() if c["name"] == queue_name]
    finally:
        admin.close()
    assert sorted(c["cmd"] for c in named) == ["evalsha", "ping"]
    # (lib-name and lib-ver: Redis 7.2 and later)
    greeted = {(c["user"], c["db"], c["resp"], c.get("lib-name"), c.get("lib-ver")) for c in named}
    assert len(greeted) == 1, named  # the lane's connection and redis-py's alike
    assert greeted.pop()[:3] == ("app", "3", str(protocol))


async def test_wrong_credentials_fail_the_lane_as_they_fail_redis_py(
    make_redis_server: Callable[..., PrivateRedis],
    lanes: Callable[..., tuple[redis.asyncio.Redis, ScriptLane]],
) -> None:
    server = with_user(make_redis_server())
    client, lane = lanes(f"redis://app:wrong@127.0.0.1:{server.port}")
    with pytest.raises(AuthenticationError) as by_lane:
        await lane.evalsha(ECHO_SHA, ECHO, [], ["hi"])
    with pytest.raises(AuthenticationError) as by_redis_py:
        await client.ping()
    assert str(by_lane.value) == str(by_redis_py.value)


@pytest.mark.parametrize(
    "reply",
    [
        "OOM command not allowed",
        "NOPERM no access",
        "READONLY a replica",
        "LOADING the dataset",
        "EXECABORT discarded",
        "WRONGPASS invalid",
        "NOAUTH required",
        "ERR invalid password",
        "ERR max number of clients reached",
        "ERR plain failure",
        "ODD no known code",
    ],
)
async def test_an_error_reply_is_what_redis_py_raises(
    lanes: Callable[..., tuple[redis.asyncio.Redis, ScriptLane]], redis_url: str, reply: str
) -> None:
    client, lane = lanes(redis_url)
    with pytest.raises(Exception) as by_lane:
        await lane.evalsha(FAIL_SHA, FAIL, [], [reply])
    with pytest.raises(Exception) as by_redis_py:
        await client.evalsha(FAIL_SHA, 0, reply)  # type: ignore[no-untyped-call]
    assert (type(by_lane.value), str(by_lane.value)) == (
        type(by_redis_py.value),
        str(by_redis_py.value),
    )
    assert await lane.evalsha(ECHO_SHA, ECHO, [], ["after"]) == b"after"


async def test_a_lone_caller_cancelled_leaves_the_connection_the_next_reply(
    lanes: Callable[..., tuple[redis.asyncio.Redis, ScriptLane]],
    redis_url: str,
    redis_client: redis.asyncio.Redis,
) -> None:
    _, lane = lanes(redis_url)
    assert await lane.evalsha(ECHO_SHA, ECHO, [], ["warm"]) == b"warm"
    opened = int((await redis_client.info("stats"))["total_connections_received"])
    await redis_client.execute_command("CLIENT", "PAUSE", 200, "ALL")
    lost = asyncio.ensure_future(lane.evalsha(ECHO_SHA, ECHO, [], ["lost"]))
    await asyncio.sleep(0.05)  # its command is written; Redis holds its reply
    lost.cancel()
    with pytest.raises(asyncio.CancelledError):
        await lost
    # The next lone call gets its own reply, on the same connection.
    assert await lane.evalsha(ECHO_SHA, ECHO, [], ["next"]) == b"next"
    assert int((await redis_client.info("stats"))["total_connections_received"]) == opened


def test_a_send_on_uvloop_runs_on_the_wire(redis_server: PrivateRedis, queue_name: str) -> None:
    """uvicorn serves delayq's HTTP API on uvloop, whose transports are not asyncio.Transport
    subclasses: the wire takes them all the same."""
    uvloop = pytest.importorskip("uvloop")
    from delayq import Queue

    async def send() -> str:
        async with Queue.from_url(redis_server.url, name=queue_name) as queue:
            return await queue.send_delayed("t", {"n": 1}, 60, task_id="on-uvloop")

    assert uvloop.run(send()) == "on-uvloop"
