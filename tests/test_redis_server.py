"""Tests of the PrivateRedis helper itself (real servers, a few seconds in all)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from delayq.testing import PrivateRedis, PrivateRedisError, free_port


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_start_ping_and_close() -> None:
    with PrivateRedis() as server:
        assert server.running
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        with server.client() as client:
            assert client.ping()
            assert client.config_get("save") == {"save": ""}
        directory = server.dir
    assert not server.running
    assert not directory.exists()


def test_session_fixtures(redis_server: PrivateRedis, redis_url: str, queue_name: str) -> None:
    assert redis_url == redis_server.url
    assert queue_name.startswith("t") and len(queue_name) == 11
    with redis_server.client() as client:
        assert client.ping()


async def test_async_client_fixture(redis_client: redis.asyncio.Redis, queue_name: str) -> None:
    await redis_client.set(queue_name, "v", px=10_000)
    assert await redis_client.get(queue_name) == b"v"


def test_aof_survives_kill_and_restart(make_redis_server: Callable[..., PrivateRedis]) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")
    with server.client() as client:
        client.set("k", "durable")
    old_pid = server.pid
    server.kill()  # SIGKILL: no shutdown hook gets to flush anything
    assert not server.running
    server.restart()
    assert server.pid != old_pid
    with server.client() as client:
        assert client.get("k") == b"durable"


def test_without_aof_restart_loses_data(make_redis_server: Callable[..., PrivateRedis]) -> None:
    server = make_redis_server()
    with server.client() as client:
        client.set("k", "volatile")
    server.kill(signal.SIGTERM)
    server.restart()
    with server.client() as client:
        assert client.get("k") is None


def test_password_required(make_redis_server: Callable[..., PrivateRedis]) -> None:
    password = "p@ss:w/rd"  # characters that must be quoted in the URL
    server = make_redis_server(password=password)
    assert "p%40ss%3Aw%2Frd" in server.url
    with (
        # No retries: redis-py 8 otherwise retries AuthenticationError (a
        # ConnectionError subclass) with backoff, which only costs seconds here.
        redis.Redis(host="127.0.0.1", port=server.port, retry=Retry(NoBackoff(), 0)) as anonymous,
        pytest.raises(redis.AuthenticationError),
    ):
        anonymous.ping()
    with server.client() as client:
        assert client.ping()


def test_pause_resume(make_redis_server: Callable[..., PrivateRedis]) -> None:
    server = make_redis_server()
    with server.client(socket_timeout=0.3) as client:
        assert client.ping()
        server.pause()
        # The kernel still accepts the TCP connection; the reply never comes.
        with pytest.raises(redis.TimeoutError):
            client.ping()
        server.resume()
    with server.client() as client:
        assert client.ping()


def test_stop_while_paused(make_redis_server: Callable[..., PrivateRedis]) -> None:
    server = make_redis_server()
    server.pause()
    server.stop()  # must not hang on a SIGSTOPped process
    assert not server.running


def test_extra_args(make_redis_server: Callable[..., PrivateRedis]) -> None:
    server = make_redis_server(
        extra_args=["--maxmemory", "10mb", "--maxmemory-policy", "noeviction"]
    )
    with server.client() as client:
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}


def test_bad_config_reports_log_tail() -> None:
    server = PrivateRedis(extra_args=["--no-such-directive", "1"])
    try:
        with pytest.raises(PrivateRedisError, match="no-such-directive"):
            server.start()
        assert not server.running
    finally:
        server.close()
