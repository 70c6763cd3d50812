"""A process's heartbeat in the queue's registry of live workers (:mod:`delayq.fleet`).

One script call per interval whatever the load: the entry carries the handlers in flight
at that moment, read from the worker, never counted per task.  The first beat is sent
at start, a failed one is retried within a quarter interval (so that after a Redis restart
a live worker is listed again within one interval), and a clean stop removes the entry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from importlib import metadata
from typing import TYPE_CHECKING, Literal

from delayq.cancellation import first_of
from delayq.duration import Duration, to_seconds
from delayq.errors import DelayqError, InvalidInputError, RedisUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from delayq.pacing import Outage
    from delayq.redis.registry import Registry

log = logging.getLogger("delayq.worker")

DEFAULT_INTERVAL = 5.0
"""Seconds between two heartbeats unless told otherwise."""
MIN_INTERVAL = 0.05
"""Shortest interval accepted: each beat is a script call, and below this it is noise."""


def _version() -> str:
    # The installed distribution's version (the package's __init__ sits above this layer).
    try:
        return metadata.version("delayq")
    except metadata.PackageNotFoundError:
        return "unknown"


def heartbeat_seconds(value: Duration) -> float:
    """``value`` as a heartbeat interval in seconds (``InvalidInputError`` naming
    ``heartbeat`` when it is shorter than :data:`MIN_INTERVAL`)."""
    seconds = to_seconds(value, name="heartbeat")
    if seconds < MIN_INTERVAL:
        raise InvalidInputError(f"heartbeat must be at least {MIN_INTERVAL}s, got {seconds}s")
    return seconds


class Heartbeat:
    """Keeps one process's entry in the registry while it runs.

    Args:
        registry: the queue's registry.
        kind: ``"worker"`` or ``"http"``.
        topics: what it consumes.
        concurrency: most handlers it runs at once.
        running: reads the handlers in flight.
        interval: seconds between beats.
        schedules: (schedule field, description) of the periodic schedules it runs.
        outage: a worker's, told of a beat that could not reach Redis (without one, the
            first failure in a row is logged here).
    """

    def __init__(
        self, registry: Registry, *, kind: Literal["worker", "http"], topics: Sequence[str],
        concurrency: int, running: Callable[[], int], interval: float = DEFAULT_INTERVAL,
        schedules: Sequence[tuple[str, str]] = (), outage: Outage | None = None,
    ) -> None:  # fmt: skip
        self.registry = registry
        self.interval = interval
        self.id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._topics = list(topics)
        self._schedules = list(schedules)
        self._running = running
        self._fixed = {
            "id": self.id, "host": socket.gethostname(), "pid": os.getpid(), "kind": kind,
            "topics": self._topics, "concurrency": concurrency, "version": _version(),
            "schedules": [field for field, _ in self._schedules],
        }  # fmt: skip
        self._started_ms = 0
        self._healthy_since: float | None = None
        self._warned = False
        self._outage = outage

    def healthy_for(self) -> float:
        """Seconds (this process's monotonic clock) since beats last started succeeding
        in a row; 0 while they fail or before the first."""
        if self._healthy_since is None:
            return 0.0
        return asyncio.get_running_loop().time() - self._healthy_since

    async def beat(self) -> None:
        """Send one heartbeat."""
        info = json.dumps({**self._fixed, "running": self._running()}, separators=(",", ":"))
        _now, self._started_ms = await self.registry.beat(
            self.id, interval_ms=round(self.interval * 1000), info=info, topics=self._topics,
            started_ms=self._started_ms, schedules=self._schedules,
        )  # fmt: skip

    async def run(self, stopping: asyncio.Event) -> None:
        """Beat every interval until ``stopping`` is set, then leave the registry."""
        loop = asyncio.get_running_loop()
        while not stopping.is_set():
            try:
                await self.beat()
            except DelayqError as exc:
                self._healthy_since = None
                if self._outage is not None and isinstance(exc, RedisUnavailableError):
                    self._outage.failed("the registry heartbeat", exc)
                elif not self._warned:
                    self._warned = True
                    log.warning("heartbeat failed (%s); retrying", exc)
                pause = self.interval / 4
            else:
                if self._healthy_since is None:
                    self._healthy_since = loop.time()
                self._warned = False
                if self._outage is not None:
                    self._outage.reachable()
                pause = self.interval
            await first_of(stopping, within=pause)
        await self.leave()

    async def leave(self) -> None:
        """Remove the entry now (a failure is only logged: it then expires)."""
        try:
            await self.registry.leave(self.id, self._topics)
        except DelayqError as exc:
            log.warning("could not remove this worker from the registry (%s)", exc)
