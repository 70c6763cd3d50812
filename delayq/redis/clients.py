"""The clients ``Queue.from_url`` and ``Queue.from_sentinel`` open: one Redis (pool and
script lane, :mod:`delayq.redis.connection`), a Redis Cluster (:mod:`delayq.redis.cluster`),
or the primary named by Redis Sentinel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delayq.redis.cluster import cluster_client
from delayq.redis.connection import SILENCE_TIMEOUT, open_clients, sentinel_client
from delayq.redis.durability import Durability

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis, RedisCluster

    from delayq.redis.lane import ScriptLane

QUEUE_OPTIONS = ("max_body_bytes", "past_tolerance", "durability")
"""Options of ``Queue`` itself; the others go to redis-py."""


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
