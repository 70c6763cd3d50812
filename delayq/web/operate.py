"""The operator's routes beyond a single task: every dead letter of a topic at once, the
history filtered by outcome, and the sweep that forgets topics idle for a day."""

from __future__ import annotations

import asyncio
import bisect
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from delayq.task import TaskInfo
from delayq.web.depends import only_query
from delayq.web.errors import ERROR_RESPONSES, naming
from delayq.web.models import HistoryPage

if TYPE_CHECKING:
    from collections.abc import Callable

    from delayq.history import HistoryRecord
    from delayq.queue import Queue
    from delayq.web.auth import Scope
    from delayq.web.depends import Check

IDLE = timedelta(hours=24)
"""How long a topic with no task and no controls stays on the overview."""
SWEEP_EVERY = 10.0
"""Seconds between two steps of one web process's sweep."""
SWEEP_STEP = 50
"""Topics one step looks at (one script call each): a request that reads the topic names
pays at most this, and 10,000 topics are all looked at within about half an hour."""
FILTER_SCAN = 2_000
"""Most history records one filtered page reads before it answers what it found (the
dashboard asks again every 2 s while a filter is on)."""


class Count(BaseModel):
    """How many tasks a bulk action touched."""

    count: int


class RunningTask(TaskInfo):
    """A leased task, and whether its lease expired (its deadline passed on Redis's clock,
    and no lease of its topic has reclaimed it yet)."""

    lease_expired: bool


class RunningTasks(BaseModel):
    """A page of a topic's leased tasks, soonest lease deadline first."""

    topic: str
    now: datetime
    """Redis's time when read."""
    total: int
    offset: int
    limit: int
    tasks: list[RunningTask]


class Operate:
    """The routes, as methods; :meth:`router` lists each with its path and scope."""

    def __init__(
        self, queue: Queue, require: Callable[[Scope], Check], name: Callable[[str], str]
    ) -> None:
        self.queue = queue
        self.require = require
        self.name = name
        """Decodes a path segment (``delayq.web.api.name``)."""

    def router(self) -> APIRouter:
        """The FastAPI routes (registered before the per-task ones, whose paths they share)."""
        router = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
        routes: list[tuple[str, str, Scope, Callable[..., Any]]] = [
            ("POST", "/topics/{topic}/dead/replay", "admin", self.replay_dead),
            ("DELETE", "/topics/{topic}/dead", "admin", self.delete_dead),
        ]
        for method, path, scope, endpoint in routes:
            router.add_api_route(
                path, endpoint, methods=[method], response_model=Count,
                dependencies=[Depends(self.require(scope)), Depends(only_query())],
                openapi_extra={"x-scope": scope},
            )  # fmt: skip
        router.add_api_route(
            "/topics/{topic}/running", self.running, methods=["GET"], response_model=RunningTasks,
            dependencies=[Depends(self.require("read")), Depends(only_query("offset", "limit"))],
            openapi_extra={"x-scope": "read"},
        )  # fmt: skip
        return router

    async def running(
        self,
        topic: str,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> RunningTasks:
        """A page of the topic's leased tasks (by workers or HTTP consumers), soonest lease
        deadline first, each flagged when its lease expired."""
        topic = self.name(topic)
        with naming("topic"):
            page = await self.queue.admin.running(topic, limit=limit, offset=offset)
        tasks = [
            RunningTask(**t.model_dump(), lease_expired=t.lease_deadline is not None
                        and t.lease_deadline < page.now)
            for t in page.tasks
        ]  # fmt: skip
        return RunningTasks(topic=topic, now=page.now, total=page.total, offset=offset,
                            limit=limit, tasks=tasks)  # fmt: skip

    async def replay_dead(self, topic: str) -> Count:
        """Move every dead letter of the topic back to ready (due now, attempts reset), in
        batches of one script call each; answers how many."""
        with naming("topic"):
            return Count(count=await self.queue.admin.replay_dead(self.name(topic)))

    async def delete_dead(self, topic: str) -> Count:
        """Delete every dead letter of the topic (recorded as cancelled when it keeps
        history), in batches of one script call each; answers how many."""
        with naming("topic"):
            return Count(count=await self.queue.admin.delete_dead(self.name(topic)))


async def filtered_history(
    queue: Queue,
    topic: str,
    limit: int,
    before: int | None,
    outcome: Literal["acked", "dead", "cancelled"],
) -> HistoryPage:
    """A page of ``topic``'s records of one ``outcome``, newest first, reading at most
    :data:`FILTER_SCAN` records; ``next_before`` continues after the last one read."""
    found: list[HistoryRecord] = []
    scanned = 0
    cursor = before
    while len(found) < limit and scanned < FILTER_SCAN:
        records = await queue.history(topic, limit=500, before=cursor)
        scanned += len(records)
        for record in records:
            cursor = record.seq
            if record.outcome == outcome:
                found.append(record)
                if len(found) == limit:
                    break
        if len(records) < 500:  # the oldest record was read
            if len(found) < limit:
                cursor = None
            break
    return HistoryPage(topic=topic, limit=limit, records=found, next_before=cursor)


class Sweeper:
    """Forgets topics with no task, no controls and no live worker consuming them once seen
    idle for :data:`IDLE`
    (``Admin.forget``): every :data:`SWEEP_EVERY` seconds the next :data:`SWEEP_STEP`
    topics in name order, round and round."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self._last: float | None = None
        self._after = ""  # the last topic looked at

    async def sweep(self, names: list[str]) -> list[str]:
        """``names`` (sorted) without those forgotten now (when a step is due)."""
        now = asyncio.get_running_loop().time()
        if self._last is not None and now - self._last < SWEEP_EVERY:
            return names
        self._last = now
        start = bisect.bisect_right(names, self._after)
        step = (names[start:] + names[:start])[:SWEEP_STEP]
        consumed = {t for worker in await self.queue.workers() for t in worker.topics}
        gone = set()
        for topic in step:
            if topic not in consumed and await self.queue.admin.forget(topic, idle=IDLE):
                gone.add(topic)
        self._after = step[-1] if step else ""
        return [n for n in names if n not in gone]
