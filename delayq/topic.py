"""A registered topic: the handler, its body model and options, and a typed producer handle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    overload,
)

import anyio.to_thread
from typing_extensions import TypeVar as DefaultTypeVar

from delayq.backoff import Backoff
from delayq.bounds import bounded_int
from delayq.duration import Duration, to_millis
from delayq.errors import InvalidInputError, UnsupportedShardingError
from delayq.groups import (
    GroupBy,
    check_group_by,
    check_max_running_per_group,
    parse_rate_per_group,
)
from delayq.handlers import Handler, body_adapter, check_handler
from delayq.limits import RateLimit, check_max_running
from delayq.results import TaskResult, return_adapter, typed_result

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from datetime import datetime

    from pydantic import TypeAdapter

    from delayq.task import SendResult, Task
    from delayq.ticks import PeriodicOptions

BodyT = TypeVar("BodyT")
ResultT = DefaultTypeVar("ResultT", default=Any)
"""What a topic's handler returns (``Any`` where unknown)."""


@dataclass(frozen=True, slots=True)
class TopicOptions:
    """How a topic's tasks are run: the options of :meth:`~delayq.Queue.topic` (and
    :meth:`~delayq.Queue.periodic`), each named here as the keyword that sets it.

    Attributes:
        ttr_ms: ``ttr``, the lease length (time to run; seconds or a timedelta, default
            30 s); a handler still running then is cancelled and the attempt fails; a
            worker that died loses the lease and the task is redelivered.
        max_attempts: deliveries before a failing task is dead-lettered.
        backoff: retry delays after a failure (default ``Backoff()``).
        rate_limit: ``"N/s"``, ``"N/m"`` or ``"N/h"``: at most N task starts in any
            second, minute or hour, across every worker of the queue (``None``: no limit).
        max_running: at most this many of the topic's tasks leased at once, across every
            worker (``None``: no limit).  Both limits are enforced in Redis (see
            docs/controls.md).
        periodic: a periodic topic's schedule (``None`` for any other topic).
        history: keep the last N finished tasks and an hour of activity
            (``queue.history``; docs/observability.md); 0 keeps none.
        results_ms: ``results``, how long each task's outcome and return value are kept
            once it finished (seconds or a timedelta; ``None``, 0 here: none); read them
            with :meth:`Topic.result` or :meth:`~delayq.Queue.result` (docs/api.md, Results).
        shards: spread the topic's tasks over this many hash tags (1..1024), so that on a
            Redis Cluster one topic uses every master (docs/cluster.md).  A task's shard is
            ``zlib.crc32(task_id) % shards``; order (due time, priority) holds per shard.
            Recorded in Redis: a process declaring another count while the topic holds
            tasks gets :class:`~delayq.ShardCountError`.  A grouped topic's shard is
            chosen from the task's group instead, so a group's limits hold fleet-wide.
        group_by: a body field's name, or a function ``body -> str | int``: the task's
            group, computed when it is sent (a send's ``group=`` wins).  A grouped topic
            leases its due tasks round-robin over groups, so one group's backlog never
            starves another's (docs/controls.md, "Groups").  ``None``: no group, unless a
            send gives one.
        max_running_per_group: at most this many tasks of one group leased at once,
            across every worker (``None``: no limit).
        rate_limit_per_group: ``"N/s"``, ``"N/m"`` or ``"N/h"``: at most N starts of one
            group in any such window, across every worker (``None``: no limit).  Both
            group limits are enforced in Redis, alongside ``rate_limit`` and ``max_running``.
    """

    ttr_ms: int = 30_000
    max_attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    rate_limit: RateLimit | None = None
    max_running: int | None = None
    periodic: PeriodicOptions | None = None
    history: int = 0
    shards: int = 1
    results_ms: int = 0
    group_by: GroupBy | None = None
    max_running_per_group: int | None = None
    rate_limit_per_group: RateLimit | None = None

    @property
    def grouped(self) -> bool:
        """Whether the topic's tasks are sent with a group (any group option set)."""
        return (
            self.group_by is not None
            or self.max_running_per_group is not None
            or self.rate_limit_per_group is not None
        )


MAX_HISTORY = 10_000_000


