"""The HTTP API's routes: producers, operators and consumers in any language.

Every route declares its scope (``x-scope`` in the OpenAPI document) and the errors it may
answer (:mod:`delayq.web.errors`).  Path segments are topic names and task ids, which may
hold ``/``: send it as ``%2F`` (see :func:`delayq.web.app.keep_encoded_slashes`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Response

from delayq.consumer import NackResult
from delayq.errors import InvalidInputError
from delayq.history import WINDOW_SECONDS
from delayq.task import TaskInfo, TopicStats
from delayq.upcoming import MAX_UPCOMING, MAX_WINDOWS, Timeline, UpcomingPage
from delayq.web.depends import Credentials, authorizer, only_query
from delayq.web.errors import (
    ERROR_RESPONSES,
    ApiProblem,
    conflict,
    invalid,
    naming,
    not_found,
    renamed,
)
from delayq.web.longpoll import until_set
from delayq.web.models import (
    AckRequest,
    ActivityPage,
    ActivityPoint,
    DeadPage,
    ExtendRequest,
    ExtendResult,
    FinishedTask,
    HistoryPage,
    NackRequest,
    RescheduleRequest,
    ReserveRequest,
    ReserveResult,
    SendReply,
    SendRequest,
    StatsPage,
    TopicRow,
    WhoAmI,
)
from delayq.web.operate import Sweeper, filtered_history

if TYPE_CHECKING:
    from collections.abc import Callable

    from delayq.queue import Queue
    from delayq.web.auth import Scope, Tokens

QUERY = {
    "stats": ("offset", "limit", "prefix"),
    "dead": ("offset", "limit"),
    "upcoming": ("limit", "cursor"),
    "timeline": ("window", "windows"),
    "history": ("limit", "before", "outcome"),
    "cancel": ("running",),
}
"""The query parameters each endpoint takes (any other is refused)."""
SEND_FIELDS = ("topic", "task_id", "delay", "at", "ttr", "max_attempts", "body", "group")
"""The fields a send's errors may name."""
HISTORY_SCAN = 10_000
"""Most history records a task lookup searches for a finished task (newest first)."""
NAMES_TTL = 2.0
"""Seconds the topic names are reused between ``/api/stats`` calls."""
SLASH = "\x1f"
"""What an encoded ``/`` in a path segment arrives as (no name holds control characters)."""
HOT_PATHS = {
    "send": "/api/topics/{topic}/tasks",
    "reserve": "/api/topics/{topic}/reserve",
    "ack": "/api/leases/{token}/ack",
    "nack": "/api/leases/{token}/nack",
    "extend": "/api/leases/{token}/extend",
}
"""The per-task routes (``POST``), answered by :mod:`delayq.web.endpoint`, not FastAPI."""
_STATES = ("delayed", "ready", "reserved", "dead")


def name(segment: str) -> str:
    """A topic name or task id from its path segment."""
    return segment.replace(SLASH, "/")


