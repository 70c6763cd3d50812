"""Reading a topic's history (its last finished tasks) and its rolling activity.

``queue.history(topic)`` lists finished tasks newest first; ``queue.history.activity(topic)``
gives the last hour of throughput and lateness in 10 s windows.  Both exist for topics
registered with ``history=N`` (docs/observability.md); the records are written by the
scripts that finish tasks (``_history.lua``), the windows by the workers
(``delayq/worker/rollup.py``).
"""

from __future__ import annotations

import heapq
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from delayq.bounds import bounded_int
from delayq.errors import InvalidInputError
from delayq.headers import split_headers
from delayq.redis.translate import redis_errors
from delayq.task import from_millis
from delayq.worker.rollup import COUNTED, FIELDS, LATENESS_BOUNDS_MS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis

    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts

Outcome = Literal["acked", "dead", "cancelled"]
WINDOW_SECONDS = 10
WINDOWS = 360


class HistoryRecord(BaseModel):
    """One finished task, as its topic's history keeps it."""

    model_config = ConfigDict(frozen=True)

    seq: int
    """The record's number in its topic, or in its shard of a sharded topic (increasing;
    unique there: with the shard, an archive's key)."""
    id: str
    topic: str
    outcome: Outcome
    attempts: int
    """Deliveries it took (0 for a task cancelled before it ran)."""
    body: Any
    headers: dict[str, str] = Field(default_factory=dict)
    error: str | None
    """The error it was dead-lettered with."""
    enqueued_at: datetime
    due_at: datetime
    started_at: datetime | None
    """When its last handler started (Redis's clock; None if no handler ran)."""
    finished_at: datetime
    """When it was acked, dead-lettered or cancelled (for an ack: when its handler returned)."""
    lateness: float | None
    """Seconds from due to the last handler's start, None if no handler ran."""


def _millis(raw: bytes) -> int | None:
    return int(raw) if raw else None


def parse_record(topic: str, seq: int, task_id: str, raw: bytes) -> HistoryRecord:
    """A :class:`HistoryRecord` from one stored record (``_history.lua``)."""
    outcome, attempts, _token, _max, _ttr, enqueued, due, rest = raw.split(b",", 7)
    if rest[:1] == b"p":  # the header of a task with a priority other than 0 ends ",p<n>"
        rest = rest.split(b",", 1)[1]
    if rest[:1] == b"g":  # then a grouped task's ",g<group>" (a group holds no comma)
        rest = rest.split(b",", 1)[1]
    started, ended, size, rest = rest.split(b",", 3)
    length = int(size)
    error, field = rest[:length].decode(errors="replace"), rest[length:]
    headers, data = split_headers(field)
    try:
        body = pydantic_core.from_json(data)
    except ValueError:
        body = data.decode(errors="replace")
    started_ms, due_ms = _millis(started), int(due)
    return HistoryRecord(
        seq=seq, id=task_id, topic=topic, outcome=outcome.decode(), attempts=int(attempts),
        body=body, headers=dict(headers), error=error or None,
        enqueued_at=from_millis(int(enqueued)), due_at=from_millis(due_ms),
        started_at=from_millis(started_ms) if started_ms is not None else None,
        finished_at=from_millis(int(ended)),
        lateness=(started_ms - due_ms) / 1000 if started_ms is not None else None,
    )  # fmt: skip


