"""The handler registry that ``Queue`` inherits: ``@queue.topic`` and
``@queue.periodic``, and the hooks around handlers, ``@queue.lifespan`` and
``@queue.middleware``.

A worker reads what is registered here when it starts (through
:class:`~delayq.worker.source.TaskSource`); only :meth:`HandlerRegistry.next_tick` talks
to Redis.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from delayq.errors import InvalidInputError
from delayq.hooks import Lifespan, Middleware, check_lifespan, check_middleware
from delayq.redis.keys import check_topic
from delayq.task import from_millis
from delayq.ticks import CatchUp, PeriodicOptions, check_catch_up, schedule
from delayq.topic import (
    Handler,
    Sender,
    Topic,
    TopicDecorator,
    tick_handler,
    topic_options,
)
from delayq.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from delayq.backoff import Backoff
    from delayq.duration import Duration
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.worker.source import TaskSource

LifespanT = TypeVar("LifespanT", bound=Lifespan)
MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)
PeriodicHandler = Callable[..., Awaitable[None]] | Callable[..., None]
"""``async def handler(task) -> None`` (or one taking nothing; or a plain ``def``)."""


class RegisteringQueue(Sender, Protocol):
    """What the registry needs from the queue that inherits it."""

    name: str
    topics: dict[str, Topic[Any]]
    middlewares: list[Middleware]
    lifespan_factory: Lifespan | None

    @property
    def scripts(self) -> Scripts:
        """Runs tick_state.lua."""

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic``."""