class Api:
    """The endpoints, as methods; :meth:`router` lists each with its path and scope."""

    def __init__(self, queue: Queue, tokens: Tokens, stopping: asyncio.Event | None = None) -> None:
        self.queue = queue
        self.tokens = tokens
        self.stopping = stopping
        self.require = authorizer(tokens)
        self._names: tuple[float, list[str]] | None = None
        self.sweeper = Sweeper(queue)

    async def topic_names(self) -> list[str]:
        """The queue's topic names, read at most once per :data:`NAMES_TTL` seconds: the
        one read whose cost grows with the number of topics (``SMEMBERS``), shared by every
        dashboard refreshing in that time."""
        now = asyncio.get_running_loop().time()
        if self._names is None or now - self._names[0] > NAMES_TTL:
            names = await self.sweeper.sweep(await self.queue.topic_names())
            self._names = (now, names)
        return self._names[1]

    def router(self, *, documented: bool = False) -> APIRouter:
        """The FastAPI routes: those FastAPI serves, or with ``documented`` every route,
        the per-task ones (:data:`HOT_PATHS`, served by :mod:`delayq.web.endpoint`)
        included, for the OpenAPI document."""
        router = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
        routes: list[tuple[str, str, Scope, Callable[..., Any], dict[str, Any]]] = [
            ("GET", "/stats", "read", self.stats, {"response_model": StatsPage}),
            ("GET", "/topics/{topic}", "read", self.topic, {"response_model": TopicRow}),
            ("POST", "/topics/{topic}/pause", "admin", self.pause,
             {"status_code": 204, "response_class": Response}),
            ("POST", "/topics/{topic}/resume", "admin", self.resume,
             {"status_code": 204, "response_class": Response}),
            ("POST", "/topics/{topic}/tasks", "produce", self.send,
             {"status_code": 201, "response_model": SendReply}),
            ("GET", "/topics/{topic}/tasks/{task_id}", "read", self.get,
             {"response_model": TaskInfo | FinishedTask}),
            ("DELETE", "/topics/{topic}/tasks/{task_id}", "produce", self.cancel,
             {"status_code": 204, "response_class": Response}),
            ("POST", "/topics/{topic}/tasks/{task_id}/reschedule", "produce", self.reschedule,
             {"response_model": TaskInfo}),
            ("GET", "/topics/{topic}/dead", "read", self.dead, {"response_model": DeadPage}),
            ("POST", "/topics/{topic}/dead/{task_id}/replay", "admin", self.replay,
             {"status_code": 204, "response_class": Response}),
            ("GET", "/topics/{topic}/upcoming", "read", self.upcoming,
             {"response_model": UpcomingPage}),
            ("GET", "/topics/{topic}/timeline", "read", self.timeline,
             {"response_model": Timeline}),
            ("GET", "/topics/{topic}/history", "read", self.history,
             {"response_model": HistoryPage}),
            ("GET", "/topics/{topic}/activity", "read", self.activity,
             {"response_model": ActivityPage}),
            ("POST", "/topics/{topic}/reserve", "consume", self.reserve,
             {"response_model": ReserveResult}),
            ("POST", "/leases/{token}/ack", "consume", self.ack,
             {"status_code": 204, "response_class": Response}),
            ("POST", "/leases/{token}/nack", "consume", self.nack,
             {"response_model": NackResult}),
            ("POST", "/leases/{token}/extend", "consume", self.extend,
             {"response_model": ExtendResult}),
        ]  # fmt: skip
        router.add_api_route(
            "/whoami", self.whoami, methods=["GET"], response_model=WhoAmI,
            dependencies=[Depends(only_query())], openapi_extra={"x-scope": "any"},
        )  # fmt: skip
        hot = set(HOT_PATHS.values())
        for method, path, scope, endpoint, options in routes:
            if not documented and method == "POST" and "/api" + path in hot:
                continue
            query = QUERY.get(endpoint.__name__, ())
            router.add_api_route(
                path, endpoint, methods=[method],
                dependencies=[Depends(self.require(scope)), Depends(only_query(*query))],
                openapi_extra={"x-scope": scope}, **options,
            )  # fmt: skip
        return router

    async def whoami(self, credentials: Credentials) -> WhoAmI:
        """The scopes of the presented token (any known token may ask)."""
        if self.tokens.anonymous_read:
            return WhoAmI(scopes=["read"], anonymous=True)
        if credentials is None:
            raise ApiProblem(401, "unauthorized", "a bearer token is required")
        granted = self.tokens.scopes_of(credentials.credentials)
        if not granted:
            raise ApiProblem(401, "unauthorized", "unknown token")
        return WhoAmI(scopes=sorted(granted), anonymous=False)

    async def stats(
        self,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
        prefix: Annotated[str, Query(max_length=200)] = "",
    ) -> StatsPage:
        """A page of the queue's topics, sorted by name, with their counts (Redis work is
        per topic shown, not per topic in the queue)."""
        names = [n for n in await self.topic_names() if n.startswith(prefix)]
        shown = names[offset : offset + limit]
        counts = await self.queue.stats(shown)
        rates = await self.queue.history.throughput(shown)
        rows = [TopicRow(name=n, throughput=rates.get(n, 0.0), **_counts(counts, n)) for n in shown]
        return StatsPage(total=len(names), offset=offset, limit=limit, topics=rows)

    async def topic(self, topic: str) -> TopicRow:
        """One topic's counts and controls (zeros for a topic that holds nothing)."""
        topic = name(topic)
        with naming("topic"):
            counts = await self.queue.stats([topic])
        return TopicRow(name=topic, **_counts(counts, topic))

    async def pause(self, topic: str) -> Response:
        """Stop every worker (and HTTP consumer) from leasing the topic's tasks."""
        with naming("topic"):
            await self.queue.pause(name(topic))
        return Response(status_code=204)

    async def resume(self, topic: str) -> Response:
        """Let a paused topic's tasks be leased again."""
        with naming("topic"):
            await self.queue.resume(name(topic))
        return Response(status_code=204)

    async def send(self, topic: str, request: SendRequest) -> SendReply:
        """Send a task: due after `delay` seconds, at `at`, or now.  Returns its id and what
        the send did (`outcome`)."""
        topic = name(topic)
        at = request.at
        if at is not None and request.delay is not None:
            raise invalid("give delay or at, not both", "at")
        options: dict[str, Any] = {
            "task_id": request.task_id, "ttr": request.ttr, "headers": request.headers,
            "max_attempts": request.max_attempts, "on_conflict": request.on_conflict,
            "group": request.group,
        }  # fmt: skip
        try:
            if at is None:
                sent = await self.queue.send_delayed(
                    topic, request.body, request.delay or 0, **options
                )
            else:
                sent = await self.queue.send_at(topic, request.body, at, **options)
        except InvalidInputError as exc:
            raise renamed(exc, SEND_FIELDS) from None
        return SendReply(id=sent, topic=topic, outcome=sent.outcome)

    async def get(self, topic: str, task_id: str) -> TaskInfo | FinishedTask:
        """A task by id: delayed, ready, reserved or dead; once it finished (acked,
        cancelled), its history record (`state` "finished") if its topic keeps history and
        it is among the last 10,000 records.  Else 404."""
        topic, task_id = name(topic), name(task_id)
        with naming("topic", "task_id"):
            info = await self.queue.get(topic, task_id)
            if info is not None:
                return info
            record = await self.queue.history.find(topic, task_id, within=HISTORY_SCAN)
        if record is None:
            raise not_found("no such task (unknown, finished or cancelled)")
        return FinishedTask(id=task_id, topic=topic, history=record)

    async def cancel(self, topic: str, task_id: str, running: bool = False) -> Response:
        """Cancel a delayed, ready or dead task; 409 while it runs, unless `running=true`."""
        topic, task_id = name(topic), name(task_id)
        with naming("topic", "task_id"):
            if not await self.queue.cancel(topic, task_id, running=running):
                await _explain(self.queue, topic, task_id, "cancelled")
        return Response(status_code=204)

    async def reschedule(self, topic: str, task_id: str, request: RescheduleRequest) -> TaskInfo:
        """Move a delayed or ready task to `delay` seconds from now, or to `at`."""
        topic, task_id = name(topic), name(task_id)
        if (request.delay is None) == (request.at is None):
            raise invalid("give exactly one of delay and at", "delay")
        with naming("topic", "task_id", "delay", "at"):
            moved = await self.queue.reschedule(topic, task_id, delay=request.delay, at=request.at)
            if not moved:
                await _explain(self.queue, topic, task_id, "rescheduled")
            return await _get(self.queue, topic, task_id)

    async def dead(
        self,
        topic: str,
        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> DeadPage:
        """A page of the topic's dead letters, oldest first, with their last error."""
        topic = name(topic)
        with naming("topic"):
            tasks = await self.queue.dead_letters(topic, limit=limit, offset=offset)
            counts = await self.queue.stats([topic])
        total = counts[topic].dead if topic in counts else 0
        return DeadPage(topic=topic, offset=offset, limit=limit, total=total, tasks=tasks)

    async def replay(self, topic: str, task_id: str) -> Response:
        """Move a dead letter back to ready (due now, attempts reset)."""
        with naming("topic", "task_id"):
            if not await self.queue.replay(name(topic), name(task_id)):
                raise not_found("no such dead letter")
        return Response(status_code=204)

    async def upcoming(
        self,
        topic: str,
        limit: Annotated[int, Query(ge=1, le=MAX_UPCOMING)] = 50,
        cursor: Annotated[str | None, Query(max_length=300)] = None,
    ) -> UpcomingPage:
        """The next tasks to fall due, in order; pass `cursor` back for the next page."""
        with naming("topic", "cursor"):
            return await self.queue.upcoming(name(topic), limit=limit, cursor=cursor)

    async def timeline(
        self,
        topic: str,
        window: Annotated[float, Query(gt=0, le=86_400, allow_inf_nan=False)] = 60,
        windows: Annotated[int, Query(ge=1, le=MAX_WINDOWS)] = 60,
    ) -> Timeline:
        """How many tasks fall due in each of the next `windows` windows of `window` s."""
        with naming("topic", "window", "windows"):
            return await self.queue.timeline(name(topic), window=window, windows=windows)

    async def history(
        self,
        topic: str,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[int | None, Query(ge=1, le=2**53)] = None,
        outcome: Annotated[Literal["acked", "dead", "cancelled"] | None, Query()] = None,
    ) -> HistoryPage:
        """The topic's finished tasks (acked, dead-lettered, cancelled), newest first, if it
        keeps history; pass `next_before` back as `before` for the next page (a sharded
        topic: one page of the shards' newest records, `next_before` null)."""
        topic = name(topic)
        with naming("topic", "limit", "before"):
            if outcome is not None:  # only that `outcome`, reading up to 2,000 records
                return await filtered_history(self.queue, topic, limit, before, outcome)
            records = await self.queue.history(topic, limit=limit, before=before)
        # A sharded topic numbers its records per shard: one merged page, no next one.
        sharded = await self.queue.shards.count(topic) > 1
        last = records[-1].seq if len(records) == limit and not sharded else None
        return HistoryPage(topic=topic, limit=limit, records=records, next_before=last)

    async def activity(self, topic: str) -> ActivityPage:
        """The topic's last hour in 10 s windows, oldest first: attempts acked, retried and
        dead-lettered, throughput, and the lateness of handler starts (p50, p90, p99)."""
        topic = name(topic)
        with naming("topic"):
            windows = await self.queue.history.activity(topic)
        points = [
            ActivityPoint(
                **w.model_dump(), throughput=(w.acked + w.retried + w.dead) / WINDOW_SECONDS
            )
            for w in windows
        ]
        return ActivityPage(topic=topic, window_seconds=WINDOW_SECONDS, windows=points)

    async def reserve(
        self, topic: str, request: Annotated[ReserveRequest | None, Body()] = None
    ) -> ReserveResult:
        """Lease up to `max` due tasks, waiting up to `wait` s for one (a long poll).  Ack,
        nack or extend each by its `lease_token` before its `lease_deadline`."""
        request = request or ReserveRequest()
        with naming("topic", "ttr", "wait"):
            lease = self.queue.consumer.lease(
                name(topic), limit=request.max, wait=request.wait, ttr=request.ttr
            )
            if request.wait == 0 or self.stopping is None:
                return ReserveResult(tasks=await lease)
            return ReserveResult(tasks=await until_set(lease, self.stopping))

    async def ack(self, token: str, request: Annotated[AckRequest | None, Body()] = None) -> None:
        """The task is done: delete it (its topic keeping results: with `result`).  409
        when the lease is no longer held."""
        with naming("token"):
            await self.queue.consumer.ack(token, request.result if request else None)

    async def nack(
        self, token: str, request: Annotated[NackRequest | None, Body()] = None
    ) -> NackResult:
        """The attempt failed: retry after `delay` (default: the topic's backoff), or
        dead-letter.  409 when the lease is no longer held."""
        request = request or NackRequest()
        with naming("token", "delay"):
            return await self.queue.consumer.nack(
                token, delay=request.delay, dead=request.dead, error=request.error
            )

    async def extend(self, token: str, request: ExtendRequest) -> ExtendResult:
        """Make the lease end `seconds` from now (never earlier).  409 when it is no
        longer held."""
        with naming("token", "seconds"):
            deadline = await self.queue.consumer.extend(token, request.seconds)
        return ExtendResult(lease_deadline=deadline)


def _counts(counts: dict[str, TopicStats], topic: str) -> dict[str, Any]:
    """A topic's counts, zeros for one that holds nothing."""
    return counts[topic].model_dump() if topic in counts else dict.fromkeys(_STATES, 0)


async def _get(queue: Queue, topic: str, task_id: str) -> TaskInfo:
    info = await queue.get(topic, task_id)
    if info is None:
        raise not_found("no such task (unknown, finished or cancelled)")
    return info


async def _explain(queue: Queue, topic: str, task_id: str, what: str) -> None:
    """Raise the 404 or 409 for a task that could not be ``what``."""
    info = await _get(queue, topic, task_id)
    raise conflict(f"task is {info.state} and cannot be {what}")
