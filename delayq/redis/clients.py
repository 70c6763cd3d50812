"""The clients ``Queue.from_url`` and ``Queue.from_sentinel`` open: one Redis (a pool and a
script lane, :mod:`delayq.redis.lane`), a Redis Cluster, or the primary named by Redis
Sentinel, each with delayq's connection defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from delayq.redis.durability import Durability
from delayq.redis.lane import ScriptLane

if TYPE_CHECKING:
    from collections.abc import Sequence

SILENCE_TIMEOUT = 2.0
"""delayq's default ``socket_timeout`` and ``socket_connect_timeout``, in seconds: how long a
Redis that accepts connections but does not answer (stopped, or cut off by a partition) may
stay silent before a call fails.  Our scripts run in milliseconds; a Redis silent this long
is stuck, and a caller told so in 2 s can act (a producer re-sends with the same id)."""

QUEUE_OPTIONS = ("max_body_bytes", "past_tolerance", "durability", "strict_topics")
"""Options of ``Queue`` itself; the others go to redis-py."""


def open_clients(
    url: str, *, durable_wait: float = 0.0, **options: Any
) -> tuple[Redis, ScriptLane]:
    """The pooled client and the script lane ``Queue.from_url`` uses.

    ``options`` go to redis-py; unset ones get delayq's defaults: a call that lost its
    connection is retried once on a fresh one without backoff (a stale connection after a
    Redis restart costs no error, a Redis that is down fails fast), a call that timed out
    is not (a second wait on a frozen Redis would double the time to notice it, and the
    first call may still run); a :data:`SILENCE_TIMEOUT` socket and connect timeout, with
    ``durable_wait`` (the longest ``WAIT`` of a durable send, which runs on the pool)
    added to the pool's; TCP keepalive; and a blocking pool of 100 connections whose
    callers wait up to 10 s for a free one.
    """
    options.setdefault("retry", Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
    own_timeout = "socket_timeout" not in options
    if own_timeout:
        options["socket_timeout"] = SILENCE_TIMEOUT + durable_wait
    options.setdefault("socket_connect_timeout", SILENCE_TIMEOUT)
    if not url.startswith("unix:"):  # (redis-py's unix socket connection takes no keepalive)
        options.setdefault("socket_keepalive", True)
    # A blocking pool: a burst of concurrent sends waits for a free connection instead
    # of failing with "Too many connections" past max_connections.
    options.setdefault("max_connections", 100)
    options.setdefault("timeout", 10.0)
    client = Redis.from_pool(BlockingConnectionPool.from_url(url, **options))
    if own_timeout and durable_wait:
        # The scripts wait for no replica: a Redis silent for SILENCE_TIMEOUT is stuck
        # for them, so they get a pool of their own with that timeout.
        options["socket_timeout"] = SILENCE_TIMEOUT
        lane_client = Redis.from_pool(BlockingConnectionPool.from_url(url, **options))
        return client, ScriptLane(lane_client, owned=True)
    return client, ScriptLane(client)


def cluster_client(url: str, **options: Any) -> RedisCluster:
    """A ``RedisCluster`` for ``url`` (any node's address; ``rediss://`` for TLS, ACL
    credentials in the URL) with delayq's timeouts: :data:`SILENCE_TIMEOUT`-style socket
    and connect timeouts and TCP keepalive unless ``options`` set them."""
    options.setdefault("socket_timeout", SILENCE_TIMEOUT)
    options.setdefault("socket_connect_timeout", SILENCE_TIMEOUT)
    options.setdefault("socket_keepalive", True)
    return RedisCluster.from_url(url, **options)


def sentinel_client(
    sentinels: Sequence[tuple[str, int]],
    service: str,
    sentinel_options: dict[str, Any],
    **options: Any,
) -> Redis:
    """A client for the primary that the ``sentinels`` name ``service``
    (``redis.asyncio.sentinel``): on a failover its connections find the new primary.

    ``options`` (credentials, TLS, timeouts) are for the primary; ``sentinel_options``
    for the Sentinels.  Unset timeouts get :data:`SILENCE_TIMEOUT`, and a call that lost
    its connection is retried once on a fresh one, as for ``open_clients``."""
    options.setdefault("retry", Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
    options.setdefault("socket_timeout", SILENCE_TIMEOUT)
    options.setdefault("socket_connect_timeout", SILENCE_TIMEOUT)
    options.setdefault("socket_keepalive", True)
    sentinel_options.setdefault("socket_timeout", SILENCE_TIMEOUT)
    sentinel_options.setdefault("socket_connect_timeout", SILENCE_TIMEOUT)
    sentinel = Sentinel(list(sentinels), sentinel_kwargs=sentinel_options, **options)  # type: ignore[no-untyped-call]
    client: Redis = sentinel.master_for(service, redis_class=Redis)
    return client


def _split(options: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Pop ``Queue``'s own options from ``options``; also a durable send's wait in s."""
    own = {k: options.pop(k) for k in QUEUE_OPTIONS if k in options}
    durability = own.get("durability")
    return own, durability.timeout_ms / 1000 if isinstance(durability, Durability) else 0.0


def _with_wait(options: dict[str, Any], wait: float) -> dict[str, Any]:
    """``options`` whose default socket timeout also covers a durable send's wait."""
    if "socket_timeout" not in options:
        options["socket_timeout"] = SILENCE_TIMEOUT + wait
    return options


def open_url(
    url: str, *, cluster: bool, options: dict[str, Any]
) -> tuple[Redis | RedisCluster, ScriptLane | None, dict[str, Any]]:
    """The client (and lane, for one Redis) for ``url``, and the ``Queue`` options."""
    own, wait = _split(options)
    if cluster:
        return cluster_client(url, **_with_wait(options, wait)), None, own
    client, lane = open_clients(url, durable_wait=wait, **options)
    return client, lane, own


def open_sentinel(
    sentinels: Sequence[tuple[str, int]],
    service: str,
    sentinel_options: dict[str, Any],
    options: dict[str, Any],
) -> tuple[Redis, dict[str, Any]]:
    """The client of the primary the Sentinels name ``service``, and the ``Queue`` options."""
    own, wait = _split(options)
    return sentinel_client(sentinels, service, sentinel_options, **_with_wait(options, wait)), own


async def close_client(client: Redis) -> None:
    """Close ``client`` and, for a Sentinel-managed one, its connections to the Sentinels."""
    await client.aclose()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()
