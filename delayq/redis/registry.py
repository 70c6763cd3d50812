"""The registry of live workers in Redis: heartbeats, the live entries, consumer counts.

Three scripts (``heartbeat.lua``, ``workers.lua``, ``consumers.lua``) over the keys of
:class:`~delayq.redis.keys.RegistryKeys`, all in the queue's own hash tag.  Every time is
Redis's: a worker's entry expires three of its heartbeat intervals after its last beat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from delayq.redis.cluster import after_failure, is_cluster
from delayq.redis.keys import RegistryKeys
from delayq.redis.source import lua_source, test_clock_on, watch
from delayq.redis.translate import TRANSLATED

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

SCHEDULE_SEPARATOR = "\n"
"""Between the topic and the fingerprint in a schedule field (a topic holds no whitespace)."""


def schedule_field(topic: str, fingerprint: str) -> str:
    """The ``schedules`` hash field of ``topic`` run with the schedule ``fingerprint``."""
    return f"{topic}{SCHEDULE_SEPARATOR}{fingerprint}"


@dataclass(frozen=True, slots=True)
class ScheduleSeen:
    """When a live worker last ran a periodic schedule (``seen_ms`` -1: not recorded), the
    heartbeat interval of that worker, and the schedule's description."""

    seen_ms: int
    interval_ms: int
    description: str | None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Registry:
    """Runs the registry's scripts for one queue on one client.

    Args:
        client: the queue's client (a cluster client routes every call to the one slot).
        queue: the queue's name (already validated).
    """

    def __init__(self, client: Redis, queue: str) -> None:
        self.keys = RegistryKeys.build(queue)
        self._client = client
        self._cluster = client if is_cluster(client) else None
        self._scripts: dict[str, AsyncScript] = {}
        self.load()
        watch(self)

    def load(self) -> None:
        """Register the scripts (the test clock's copies when a test clock is on)."""
        self._scripts = {
            name: self._client.register_script(lua_source(name, test_clock=test_clock_on()))
            for name in ("heartbeat", "workers", "consumers")
        }

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        script = self._scripts[name]
        try:
            return await script(keys=keys, args=args)
        except (*TRANSLATED, AttributeError) as exc:
            return await after_failure(self._cluster, lambda: script(keys=keys, args=args), exc)

    def _beat_keys(self, topics: Sequence[str]) -> list[str]:
        k = self.keys
        return [k.workers, k.info, k.schedules, k.clock, *(k.consumers(t) for t in topics)]

    async def beat(
        self,
        worker_id: str,
        *,
        interval_ms: int,
        info: str,
        topics: Sequence[str],
        started_ms: int,
        schedules: Sequence[tuple[str, str]] = (),
    ) -> tuple[int, int]:
        """Record a heartbeat of ``worker_id`` (``info``: its JSON; ``schedules``: (field,
        description) of the periodic schedules it runs).  Returns (now, started) ms."""
        args: list[str | int] = ["beat", worker_id, interval_ms, info, started_ms]
        args += (part for pair in schedules for part in pair)
        now, started = await self._run("heartbeat", self._beat_keys(topics), args)
        return int(now), int(started)

    async def leave(self, worker_id: str, topics: Sequence[str]) -> None:
        """Remove ``worker_id``'s entry at once (a clean stop)."""
        await self._run("heartbeat", self._beat_keys(topics), ["leave", worker_id, 0, "", 0])

    async def entries(self) -> tuple[int, list[tuple[int, int, str]]]:
        """(now ms, [(started ms, last seen ms, info JSON), ...]) of the live workers."""
        k = self.keys
        reply = await self._run("workers", (k.workers, k.info, k.clock), ())
        rows = []
        for raw in reply[1:]:
            started, seen, info = _text(raw).split(",", 2)
            rows.append((int(started), int(seen), info))
        return int(reply[0]), rows

    async def consumers(
        self, topics: Sequence[str], schedules: Sequence[str] = ()
    ) -> tuple[int, list[int], list[ScheduleSeen]]:
        """(now ms, live consumers of each of ``topics``, when each of the ``schedules``
        fields was last run by a live worker)."""
        k = self.keys
        keys = [k.schedules, k.clock, *(k.consumers(t) for t in topics)]
        now, counts, seen = await self._run("consumers", keys, list(schedules))
        runs = [
            ScheduleSeen(
                int(seen[i]), int(seen[i + 1]), _text(seen[i + 2]) if seen[i + 2] else None
            )
            for i in range(0, len(seen), 3)
        ]
        return int(now), [int(c) for c in counts], runs
