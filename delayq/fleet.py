"""Who is consuming: the live workers of a queue, as :meth:`delayq.Queue.workers` lists them.

Every :class:`~delayq.worker.Worker`, and every process serving HTTP consumers
(``delayq web``), keeps an entry in the queue's registry in Redis, renewed by a heartbeat
(:mod:`delayq.worker.heartbeat`).  An entry leaves at once on a clean stop and expires
three heartbeat intervals after its last beat (a worker killed or frozen).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from delayq.task import from_millis

if TYPE_CHECKING:
    from delayq.redis.registry import Registry


class WorkerInfo(BaseModel):
    """One live worker (or HTTP-serving process) of a queue, as its last heartbeat told it."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Unique per process run."""
    host: str
    """The host name the process runs on."""
    pid: int
    """Its process id."""
    kind: Literal["worker", "http"]
    """``"worker"`` for a :class:`~delayq.worker.Worker`, ``"http"`` for ``delayq web``."""
    started_at: datetime
    """Its first heartbeat, on Redis's clock (aware UTC)."""
    last_seen: datetime
    """Its latest heartbeat, on Redis's clock (aware UTC)."""
    topics: list[str]
    """The topics it consumes."""
    concurrency: int
    """Most handlers it runs at once."""
    running: int
    """Handlers in flight at its latest heartbeat."""
    version: str
    """The version of delayq it runs."""


def parse_entry(started_ms: int, seen_ms: int, info: str) -> WorkerInfo | None:
    """A registry entry as a :class:`WorkerInfo`, or None for one that does not parse
    (written by another version)."""
    try:
        fields = json.loads(info)
        if not isinstance(fields, dict):
            return None
        fields.update(started_at=from_millis(started_ms), last_seen=from_millis(seen_ms))
        return WorkerInfo.model_validate(fields)
    except ValueError:
        return None


async def schedules_run(registry: Registry) -> set[str]:
    """The schedule fields (:func:`~delayq.redis.registry.schedule_field`) that live workers
    run: an entry lists them beside its :class:`WorkerInfo` fields."""
    _now, rows = await registry.entries()
    run: set[str] = set()
    for _started, _seen, info in rows:
        try:
            fields = json.loads(info).get("schedules", [])
        except (ValueError, AttributeError):
            continue
        run.update(f for f in fields if isinstance(f, str))
    return run


_ALL = TypeAdapter(list[WorkerInfo])


def parse_entries(rows: list[tuple[int, int, str]]) -> list[WorkerInfo]:
    """Registry entries as :class:`WorkerInfo` objects, in one validation of one JSON array
    (a fleet of hundreds parses in a fraction of a millisecond); if any entry does not
    parse, entry by entry, skipping those."""
    parts = [
        f'{{"started_at":{started / 1000},"last_seen":{seen / 1000},{info[1:]}'
        for started, seen, info in rows
        if info.startswith("{") and len(info) > 2
    ]
    try:
        if len(parts) == len(rows):
            return _ALL.validate_json("[" + ",".join(parts) + "]")
    except ValueError:
        pass
    return [w for w in (parse_entry(*row) for row in rows) if w is not None]


async def live_workers(registry: Registry) -> list[WorkerInfo]:
    """The live workers in ``registry``, sorted by host, pid and id."""
    _now, rows = await registry.entries()
    return sorted(parse_entries(rows), key=lambda w: (w.host, w.pid, w.id))