def parse_entry(topic: str, entry_id: bytes | str, fields: dict[Any, Any]) -> list[HistoryRecord]:
    """The records of one stream entry (one script call's), in the order they were written."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    first = int(text.split("-")[0])
    return [
        parse_record(topic, first + n, k.decode() if isinstance(k, bytes) else k, v)
        for n, (k, v) in enumerate(fields.items())
    ]


class ActivityWindow(BaseModel):
    """Ten seconds of a topic's activity, counted by the workers on Redis's clock."""

    model_config = ConfigDict(frozen=True)

    start: datetime
    acked: int
    retried: int
    dead: int
    started: int
    """Handlers started (the lateness figures' sample)."""
    lateness_mean: float | None
    lateness_p50: float | None
    lateness_p90: float | None
    lateness_p99: float | None
    """Lateness percentiles in seconds: the upper bound of the bucket holding the percentile
    (1, 2, 5, 10, 20, 50 ... ms up to 60 s; None beyond, or with no start in the window)."""


def _percentile(buckets: list[int], q: float) -> float | None:
    total = sum(buckets)
    if not total:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for bound, count in zip((*LATENESS_BOUNDS_MS, None), buckets, strict=True):
        seen += count
        if seen >= rank:
            return bound / 1000 if bound is not None else None
    return None  # pragma: no cover (seen reaches total)


def window_of(slot_fields: dict[str, int], window: int) -> ActivityWindow:
    """One :class:`ActivityWindow` from the fields of its ring slot."""
    buckets = [slot_fields.get(f"l{b}", 0) for b in range(len(LATENESS_BOUNDS_MS) + 1)]
    started = slot_fields.get("late_n", 0)
    return ActivityWindow(
        start=from_millis(window * WINDOW_SECONDS * 1000), acked=slot_fields.get("acked", 0),
        retried=slot_fields.get("retried", 0), dead=slot_fields.get("dead", 0), started=started,
        lateness_mean=slot_fields.get("late_ms", 0) / 1000 / started if started else None,
        lateness_p50=_percentile(buckets, 0.5), lateness_p90=_percentile(buckets, 0.9),
        lateness_p99=_percentile(buckets, 0.99),
    )  # fmt: skip


class History:
    """``queue.history``: call it for a topic's last finished tasks; ``activity`` for its
    rolling throughput and lateness.

    Args:
        redis: the client that reads.
        keys: the key names of a topic (validates the topic).
        route: the key names of the shard holding a task of a sharded topic (its records
            are kept in that shard's stream); ``None``: every topic is unsharded.
        every: the key names of every shard of a topic (``None``: one).
        scripts: the queue's scripts (moving an archive cursor is a script).
    """

    def __init__(
        self,
        redis: Redis,
        keys: Callable[[str], TopicKeys],
        route: Callable[[str, str], Awaitable[TopicKeys]] | None = None,
        every: Callable[[str], Awaitable[list[TopicKeys]]] | None = None,
        scripts: Callable[[], Scripts] | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._route = route
        self._every = every
        self._scripts = scripts

    async def __call__(
        self, topic: str, limit: int = 100, before: int | None = None
    ) -> list[HistoryRecord]:
        """A topic's finished tasks (acked, dead-lettered, cancelled), newest first.

        Args:
            topic: a topic registered somewhere with ``history=N``.
            limit: most records returned (1-10,000).
            before: only records numbered below this ``seq`` (the next page: the last
                record's ``seq``).  Not for a sharded topic: each shard numbers its own
                records, so its history is the shards' newest ``limit`` records merged by
                ``finished_at``, without further pages.

        Returns:
            Up to ``limit`` records; empty for a topic that keeps no history.

        Raises:
            InvalidInputError: a bad ``limit`` or ``before``, or ``before`` on a sharded topic.
        """
        bounded_int(limit, "limit", 1, 10_000)
        if before is not None:
            bounded_int(before, "before (a record's seq)")
        keys = self._keys(topic)
        every = await self._every(topic) if self._every else [keys]
        if len(every) == 1:
            return await self._read(every[0].history, topic, limit, before)
        if before is not None:
            raise InvalidInputError(
                "before pages one stream's record numbers: a sharded topic's history is read "
                "newest first without it (docs/cluster.md)"
            )
        shares = [await self._read(k.history, topic, limit, None) for k in every]
        merged = heapq.merge(*shares, key=lambda r: (r.finished_at, r.seq), reverse=True)
        return list(merged)[:limit]

    async def _read(
        self, key: str, topic: str, limit: int, before: int | None
    ) -> list[HistoryRecord]:
        top = "+" if before is None else f"({before}-0"
        found: list[HistoryRecord] = []
        async with redis_errors():
            while len(found) < limit:
                page: list[Any] = (
                    await self._redis.xrevrange(key, top, "-", count=min(limit, 1000)) or []
                )
                for entry_id, fields in page:
                    records = parse_entry(topic, entry_id, fields)
                    found += [r for r in reversed(records) if before is None or r.seq < before]
                if len(page) < min(limit, 1000):
                    break
                last = page[-1][0]
                top = f"({last.decode() if isinstance(last, bytes) else last}"
        return found[:limit]

    async def kept(self, topic: str) -> int:
        """How many records the topic keeps, as its workers recorded it at their start (0:
        it keeps no history, or none of its workers has started yet)."""
        every = await self._every(topic) if self._every else [self._keys(topic)]
        async with redis_errors():
            raw = await self._redis.hget(every[0].meta, "history")
        return int(raw or 0)

    async def activity(self, topic: str) -> list[ActivityWindow]:
        """The last hour of a topic's activity in 10 s windows, oldest first (windows in
        which nothing happened are left out).  Counted by workers of a topic with history,
        added to Redis every 2 s (``delayq/worker/rollup.py``)."""
        key = self._keys(topic).rollup
        async with redis_errors():
            stored: dict[Any, Any] = await self._redis.hgetall(key)
            now_s, _ = await self._redis.time()
        now = int(now_s) // WINDOW_SECONDS
        slots: dict[str, dict[str, int]] = {}
        for name, value in stored.items():
            text = name.decode() if isinstance(name, bytes) else name
            slot, _, field = text.partition(":")
            if field == "w" or field in FIELDS:
                slots.setdefault(slot, {})[field] = int(value)
        windows = [
            window_of(fields, fields["w"])
            for fields in slots.values()
            if "w" in fields and now - WINDOWS < fields["w"] <= now
        ]
        return sorted(windows, key=lambda w: w.start)

    async def find(self, topic: str, task_id: str, *, within: int = 10_000) -> HistoryRecord | None:
        """The newest record of task ``task_id`` among the topic's last ``within`` records
        (of a sharded topic: the records of the task's shard).

        Costs Redis up to ``within`` records read, newest first, stopping at the first
        match: the history has no index by id.  The range is bounded by record number (an
        entry's ID is its first record's), so entries holding many records (an ack batch)
        never make it read more.  Only the matching record is decoded.

        Args:
            topic: the task's topic.
            task_id: the id to look for.
            within: most records searched (1-100,000).
        """
        bounded_int(within, "within", 1, 100_000)
        keys = self._keys(topic)
        key = (await self._route(topic, task_id) if self._route else keys).history
        wanted = task_id.encode()
        async with redis_errors():
            newest: list[Any] = await self._redis.xrevrange(key, "+", "-", count=1) or []
            if not newest:
                return None
            low = max(_first(newest[0][0]) + len(newest[0][1]) - within, 0)  # lowest seq searched
            top, page_size = "+", 100
            while True:
                page: list[Any] = (
                    await self._redis.xrevrange(key, top, f"{low}-0", count=page_size) or []
                )
                if len(page) < page_size and low > 0:  # the entry holding records on both sides
                    page += await self._redis.xrevrange(key, f"({low}-0", "-", count=1) or []
                for entry_id, fields in page:
                    first = _first(entry_id)
                    for n, (field, raw) in enumerate(reversed(fields.items())):
                        seq = first + len(fields) - 1 - n
                        if seq >= low and _as_bytes(field) == wanted:
                            return parse_record(topic, seq, task_id, _as_bytes(raw))
                if len(page) < page_size:
                    return None
                top = f"({_as_bytes(page[-1][0]).decode()}"

    async def throughput(self, topics: Sequence[str], seconds: int = 60) -> dict[str, float]:
        """Attempts finished per second (acked, retried and dead-lettered) in each of
        ``topics`` over the last ``seconds`` (10-3,600) of whole windows and the current
        window so far, as the workers counted them (topics without history: 0).

        Costs Redis O(len(topics) * seconds / 10) hash fields read, one round trip: never
        the topics' task counts (a dashboard's overview reads it every few seconds).
        """
        bounded_int(seconds, "seconds", WINDOW_SECONDS, WINDOW_SECONDS * WINDOWS)
        count = seconds // WINDOW_SECONDS
        keys = [self._keys(topic).rollup for topic in topics]  # validates every topic first
        async with redis_errors():
            now_s, now_us = await self._redis.time()
            now = int(now_s) // WINDOW_SECONDS
            windows = range(now - count, now + 1)
            names = [f"{w % WINDOWS}:{f}" for w in windows for f in ("w", *COUNTED)]
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hmget(key, names)
                replies: list[list[Any]] = await pipe.execute()
        # The current window holds what was counted in it so far (workers add every 2 s).
        span = count * WINDOW_SECONDS + int(now_s) % WINDOW_SECONDS + int(now_us) / 1e6
        rates: dict[str, float] = {}
        for topic, values in zip(topics, replies, strict=True):
            done = 0
            for i, window in enumerate(windows):
                held, *counts = values[i * 4 : i * 4 + 4]
                if held is not None and int(held) == window:
                    done += sum(int(c) for c in counts if c is not None)
            rates[topic] = done / span
        return rates

    # -- for copying history elsewhere (delayq.archive) ----------------------------------

    async def records_after(
        self, topic: str, keys: TopicKeys, seq: int, limit: int
    ) -> list[HistoryRecord]:
        """The oldest records of one shard of ``topic`` numbered after ``seq``: about
        ``limit`` of them, whole stream entries (an entry holds one script call's records),
        at least one entry when any is left."""
        records: list[HistoryRecord] = []
        async with redis_errors():
            # The entry holding record ``seq`` may hold later ones too (an entry's ID is its
            # first record's number), when a copy stopped mid-entry.
            page: list[Any] = await self._redis.xrevrange(
                keys.history, f"{seq}-0", "-", count=1
            ) or []  # fmt: skip
            start = f"({seq}-0"
            while len(records) < limit:
                for entry_id, fields in page:
                    if records and len(records) + len(fields) > limit:
                        return records
                    records += [r for r in parse_entry(topic, entry_id, fields) if r.seq > seq]
                if page:
                    last = page[-1][0]
                    start = f"({last.decode() if isinstance(last, bytes) else last}"
                page = await self._redis.xrange(keys.history, start, "+", count=16) or []
                if not page:
                    break
        return records

    async def archive_cursor(self, keys: TopicKeys, destination: str) -> int:
        """The number of the last record of this shard that ``destination`` holds (0: none)."""
        async with redis_errors():
            held = await self._redis.hget(keys.archive, destination)
        return int(held) if held else 0

    async def advance_archive_cursor(self, keys: TopicKeys, destination: str, seq: int) -> int:
        """Move ``destination``'s cursor of this shard to ``seq`` once the records up to it
        are committed there; it never moves back.  Returns the cursor after the call."""
        if self._scripts is None:
            raise RuntimeError("History was made without the queue's scripts")
        return await self._scripts().archived(keys, destination, seq)


def _first(entry_id: bytes | str) -> int:
    """The number of an entry's first record (its ID is ``<number>-0``)."""
    return int(_as_bytes(entry_id).split(b"-")[0])


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
