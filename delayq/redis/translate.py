"""redis-py's exceptions as delayq's: the one place a Redis failure gets its public name."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from redis import exceptions as rexc

from delayq.errors import (
    DelayqError,
    RedisAuthError,
    RedisCommandError,
    RedisOutOfMemoryError,
    RedisUnavailableError,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

TRANSLATED = (
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ResponseError,
    rexc.ClusterError,
    rexc.SlotNotCoveredError,
    OSError,
)
"""What :func:`translate` maps (auth, ACL and OOM errors are subclasses of these)."""


def translate(exc: Exception) -> DelayqError:
    """The delayq exception for a redis-py (or socket) exception."""
    if isinstance(exc, (rexc.AuthenticationError, rexc.AuthorizationError, rexc.NoPermissionError)):
        return RedisAuthError(f"Redis refused access: {exc}")
    if isinstance(exc, (rexc.ConnectionError, rexc.TimeoutError, rexc.ClusterError, OSError,
                        rexc.SlotNotCoveredError)):  # fmt: skip
        return RedisUnavailableError(f"Redis is unavailable: {exc}")
    if isinstance(exc, rexc.OutOfMemoryError):
        return RedisOutOfMemoryError(f"Redis is out of memory: {exc}")
    text = str(exc)
    if text.startswith(("OOM", "-OOM")):
        return RedisOutOfMemoryError(f"Redis is out of memory: {text}")
    # An ACL denial inside a script comes back as a plain error reply.
    if (
        text.startswith(("NOPERM", "NOAUTH", "WRONGPASS"))
        or "can't run this command" in text
        or "can't access" in text
    ):
        return RedisAuthError(f"Redis refused access: {text}")
    return RedisCommandError(f"Redis replied with an error: {text}")


@asynccontextmanager
async def redis_errors() -> AsyncIterator[None]:
    """Translate redis-py exceptions raised inside the block into delayq's."""
    try:
        yield
    except TRANSLATED as exc:
        raise translate(exc) from exc
