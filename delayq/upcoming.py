"""Reading a topic's schedule: the next tasks to fall due, and a histogram of due times.

Both read the schedule's wheel (slots of at most 128 tasks in due order, see
``_layout.lua``) by rank, so their cost depends on what they return, not on how many
tasks the topic holds: a dashboard can show them for a topic of a million tasks.
"""

from __future__ import annotations

import asyncio
import heapq
import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from delayq.bounds import bounded_int
from delayq.duration import Duration, to_millis
from delayq.errors import InvalidInputError
from delayq.redis.keys import check_task_id
from delayq.task import from_millis

if TYPE_CHECKING:
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap

MAX_UPCOMING = 500
"""Most tasks one :func:`upcoming` page returns."""
MAX_WINDOWS = 240
"""Most windows one :func:`timeline` counts."""
EXACT_SLOTS = 16
"""Whole schedule slots a timeline window counts one by one; past that it samples as many."""
_CURSOR = re.compile(r"([0-9]{1,16}):(.+)", re.DOTALL)
_PRIORITY = re.compile(r"p-?[0-9]+")


class UpcomingTask(BaseModel):
    """One scheduled task, as :func:`upcoming` lists it (its body: ``Queue.get``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: Literal["delayed", "ready"]
    due_at: datetime
    enqueued_at: datetime | None
    """``None`` when the stored task is missing or unreadable."""
    attempts: int | None
    """Deliveries so far (a retried task is scheduled again); ``None`` as above."""
    priority: int = 0
    """The priority it was sent with."""


class UpcomingPage(BaseModel):
    """A page of a topic's schedule, in due order."""

    model_config = ConfigDict(frozen=True)

    topic: str
    tasks: list[UpcomingTask]
    cursor: str | None
    """Pass it back for the next page; ``None`` on the last page.  If the task it names has
    left the schedule since, the next page starts after its due time (so tasks due in that
    same millisecond may be skipped)."""


class TimelineWindow(BaseModel):
    """The tasks due in ``(start, end]``."""

    model_config = ConfigDict(frozen=True)

    start: datetime
    end: datetime
    count: int
    estimated: bool
    """True when the window spans more than 16 schedule slots (about 2,000 tasks or more)
    and ``count`` was extrapolated from 16 of them, evenly spaced; else exact."""


class Timeline(BaseModel):
    """How many tasks of a topic fall due when: a histogram over the next windows."""

    model_config = ConfigDict(frozen=True)

    topic: str
    now: datetime
    """Redis's clock when counted; the first window starts here."""
    due: int
    """Tasks already due (ready, waiting for a worker)."""
    due_estimated: bool
    windows: list[TimelineWindow]


def parse_cursor(cursor: str) -> tuple[int, str]:
    """The (due ms, id) a page cursor names.

    Raises:
        InvalidInputError: not a cursor :func:`upcoming` returned.
    """
    found = _CURSOR.fullmatch(cursor) if isinstance(cursor, str) else None
    if found is None:
        raise InvalidInputError("cursor is malformed")
    try:
        return int(found.group(1)), check_task_id(found.group(2))
    except InvalidInputError:
        raise InvalidInputError("cursor is malformed") from None


async def upcoming(
    scripts: Scripts, shard_map: ShardMap, topic: str, *, limit: int, cursor: str | None
) -> UpcomingPage:
    """The next ``limit`` tasks of ``topic`` in due order, after ``cursor`` (see ``Queue.upcoming``);
    of a sharded topic, the first ``limit`` of each shard's page, merged by (due, id)."""
    shards = await shard_map.every(topic)
    bounded_int(limit, "limit", 1, MAX_UPCOMING)
    after = parse_cursor(cursor) if cursor is not None else None
    keys = shards[0]
    if len(shards) == 1:
        now_ms, more, rows = await scripts.upcoming(keys, limit=limit, after=after)
    else:
        pages = await asyncio.gather(
            *(scripts.upcoming(k, limit=limit, after=after) for k in shards)
        )
        now_ms = max(page[0] for page in pages)
        merged = list(heapq.merge(*(page[2] for page in pages), key=lambda r: (r[1], r[0])))
        more = any(page[1] for page in pages) or len(merged) > limit
        rows = merged[:limit]
    tasks = []
    for task_id, due_ms, header in rows:
        parts = header.split(",") if header else []
        if parts and parts[-1][:1] == "g":  # a grouped task's header ends ",g<group>"
            parts.pop()
        priority = parts.pop() if len(parts) == 7 and _PRIORITY.fullmatch(parts[6]) else "p0"
        readable = len(parts) == 6 and all(p.isdigit() for p in parts)
        task = UpcomingTask(
            id=task_id, state="ready" if due_ms <= now_ms else "delayed",
            due_at=from_millis(due_ms),
            enqueued_at=from_millis(int(parts[4])) if readable else None,
            attempts=int(parts[0]) if readable else None, priority=int(priority[1:]),
        )  # fmt: skip
        tasks.append(task)
    last = rows[-1] if rows else None
    next_cursor = f"{last[1]}:{last[0]}" if more and last else None
    return UpcomingPage(topic=keys.topic, tasks=tasks, cursor=next_cursor)


async def timeline(
    scripts: Scripts, shard_map: ShardMap, topic: str, *, window: Duration, windows: int
) -> Timeline:
    """Counts of ``topic``'s tasks by due time (see ``Queue.timeline``), summed over its
    shards (each counted on its own Redis clock reading, the first one's shown)."""
    shards = await shard_map.every(topic)
    width_ms = to_millis(window, name="window", allow_zero=False)
    bounded_int(windows, "windows", 1, MAX_WINDOWS)
    if width_ms * windows > 366 * 86_400_000:
        raise InvalidInputError("window * windows must be at most a year")
    keys = shards[0]
    parts = await asyncio.gather(*(
        scripts.timeline(k, width_ms=width_ms, windows=windows, exact_slots=EXACT_SLOTS)
        for k in shards
    ))  # fmt: skip
    now_ms = parts[0][0]
    due = sum(part[1][0] for part in parts)
    due_estimated = any(part[1][1] for part in parts)
    counts = [
        (sum(c for c, _ in column), any(e for _, e in column))
        for column in zip(*(part[2] for part in parts), strict=True)
    ]
    return Timeline(
        topic=keys.topic, now=from_millis(now_ms), due=due, due_estimated=due_estimated,
        windows=[
            TimelineWindow(
                start=from_millis(now_ms + i * width_ms),
                end=from_millis(now_ms + (i + 1) * width_ms),
                count=count, estimated=estimated,
            )
            for i, (count, estimated) in enumerate(counts)
        ],
    )  # fmt: skip
