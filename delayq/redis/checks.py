"""Start-up checks of the Redis server a worker is about to trust with tasks."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from delayq.errors import RedisUnavailableError, UnsupportedRedisError
from delayq.pacing import Outage, RetryPacing
from delayq.redis.translate import redis_errors

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("delayq.worker")

# Script shebangs and flags (`#!lua flags=no-writes`) and ZRANGE ... BYSCORE need 7.0.
MIN_REDIS_VERSION = (7, 0)


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` -> ``(7, 0, 15)``; unparsable parts count as 0."""
    return tuple(int(part) if part.isdigit() else 0 for part in text.split(".")[:3])


async def check_server(redis: Redis) -> str:
    """Fail on a Redis that is too old; warn about an eviction policy that can delete tasks.

    Returns:
        The server's version string.

    Raises:
        UnsupportedRedisError: the server is older than :data:`MIN_REDIS_VERSION`.
        RedisUnavailableError: Redis cannot be reached.
    """
    async with redis_errors():
        server = await redis.info("server")
        memory = await redis.info("memory")
    version = str(server.get("redis_version", "0"))
    if parse_version(version) < MIN_REDIS_VERSION:
        wanted = ".".join(map(str, MIN_REDIS_VERSION))
        raise UnsupportedRedisError(f"delayq needs Redis >= {wanted}; this server is {version}")
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        log.warning(
            "Redis maxmemory-policy is %r: when Redis fills up it will silently delete tasks. "
            "Set `maxmemory-policy noeviction` so that sends fail loudly instead.",
            policy,
        )
    return version


async def wait_for_server(redis: Redis, outage: Outage | None = None) -> str:
    """:func:`check_server`, retried (with :class:`~delayq.pacing.RetryPacing`, up to 2 s
    apart) while Redis cannot be reached: a worker started before its Redis waits for it,
    and tells ``outage`` (default: one of its own) of the wait.

    Raises:
        UnsupportedRedisError: the server is older than :data:`MIN_REDIS_VERSION`.
    """
    pacing = RetryPacing(first=0.1, cap=2.0)
    outage = outage or Outage(log)
    while True:
        try:
            version = await check_server(redis)
        except UnsupportedRedisError:
            raise
        except RedisUnavailableError as exc:
            outage.failed("the start-up check", exc)
            await asyncio.sleep(pacing.failed())
        else:
            outage.reachable()
            return version