class HandlerRegistry:
    """``Queue.topic``, ``Queue.periodic`` (and ``next_tick``), ``Queue.lifespan`` and
    ``Queue.middleware``; and ``Queue.worker``, which runs what is registered.

    Attributes:
        topics: the registered topics, by name.
        middlewares: the middleware around every handler, outermost first.
        lifespan_factory: the registered lifespan, if any.
    """

    topics: dict[str, Topic[Any]]
    middlewares: list[Middleware]
    lifespan_factory: Lifespan | None

    def topic(
        self: RegisteringQueue,
        name: str,
        *,
        ttr: Duration = 30.0,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        rate_limit: str | None = None,
        max_running: int | None = None,
        history: int = 0,
        shards: int = 1,
    ) -> TopicDecorator:
        """Register the decorated ``async def`` handler for topic ``name``.

        Args:
            name: the topic; one handler per topic per queue.
            ttr: lease length (time to run); a handler still running then is cancelled and
                the attempt fails; a worker that died loses the lease and the task is redelivered.
            max_attempts: deliveries before a failing task is dead-lettered.
            backoff: retry delays after a failure (default ``Backoff()``).
            rate_limit: ``"N/s"``, ``"N/m"`` or ``"N/h"``: at most N task starts in any
                second, minute or hour, across every worker of the queue.
            max_running: at most this many of the topic's tasks leased at once, across
                every worker.  Both are enforced in Redis (see docs/controls.md).
            history: keep the last N finished tasks and an hour of activity
                (``queue.history``; docs/observability.md); 0 keeps none.
            shards: spread the topic's tasks over this many hash tags (1..1024), so that on a
                Redis Cluster one topic uses every master (docs/cluster.md).  A task's shard
                is ``zlib.crc32(task_id) % shards``; order (due time, priority) holds per
                shard.  Recorded in Redis: a process declaring another count while the topic
                holds tasks gets :class:`~delayq.ShardCountError`.

        Returns:
            A decorator turning the handler into a :class:`Topic` handle.

        Raises:
            UnsupportedShardingError: ``shards`` > 1 with ``rate_limit`` or ``max_running``.
        """
        check_topic(name)
        options = topic_options(ttr=ttr, max_attempts=max_attempts, backoff=backoff,
                                rate_limit=rate_limit, max_running=max_running, history=history,
                                shards=shards)  # fmt: skip

        def register(handler: Handler) -> Topic[Any]:
            if name in self.topics:
                raise InvalidInputError(
                    f"topic {name!r} already has a handler in queue {self.name!r}"
                )
            handle: Topic[Any] = Topic(self, name, handler, options)
            self.topics[name] = handle
            return handle

        return TopicDecorator(register)

    def periodic(
        self: RegisteringQueue,
        name: str,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        tz: str | None = None,
        catch_up: CatchUp = "latest",
        ttr: Duration = 30.0,
        max_attempts: int = 5,
        backoff: Backoff | None = None,
        rate_limit: str | None = None,
        max_running: int | None = None,
    ) -> Callable[[PeriodicHandler], Topic[None]]:
        """Register the decorated ``async def handler(task)`` to run on a schedule.

        Each tick runs once across every worker that consumes the topic: a tick is a task
        whose id is its time (``2026-11-25T03:00:00.000Z``), scheduled by one atomic
        script that refuses any tick not later than the last one ever scheduled.  It fires
        like any task (Redis's clock; ``task.due_at`` is the tick's time) and is retried
        and dead-lettered like one.

        Args:
            name: the topic.
            cron: a cron expression (5 fields, or 6 with seconds first), evaluated by
                cronsim in ``tz``; or
            every: a fixed interval (ticks at its multiples since the Unix epoch).
            tz: the IANA time zone of ``cron`` (default UTC).
            catch_up: ticks missed while no worker could schedule them: ``"latest"`` runs
                the most recent one, ``"all"`` runs them all, oldest first (at most
                :data:`~delayq.ticks.MAX_CATCH_UP`), ``"none"`` skips them.
            ttr: as for :meth:`topic`.
            max_attempts: as for :meth:`topic`.
            backoff: as for :meth:`topic`.
            rate_limit: as for :meth:`topic`.
            max_running: as for :meth:`topic` (``max_running=1``: a run never overlaps the
                previous one, on any worker).

        Raises:
            InvalidScheduleError: a bad ``cron``, ``every``, ``tz`` or ``catch_up``, at
                decoration time.
        """
        options = PeriodicOptions(schedule(cron=cron, every=every, tz=tz), check_catch_up(catch_up))
        register = HandlerRegistry.topic(
            self, name, ttr=ttr, max_attempts=max_attempts, backoff=backoff,
            rate_limit=rate_limit, max_running=max_running,
        )  # fmt: skip

        def decorate(handler: PeriodicHandler) -> Topic[None]:
            handle: Topic[None] = register(tick_handler(handler))
            handle.options = replace(handle.options, periodic=options)
            return handle

        return decorate

    async def next_tick(self: RegisteringQueue, topic: str) -> datetime | None:
        """When periodic ``topic`` ticks next, as its chain in Redis says.

        Returns:
            The next tick scheduled, or ``None`` when no worker with this process's
            schedule for the topic has scheduled one yet (none ever ran, or one with
            another schedule did), or the last tick scheduled is already due.

        Raises:
            InvalidInputError: ``topic`` is not a periodic topic registered here.
        """
        registered = self.topics.get(topic)
        if registered is None or registered.options.periodic is None:
            raise InvalidInputError(f"{topic!r} is not a periodic topic of queue {self.name!r}")
        now, fingerprint, last = await self.scripts.tick_state(self.keys(topic))
        mine = fingerprint == registered.options.periodic.schedule.fingerprint
        return from_millis(last) if mine and last > now else None

    def lifespan(self: RegisteringQueue, lifespan: LifespanT) -> LifespanT:
        """Register the queue's lifespan (a decorator): the resources its handlers share.

        ``lifespan`` is an async generator function that yields once (or a function
        returning an async context manager).  Every worker enters it once before it leases
        its first task and leaves it after its last handler finished (also when the start
        fails); what it yields is ``task.state`` in every handler.  An exception on entry
        stops the worker with :class:`~delayq.LifespanError`.  One lifespan per queue.

        Returns:
            ``lifespan`` itself.

        Raises:
            InvalidInputError: not a lifespan, or the queue already has one.
        """
        check_lifespan(lifespan)
        if self.lifespan_factory is not None:
            raise InvalidInputError(f"queue {self.name!r} already has a lifespan")
        self.lifespan_factory = lifespan
        return lifespan

    def middleware(self: RegisteringQueue, middleware: MiddlewareT) -> MiddlewareT:
        """Register ``async def middleware(task, call_next)`` around every handler call
        (a decorator).

        Middleware runs in registration order, the first registered outermost, inside the
        task's TTR.  ``await call_next()`` runs the rest of the chain and the handler; what
        the middleware raises is the attempt's failure, and one that returns without
        calling ``call_next`` ends the attempt as done (acked).  Workers compose the chain
        when they start: register middleware before starting them.

        Returns:
            ``middleware`` itself.

        Raises:
            InvalidInputError: not an ``async def`` taking (task, call_next).
        """
        self.middlewares.append(check_middleware(middleware))
        return middleware

    def worker(
        self: TaskSource,
        concurrency: int = 50,
        topics: Iterable[str] | None = None,
        grace: Duration = 10.0,
        **options: Any,
    ) -> Worker:
        """A worker to run on this event loop: ``async with queue.worker(concurrency=20):``.

        Entering starts it in the background (lifespan, Redis check, leases) and returns
        once it consumes; leaving the block stops it gracefully, with the same two-stage
        stop as :meth:`run_worker` (``grace``, then cancel and hand back).  For a worker
        inside a web app's lifespan (FastAPI's, say); it installs no signal handlers.
        ``options`` go to :class:`~delayq.Worker` (``on_outcome``, ``threads``).
        """
        return Worker(self, concurrency=concurrency, topics=topics, grace=grace, **options)
