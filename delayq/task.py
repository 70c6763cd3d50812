"""The task as stored and as shown: the envelope, TaskInfo, TopicStats and the handler's Task."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from delayq.headers import NO_HEADERS, split_headers

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

TaskState = Literal["delayed", "ready", "reserved", "dead"]
SendOutcome = Literal["created", "kept", "replaced", "reserved"]


class SendResult(str):
    """What ``send``, ``send_delayed`` and ``send_at`` return (``send_many``: one per task):
    the task id (a ``str``, so it is used as one), with what the send did in :attr:`outcome`.

    ``outcome`` is one of:

    - ``"created"``: a new task was stored (also over a dead letter with this id);
    - ``"kept"``: ``on_conflict="keep"`` and the id was already delayed, ready or
      reserved: nothing was written;
    - ``"replaced"``: ``on_conflict="replace"`` and the id was delayed or ready: that task
      now has the new body, due time and options, as if newly sent;
    - ``"reserved"``: ``on_conflict="replace"`` but the task is reserved (running): it was
      not touched.
    """

    outcome: SendOutcome = "created"

    def __new__(cls, task_id: str, outcome: SendOutcome = "created") -> SendResult:
        result = super().__new__(cls, task_id)
        if outcome != "created":  # the common case sets nothing: no instance dict is made
            result.outcome = outcome
        return result


OutcomeKind = Literal["acked", "retried", "dead"]
StateT = TypeVar("StateT", default=Any)
"""What the queue's lifespan yields; ``Task`` alone means ``Task[Any]``."""


def from_millis(millis: int) -> datetime:
    """Unix milliseconds (Redis clock) as an aware UTC datetime."""
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


_TAGGED = frozenset((b"p", b"g"))
"""The first byte of an envelope's body part when the header has a suffix (``p``, ``g``)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One task as the scripts hand it over: ``attempts,token,max_attempts,ttr_ms,enqueued_ms,due_ms,body``.

    Redis stores the header (the six numbers) and the body apart (docs/keys.md); the
    scripts join them.  ``max_attempts`` and ``ttr_ms`` are 0 when the task follows its
    topic's defaults.  A task sent with a priority other than 0 has ``p<priority>`` between
    the header and the body (a JSON body never starts with ``p``), and a task of a group
    ``g<group>`` after that (a group holds no comma).  ``headers`` are the
    task's headers, stored in front of the body (:mod:`delayq.headers`) and split off here.
    """

    attempts: int
    token: str
    max_attempts: int
    ttr_ms: int
    enqueued_ms: int
    due_ms: int
    body: bytes
    priority: int = 0
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    group: str | None = None

    @classmethod
    def parse(cls, raw: bytes | str) -> Envelope:
        """Parse a stored envelope.

        Raises:
            ValueError: the string is not an envelope (hand-written garbage, another format).
        """
        data = raw.encode() if isinstance(raw, str) else raw
        parts = data.split(b",", 6)
        if len(parts) != 7:
            raise ValueError("stored task is not a delayq envelope")
        attempts, token, max_attempts, ttr, enqueued, due, body = parts
        priority, group = 0, None
        if body[:1] in _TAGGED:  # a priority, a group: one check for a task with neither
            if body.startswith(b"p"):
                tag, _, body = body.partition(b",")
                priority = int(tag[1:])
            if body.startswith(b"g"):
                tag, _, body = body.partition(b",")
                group = tag[1:].decode()
        headers = NO_HEADERS
        if body[:1] == b"\x01":
            headers, body = split_headers(body)
        return cls(
            attempts=int(attempts),
            token=token.decode(),
            max_attempts=int(max_attempts),
            ttr_ms=int(ttr),
            enqueued_ms=int(enqueued),
            due_ms=int(due),
            body=body,
            priority=priority,
            headers=headers,
            group=group,
        )


class TaskInfo(BaseModel):
    """A snapshot of one task, as returned by ``Queue.get`` and ``Queue.dead_letters``."""

    model_config = ConfigDict(frozen=True)

    id: str
    topic: str
    state: TaskState
    due_at: datetime
    """When the task is (or was last) due to run, on Redis's clock."""
    enqueued_at: datetime
    attempts: int
    """Deliveries so far (a delivery whose lease expired counts)."""
    max_attempts: int
    """The attempt limit that applies: the task's own, else its topic's (as registered in
    this process, else as its workers recorded it, else the default 5)."""
    ttr: float
    """The lease length in seconds that applies, chosen like :attr:`max_attempts` (the
    default is 30)."""
    priority: int = 0
    """Among due tasks of its topic, higher is leased first."""
    body: Any
    """The JSON body, decoded (a dict for object bodies)."""
    last_error: str | None
    lease_deadline: datetime | None = None
    """For a reserved task: when its lease ends unless extended or acked."""
    dead_at: datetime | None = None
    """For a dead task: when it was dead-lettered."""
    paused: bool = False
    """Whether the task's topic is paused (``Queue.pause``): a ready task then waits."""
    headers: dict[str, str] = Field(default_factory=dict)
    """The headers sent with the task (empty for none)."""
    group: str | None = None
    """The task's group (``None``: none; docs/controls.md, "Groups")."""