def topic_options(
    *,
    ttr: Duration,
    max_attempts: int,
    backoff: Backoff | None,
    rate_limit: str | None,
    max_running: int | None,
    history: int,
    shards: int = 1,
    results: Duration | None = None,
    group_by: object = None,
    max_running_per_group: int | None = None,
    rate_limit_per_group: str | None = None,
) -> TopicOptions:
    """Validate ``@queue.topic``'s options (``InvalidInputError``) into :class:`TopicOptions`."""
    shards = check_shards(shards)
    if shards > 1 and (rate_limit is not None or max_running is not None):
        raise UnsupportedShardingError(
            "a topic with shards > 1 cannot have rate_limit or max_running yet: the limit "
            "would have to be shared by the shards (docs/cluster.md, Sharded topics)"
        )
    return TopicOptions(
        ttr_ms=to_millis(ttr, name="ttr", allow_zero=False),
        max_attempts=check_max_attempts(max_attempts),
        backoff=backoff or Backoff(),
        rate_limit=None if rate_limit is None else RateLimit.parse(rate_limit),
        max_running=None if max_running is None else check_max_running(max_running),
        history=check_history(history),
        shards=shards,
        results_ms=0 if results is None else to_millis(results, name="results", allow_zero=False),
        group_by=check_group_by(group_by),
        max_running_per_group=None
        if max_running_per_group is None
        else check_max_running_per_group(max_running_per_group),
        rate_limit_per_group=None
        if rate_limit_per_group is None
        else parse_rate_per_group(rate_limit_per_group),
    )


MAX_SHARDS = 1024
"""Most shards a topic may have (``@queue.topic(name, shards=N)``)."""


def check_shards(value: object) -> int:
    """Return ``value`` if it is a valid shard count, else raise :class:`InvalidInputError`."""
    return bounded_int(value, "shards", 1, MAX_SHARDS)


def check_history(value: object) -> int:
    """Return ``value`` if it is a valid history size, else raise :class:`InvalidInputError`."""
    return bounded_int(value, "history", 0, MAX_HISTORY)


MAX_ATTEMPTS_LIMIT = 1_000_000


def check_max_attempts(value: object) -> int:
    """Return ``value`` if it is a valid attempt limit, else raise :class:`InvalidInputError`."""
    return bounded_int(value, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)


OnConflict = Literal["keep", "replace"]
"""What a send does with an id that is already live (delayed, ready or reserved).

``"keep"`` (the default) leaves the task as it is; ``"replace"`` gives a delayed or ready
one the new body, due time and options in one atomic step (debounce), but leaves a
reserved (running) one alone."""


def check_on_conflict(value: object) -> bool:
    """Whether ``value``, a send's ``on_conflict``, asks to replace (else it keeps).

    Raises:
        InvalidInputError: neither ``"keep"`` nor ``"replace"``.
    """
    if value not in ("keep", "replace"):
        raise InvalidInputError(f"on_conflict must be 'keep' or 'replace', got {value!r}")
    return value == "replace"


MAX_PRIORITY = 1_000_000
"""Largest priority magnitude: a task's ``priority`` is an int in ``[-MAX_PRIORITY, MAX_PRIORITY]``."""


def check_priority(value: object) -> int:
    """Return ``value`` if it is a valid task priority, else raise :class:`InvalidInputError`."""
    return bounded_int(value, "priority", -MAX_PRIORITY, MAX_PRIORITY)


def task_overrides(ttr: Duration | None, max_attempts: int | None) -> tuple[int, int]:
    """Validate a task's own ttr and max_attempts; 0 stands for "the topic's default"."""
    ttr_ms = 0 if ttr is None else to_millis(ttr, name="ttr", allow_zero=False)
    attempts = 0 if max_attempts is None else check_max_attempts(max_attempts)
    return ttr_ms, attempts


class Sender(Protocol):
    """Where a :class:`Topic` handle sends: ``delayq.Queue``'s send methods, whose
    arguments the handle passes through (typed loosely here, checked by the queue)."""

    @property
    def send(self) -> Callable[..., Awaitable[SendResult]]:
        """``Queue.send``."""

    @property
    def send_delayed(self) -> Callable[..., Awaitable[SendResult]]:
        """``Queue.send_delayed``."""

    @property
    def send_at(self) -> Callable[..., Awaitable[SendResult]]:
        """``Queue.send_at``."""

    @property
    def cancel(self) -> Callable[..., Awaitable[bool]]:
        """``Queue.cancel``."""

    @property
    def result(self) -> Callable[..., Awaitable[TaskResult[Any] | None]]:
        """``Queue.result``."""


