"""The connections ``Queue.from_url`` opens: a pool, and one connection held for scripts.

Both use redis-py's connection classes with :class:`HiredisPacking` mixed in.  redis-py's
*synchronous* connection packs commands with hiredis when it is installed, but its asyncio
connection always packs them in pure Python, one ``bytes.join`` per argument.  delayq's
scripts take many arguments (a send: 15; a ``send_many`` batch of 1,000: 6,000), so packing
was a fifth of a send's client CPU and half of a bulk send's.  ``hiredis.pack_command``
produces the same bytes ~3x faster; anything it does not take goes to redis-py's packer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import hiredis
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

if TYPE_CHECKING:
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


_PACKING_CLASSES: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def with_hiredis_packing(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (TCP, TLS or unix socket) with :class:`HiredisPacking` mixed in."""
    if issubclass(connection_class, HiredisPacking):
        return connection_class
    mixed = _PACKING_CLASSES.get(connection_class)
    if mixed is None:
        name = connection_class.__name__
        mixed = _PACKING_CLASSES[connection_class] = type(
            name, (HiredisPacking, connection_class), {}
        )
    return mixed


def connection_pool(url: str, **options: Any) -> BlockingConnectionPool:
    """A ``BlockingConnectionPool`` for ``url`` whose connections pack with hiredis."""
    pool = BlockingConnectionPool.from_url(url, **options)
    pool.connection_class = with_hiredis_packing(pool.connection_class)
    return pool


def dedicated_client(pool: ConnectionPool) -> Redis:
    """A client holding one connection of its own, opened with ``pool``'s settings.

    Its connection comes from a pool of one, not from ``pool``: holding one of ``pool``'s
    would leave a small ``max_connections`` short for the calls that wait on it.
    """
    own = ConnectionPool(
        connection_class=pool.connection_class, max_connections=1, **pool.connection_kwargs
    )
    client = Redis(connection_pool=own, single_connection_client=True)
    client.auto_close_connection_pool = True  # aclose() disconnects it, as from_pool does
    return client


def open_clients(url: str, **options: Any) -> tuple[Redis, Redis]:
    """The pooled client and the held-connection client ``Queue.from_url`` uses.

    ``options`` go to redis-py; unset ones get delayq's defaults: one retry on a fresh
    connection without backoff (a stale connection after a Redis restart costs no error,
    a Redis that is down fails fast), a 5 s connect timeout, TCP keepalive, and a blocking
    pool of 100 connections whose callers wait up to 10 s for a free one.
    """
    options.setdefault("retry", Retry(NoBackoff(), 1))
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("socket_keepalive", True)
    # A blocking pool: a burst of concurrent sends waits for a free connection instead
    # of failing with "Too many connections" past max_connections.
    options.setdefault("max_connections", 100)
    options.setdefault("timeout", 10.0)
    pool = connection_pool(url, **options)
    return Redis.from_pool(pool), dedicated_client(pool)