class TopicStats(BaseModel):
    """How many tasks one topic holds in each state, and the topic's fleet-wide controls.

    ``Queue.stats`` lists a topic when it holds any task, or is paused or limited; a sharded
    topic's counts are the sums over its shards, its controls shard 0's (a pause applies to
    every shard)."""

    model_config = ConfigDict(frozen=True)

    delayed: int
    ready: int
    reserved: int
    dead: int
    paused: bool = False
    """Whether the topic is paused (``Queue.pause``): its workers lease nothing."""
    rate_limit: str | None = None
    """The rate limit its workers enforce (``"100/s"``), as the last worker to start declared it."""
    max_running: int | None = None
    """The cap on its leased tasks that its workers enforce, as the last worker to start declared it."""
    consumers: int = 0
    """Live workers (``Queue.workers()``) whose topics include it: 0 with ready tasks means
    nothing will run them."""
    oldest_ready_age: float | None = None
    """Seconds since the oldest ready task fell due, on Redis's clock (None: none is ready)."""


class Task(Generic[StateT]):
    """What a handler learns about the delivery it is running, and its lease.

    Generic in the type of what the queue's lifespan yields: annotate the handler's
    parameter ``Task[Resources]`` and ``task.state`` is a ``Resources`` to mypy.

    Attributes:
        id: the task id (your business key when you sent one).
        topic: the topic name.
        attempt: 1 on the first delivery, 2 on the first retry, ...
        max_attempts: the limit after which a failing task is dead-lettered.
        due_at: when the task was due, on Redis's clock.
        enqueued_at: when it was sent, on Redis's clock.
        ttr: the lease length in seconds.
        token: the lease's fencing token (ack/nack/extend carry it).
        state: what the queue's lifespan yielded in this worker (``None`` without one).
        priority: the priority it was sent with (0 by default).
        headers: the headers sent with the task (read-only; empty for none).
        group: the task's group (``None``: it has none; docs/controls.md, "Groups").
    """

    __slots__ = (
        "_extend",
        "attempt",
        "due_at",
        "enqueued_at",
        "group",
        "headers",
        "id",
        "max_attempts",
        "priority",
        "state",
        "token",
        "topic",
        "ttr",
    )

    def __init__(
        self,
        *,
        id: str,
        topic: str,
        attempt: int,
        max_attempts: int,
        due_at: datetime,
        enqueued_at: datetime,
        ttr: float,
        token: str,
        extend: Callable[[float], Awaitable[None]],
        state: StateT = None,  # type: ignore[assignment]  # None when there is no lifespan
        priority: int = 0,
        headers: Mapping[str, str] = NO_HEADERS,
        group: str | None = None,
    ) -> None:
        self.id = id
        self.topic = topic
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.due_at = due_at
        self.enqueued_at = enqueued_at
        self.ttr = ttr
        self.token = token
        self._extend = extend
        self.state = state
        self.priority = priority
        self.headers = headers
        self.group = group

    async def extend(self, seconds: float) -> None:
        """Make the lease end ``seconds`` from now (it is never shortened), for long work.

        The worker's own TTR timeout for this handler moves with it.

        Raises:
            LeaseLostError: the lease already expired and the task may be running elsewhere.
            InvalidDurationError: ``seconds`` is not a positive duration.
        """
        await self._extend(seconds)

    def __repr__(self) -> str:
        return f"Task(topic={self.topic!r}, id={self.id!r}, attempt={self.attempt})"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one delivery, as a worker reports it to its ``on_outcome`` hook.

    Attributes:
        topic: the topic.
        task_id: the task id.
        attempt: the delivery's attempt number (1 on the first).
        outcome: ``"acked"`` (done and deleted), ``"retried"`` (failed, due again later) or
            ``"dead"`` (failed for the last time, or its body can never be handled).
        error: the failure recorded as the task's last error, ``None`` when acked.
        due_at: when the delivery was due, on Redis's clock.
    """

    topic: str
    task_id: str
    attempt: int
    outcome: OutcomeKind
    error: str | None
    due_at: datetime


def stored_task_info(
    topic: str,
    task_id: str,
    state: str,
    raw: bytes | None,
    error: str | None,
    score: int,
    lease: datetime | None,
    dead_at: datetime | None,
    paused: bool = False,
    defaults: tuple[int, int] = (30_000, 5),
) -> TaskInfo:
    """A :class:`TaskInfo` from what get.lua or dead_letters.lua returned, with the topic's
    ``defaults`` (TTR in ms, attempt limit) where the task has no limit of its own.  An
    unreadable envelope still gives an answer (state, score, error), never an exception."""
    ttr_ms, max_attempts = defaults
    try:
        envelope = Envelope.parse(raw or b"")
    except ValueError:
        return TaskInfo(
            id=task_id, topic=topic, state=state, due_at=from_millis(score),
            enqueued_at=from_millis(score), attempts=0, max_attempts=max_attempts,
            ttr=ttr_ms / 1000, body=None,
            last_error=error or "CorruptTask: stored envelope is unreadable",
            lease_deadline=lease, dead_at=dead_at, paused=paused,
        )  # fmt: skip
    try:
        body = pydantic_core.from_json(envelope.body)
    except ValueError:
        body = envelope.body.decode(errors="replace")
    return TaskInfo(
        id=task_id, topic=topic, state=state, due_at=from_millis(envelope.due_ms),
        enqueued_at=from_millis(envelope.enqueued_ms), attempts=envelope.attempts,
        max_attempts=envelope.max_attempts or max_attempts,
        ttr=(envelope.ttr_ms or ttr_ms) / 1000, body=body, last_error=error,
        lease_deadline=lease, dead_at=dead_at, paused=paused, priority=envelope.priority,
        headers=dict(envelope.headers), group=envelope.group,
    )  # fmt: skip
