"""Shared fixtures: real Redis servers (never mocks).

- ``redis_server``      session-wide private server (no persistence)
- ``redis_url``         its URL
- ``redis_client``      a ``redis.asyncio.Redis`` on it, closed after the test
- ``queue_name``        a unique name per test, so tests share the server safely
- ``make_redis_server`` factory for extra servers a test may kill/restart/pause

delayq-specific fixtures live in ``tests/fixtures_delayq.py``, loaded below when
that file exists.  This file must not import delayq.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio

from delayq.testing import PrivateRedis

# Loaded only if present, so this conftest works before (and without) it.
pytest_plugins = (
    ["tests.fixtures_delayq"] if importlib.util.find_spec("tests.fixtures_delayq") else []
)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[PrivateRedis]:
    """One private redis-server for the whole session; tests must not kill it
    (use ``make_redis_server`` for that)."""
    with PrivateRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: PrivateRedis) -> str:
    return redis_server.url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def queue_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_redis_server() -> Iterator[Callable[..., PrivateRedis]]:
    """``make_redis_server(appendonly=True, ...)`` -> a started PrivateRedis.

    Takes the keyword options of :class:`PrivateRedis`.  Every server made is
    stopped and its directory removed at teardown, whatever the test did to it.
    """
    servers: list[PrivateRedis] = []

    def make(**options: Any) -> PrivateRedis:
        server = PrivateRedis(**options)
        servers.append(server)  # before start(), so a failed start is cleaned up too
        return server.start()

    make.servers = servers  # type: ignore[attr-defined]  # for checks at teardown
    yield make
    for server in servers:
        server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """One private Redis Cluster (3 masters + 3 replicas) for the session: starting one
    costs seconds.  Tests use unique queue names; keys are flushed after each test by
    ``cluster``."""
    from tests.redis_cluster import RedisCluster

    with RedisCluster() as cluster:
        yield cluster


@pytest.fixture
def cluster(redis_cluster: Any) -> Iterator[Any]:
    """The session's cluster, its keys deleted after the test."""
    yield redis_cluster
    redis_cluster.flush()
