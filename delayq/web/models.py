"""What the HTTP API takes and returns, beyond the core's own models (``TaskInfo``,
``LeasedTask``, ``NackResult``, ``UpcomingPage``, ``Timeline``), which it returns as they are."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, Strict

from delayq.consumer import MAX_WAIT_SECONDS, LeasedTask
from delayq.duration import MAX_SECONDS
from delayq.headers import MAX_HEADERS
from delayq.history import ActivityWindow, HistoryRecord
from delayq.task import SendOutcome, TaskInfo, TopicStats
from delayq.topic import MAX_ATTEMPTS_LIMIT

# Strict: a JSON number where a number is due (not `false`, not "5"), a boolean where a
# boolean is due.  Datetimes stay ISO 8601 strings, as JSON has no other form for them.
Seconds = Annotated[float, Strict(), Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Strict(), Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
TaskId = Annotated[str, Strict(), Field(min_length=1, max_length=256)]
Count = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Strict()]


class Request(BaseModel):
    """A request body: unknown fields are refused (a typo must not pass silently)."""

    model_config = ConfigDict(extra="forbid")


class SendRequest(Request):
    """A task to send: due after ``delay`` seconds, or at ``at``, or now (neither given)."""

    body: JsonValue = Field(description="The task's JSON body (any JSON value).")
    delay: Seconds | None = Field(None, description="Seconds from now (Redis's clock).")
    at: AwareDatetime | None = Field(None, description="When it is due (with a time zone).")
    task_id: TaskId | None = Field(
        None, description="Your business key; a live id is not sent twice. Generated if omitted."
    )
    ttr: PositiveSeconds | None = Field(None, description="This task's lease length.")
    max_attempts: Count | None = Field(None, ge=1, le=MAX_ATTEMPTS_LIMIT)
    headers: dict[Text, Text] | None = Field(
        None,
        max_length=MAX_HEADERS,
        description="`str -> str` metadata for the consumer (`task.headers`), checked as "
        "`Queue.send` checks it: names of letters, digits, `.`, `_`, `-`; values without "
        "control characters; at most 32 headers and 4 KiB encoded.",
    )
    on_conflict: Literal["keep", "replace"] = Field(
        "keep",
        description="When `task_id` is still waiting: `keep` it, or `replace` its body, due "
        "time and options (debounce).  A running task is never touched.",
    )
    group: str | int | None = Field(
        None,
        description="The task's group (1-128 bytes, no comma or control character): a "
        "grouped topic runs its groups round-robin, within its per-group limits.  Omitted: "
        "what the serving process's `group_by` gives, if it registered the topic grouped.",
    )


class SendReply(BaseModel):
    id: str
    topic: str
    outcome: SendOutcome
    """``created``, ``kept`` (the id was live), ``replaced`` or ``reserved`` (running:
    not replaced)."""


class FinishedTask(BaseModel):
    """A task that finished (acked, dead-lettered and since cancelled, or cancelled), as its
    topic's history recorded it (topics registered with ``history=N``)."""

    id: str
    topic: str
    state: Literal["finished"] = "finished"
    history: HistoryRecord


class HistoryPage(BaseModel):
    """A topic's finished tasks, newest first."""

    topic: str
    limit: int
    records: list[HistoryRecord]
    next_before: int | None
    """Pass as ``before`` for the next (older) page; None when this page holds fewer than
    ``limit`` records (after a full last page, the next is empty)."""


class ActivityPoint(ActivityWindow):
    """One 10 s window of a topic's activity (windows in which nothing happened are left
    out)."""

    throughput: float
    """Attempts finished per second in the window (acked, retried and dead-lettered)."""


class ActivityPage(BaseModel):
    """The last hour of a topic's activity, oldest window first, as its workers counted
    it (topics registered with ``history=N``; empty for others)."""

    topic: str
    window_seconds: int
    windows: list[ActivityPoint]


class RescheduleRequest(Request):
    """Exactly one of ``delay`` and ``at``."""

    delay: Seconds | None = None
    at: AwareDatetime | None = None


class TopicRow(TopicStats):
    """A topic's :class:`~delayq.TopicStats` (its ``consumers``: the live workers of
    ``GET /api/workers`` that consume it), its name and its recent throughput."""

    name: str
    throughput: float = 0.0
    """Attempts finished per second over the last minute (topics with history; else 0)."""


class StatsPage(BaseModel):
    """A page of the queue's topics (sorted by name) with their counts."""

    total: int
    """Topics matching the prefix, over all pages."""
    offset: int
    limit: int
    topics: list[TopicRow]


class DeadPage(BaseModel):
    topic: str
    offset: int
    limit: int
    total: int
    tasks: list[TaskInfo]


class ReserveRequest(Request):
    max: Count = Field(1, ge=1, le=100, description="Most tasks to lease.")
    wait: Annotated[float, Strict()] = Field(
        0, ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False,
        description="Seconds to wait for a task (a long poll); 0 answers at once.",
    )  # fmt: skip
    ttr: PositiveSeconds | None = Field(
        None, description="Lease length for tasks without their own (default: the topic's)."
    )


class ReserveResult(BaseModel):
    tasks: list[LeasedTask]


class NackRequest(Request):
    delay: Seconds | None = Field(None, description="Until the next attempt (default: backoff).")
    dead: Flag = Field(False, description="Dead-letter now, whatever attempts are left.")
    error: Annotated[str, Strict()] = Field(
        "", max_length=2000, description="Recorded as the task's last error."
    )


class AckRequest(Request):
    result: JsonValue = Field(
        None, description="The task's return value, kept when its topic keeps results."
    )


class ExtendRequest(Request):
    seconds: PositiveSeconds = Field(description="The lease ends this long from now.")


class ExtendResult(BaseModel):
    lease_deadline: AwareDatetime


class WhoAmI(BaseModel):
    scopes: list[str]
    anonymous: bool
    """True when no token is configured: reads need none and nothing can be written."""