class Topic(Generic[BodyT, ResultT]):
    """The handle ``@queue.topic(...)`` returns: call it like the handler, or send through it.

    Sending through the handle is the same as ``queue.send_delayed(topic.name, ...)`` with
    the body's type checked statically.
    """

    def __init__(self, queue: Sender, name: str, handler: Handler, options: TopicOptions) -> None:
        self.queue = queue
        self.name = name
        self.handler = handler
        self.options = options
        self.adapter, self.takes_task = body_adapter(handler)
        self.is_async = check_handler(handler)
        self.__doc__ = handler.__doc__
        self.__wrapped__ = handler
        self._returns: tuple[TypeAdapter[Any] | None] | None = None  # made on first result()

    async def __call__(self, body: BodyT, task: Task) -> ResultT:
        """Run the handler directly (as the worker does, a plain ``def`` in a thread),
        e.g. from a test; returns what it returns."""
        args = (body, task) if self.takes_task else (body,)
        if self.is_async:
            return await self.handler(*args)  # type: ignore[no-any-return]
        return await anyio.to_thread.run_sync(self.handler, *args)  # type: ignore[no-any-return]

    async def result(self, task_id: str, *, wait: Duration = 0) -> TaskResult[ResultT] | None:
        """The result of task ``task_id`` (a topic registered with ``results=``), its value
        validated into the handler's annotated return type; otherwise as
        :meth:`delayq.Queue.result`.

        Raises:
            ResultNotReadyError: the task had not finished after ``wait`` seconds.
            BodyValidationError: the stored value does not fit the return type (the
                handler's annotation changed since).
        """
        found = await self.queue.result(self.name, task_id, wait=wait)
        if found is None:
            return None
        if self._returns is None:
            self._returns = (return_adapter(self.handler),)
        return typed_result(found, self._returns[0])

    async def send(self, body: BodyT, **options: Any) -> SendResult:
        """Send a task due now. See :meth:`delayq.Queue.send`."""
        return await self.queue.send(self.name, body, **options)

    async def send_delayed(self, body: BodyT, delay: Duration, **options: Any) -> SendResult:
        """Send a task due after ``delay``. See :meth:`delayq.Queue.send_delayed`."""
        return await self.queue.send_delayed(self.name, body, delay=delay, **options)

    async def send_at(self, body: BodyT, at: datetime, **options: Any) -> SendResult:
        """Send a task due at ``at``. See :meth:`delayq.Queue.send_at`."""
        return await self.queue.send_at(self.name, body, at=at, **options)

    async def cancel(self, task_id: str, *, running: bool = False) -> bool:
        """Cancel (``running=True``: or abort) a task of this topic. See
        :meth:`delayq.Queue.cancel`."""
        return await self.queue.cancel(self.name, task_id, running=running)

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, handler={self.handler.__qualname__})"


class TopicDecorator:
    """What ``queue.topic(...)`` returns: registers the decorated handler.

    The body type is bound per call, so ``Topic[CloseOrder]`` comes out of a handler whose
    body is annotated ``CloseOrder`` and mypy checks what is sent through the handle.
    """

    def __init__(self, register: Callable[[Handler], Topic[Any]]) -> None:
        self._register = register

    @overload
    def __call__(
        self, handler: Callable[[BodyT, Task], Awaitable[ResultT]]
    ) -> Topic[BodyT, ResultT]: ...
    @overload
    def __call__(self, handler: Callable[[BodyT], Awaitable[ResultT]]) -> Topic[BodyT, ResultT]: ...
    @overload
    def __call__(self, handler: Callable[[BodyT, Task], ResultT]) -> Topic[BodyT, ResultT]: ...
    @overload
    def __call__(self, handler: Callable[[BodyT], ResultT]) -> Topic[BodyT, ResultT]: ...
    def __call__(self, handler: Handler) -> Topic[Any]:
        return self._register(handler)
