"""The connections ``Queue.from_url`` opens: a pool, and a script lane (:mod:`delayq.redis.lane`).

The pool's connections use redis-py's connection classes with two mixins, each for a cost
redis-py's asyncio connection adds to every command it sends (the lane's connection is
opened by the same class, then sends its calls itself):

* :class:`HiredisPacking`.  redis-py's *synchronous* connection packs commands with hiredis
  when it is installed, but its asyncio connection always packs them in pure Python, one
  ``bytes.join`` per argument.  delayq's scripts take many arguments (a send: 15; a
  ``send_many`` batch of 1,000: 6,000), so packing was a fifth of a send's client CPU and
  half of a bulk send's.  ``hiredis.pack_command`` produces the same bytes ~3x faster;
  anything it does not take goes to redis-py's packer.
* :class:`TimerOnlyWhenBlocked`.  With ``socket_timeout`` set (delayq's default: 2 s),
  redis-py applies it to each write with ``asyncio.wait_for``, which on Python 3.11 runs
  the write as a Task of its own.  A write the kernel takes at once cannot block, so it
  needs no timer; only one that must wait for the buffer to drain gets the timeout.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq.redis.lane import ScriptLane, lane_supported

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from redis.typing import EncodableT


class HiredisPacking(AbstractConnection):
    """Mixin: ``pack_command`` through hiredis for plain, utf-8 encoded commands."""

    def pack_command(self, *args: EncodableT) -> list[bytes]:
        command = args[0]
        # A first argument with a space ("SCRIPT LOAD") is split by redis-py, and hiredis
        # always encodes str as strict utf-8: leave both cases to redis-py.
        if (
            isinstance(command, str)
            and " " not in command
            and self.encoder.encoding == "utf-8"
            and self.encoder.encoding_errors == "strict"
        ):
            try:
                return [hiredis.pack_command(args)]  # type: ignore[arg-type]
            except TypeError:
                pass  # e.g. a bool: redis-py raises its own DataError for it
        return super().pack_command(*args)


class TimerOnlyWhenBlocked(AbstractConnection):
    """Mixin: ``socket_timeout`` armed for a write only when the write has to wait.

    Behaves as redis-py's ``send_packed_command`` (a write that times out or fails closes
    the connection and raises redis-py's ``TimeoutError`` or ``ConnectionError``), without
    ``asyncio.wait_for``'s Task per command: one-by-one sends ran ~10% faster without it
    (bare ``EVALSHA``: 7,737 -> 8,687/s; ``send_delayed``: 4,118 -> 4,504/s).  Anything
    else (not connected yet, a health check due, no timeout set) goes to redis-py.
    """

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        writer = self._writer
        timeout = self.socket_timeout
        if (
            not self.is_connected
            or writer is None
            or not timeout
            or (check_health and self.health_check_interval)
            or not isinstance(command, list)
        ):
            return await super().send_packed_command(command, check_health)
        try:
            writer.writelines(command)
            if writer.transport.get_write_buffer_size():
                # The kernel did not take it all: drain() may wait, so the timer is armed.
                async with asyncio.timeout(timeout):
                    await writer.drain()
            else:
                await writer.drain()  # returns at once, or raises for a lost connection
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await self.disconnect(nowait=True)
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
        except BaseException:
            # As redis-py: a write cut short leaves the stream unusable.
            await self.disconnect(nowait=True)
            raise
        return None


_FAST_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def with_fast_paths(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (TCP, TLS or unix socket) with :class:`HiredisPacking` and
    :class:`TimerOnlyWhenBlocked` mixed in."""
    if issubclass(connection_class, (HiredisPacking, TimerOnlyWhenBlocked)):
        return connection_class
    mixed = _FAST_CLASSES.get(connection_class)
    if mixed is None:
        name = connection_class.__name__
        mixed = _FAST_CLASSES[connection_class] = type(
            name, (HiredisPacking, TimerOnlyWhenBlocked, connection_class), {}
        )
    return mixed


def connection_pool(url: str, **options: Any) -> BlockingConnectionPool:
    """A ``BlockingConnectionPool`` for ``url`` whose connections take the fast paths."""
    pool = BlockingConnectionPool.from_url(url, **options)
    pool.connection_class = with_fast_paths(pool.connection_class)
    return pool


SILENCE_TIMEOUT = 2.0
"""delayq's default ``socket_timeout`` and ``socket_connect_timeout``, in seconds: how long a
Redis that accepts connections but does not answer (stopped, or cut off by a partition) may
stay silent before a call fails.  Our scripts run in milliseconds; a Redis silent this long
is stuck, and a caller told so in 2 s can act (a producer re-sends with the same id)."""


def open_clients(
    url: str, *, durable_wait: float = 0.0, **options: Any
) -> tuple[Redis, ScriptLane | None]:
    """The pooled client and the script lane ``Queue.from_url`` uses (no lane for settings
    it cannot honour: RESP3, or an encoding other than strict utf-8).

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
    silence = None  # the lane's: the pool's socket_timeout when the caller set one
    if "socket_timeout" not in options:
        silence = SILENCE_TIMEOUT
        options["socket_timeout"] = SILENCE_TIMEOUT + durable_wait
    options.setdefault("socket_connect_timeout", SILENCE_TIMEOUT)
    options.setdefault("socket_keepalive", True)
    # A blocking pool: a burst of concurrent sends waits for a free connection instead
    # of failing with "Too many connections" past max_connections.
    options.setdefault("max_connections", 100)
    options.setdefault("timeout", 10.0)
    pool = connection_pool(url, **options)
    lane = ScriptLane(pool, silence) if lane_supported(pool) else None
    return Redis.from_pool(pool), lane


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
