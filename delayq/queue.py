"""Queue: the one object users touch.  Each public method is here with its signature and
docstring, and delegates to the part that holds the logic: the producer, the registry, the
management calls, the shard map and the worker."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from delayq.bounds import bounded_int
from delayq.codec import DEFAULT_MAX_BODY_BYTES
from delayq.consumer import Consumer
from delayq.duration import Duration, to_epoch_millis, to_millis
from delayq.errors import InvalidInputError
from delayq.events import Hooks
from delayq.history import History
from delayq.manage import (
    RunningPage,
    dead_bulk,
    dead_letters,
    forget,
    get_task,
    leased,
    replay,
    set_controls,
    topic_names,
    topic_stats,
)
from delayq.middleware import Lifespan, Middleware, check_lifespan, check_middleware
from delayq.producer import Producer
from delayq.redis.clients import close_client, open_sentinel, open_url
from delayq.redis.cluster import is_cluster
from delayq.redis.durability import ClusterDurableSender, Durability, durable_sender
from delayq.redis.keys import TopicKeys, check_queue_name, check_task_id, check_topic
from delayq.redis.scripts import Scripts
from delayq.registry import PeriodicHandler, next_tick, periodic_decorator, topic_decorator
from delayq.shards import ShardMap
from delayq.ticks import CatchUp, PeriodicOptions, check_catch_up, schedule
from delayq.topic import Topic, TopicDecorator, TopicOptions, topic_options
from delayq.upcoming import Timeline, UpcomingPage, timeline, upcoming
from delayq.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from datetime import datetime
    from types import TracebackType

    from pydantic import TypeAdapter
    from redis.asyncio import Redis, RedisCluster

    from delayq.backoff import Backoff
    from delayq.redis.lane import ScriptLane
    from delayq.task import SendResult, TaskInfo, TopicStats
    from delayq.topic import OnConflict

log = logging.getLogger("delayq")
LifespanT = TypeVar("LifespanT", bound=Lifespan)
MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)


class Queue:
    """A named delay queue on one Redis.

    Args:
        redis: a ``redis.asyncio.Redis`` client; delayq does not close a client it was given.
        name: namespaces every key (``delayq:{name:topic}:...``); no ``{}``, ``:`` or spaces.
        max_body_bytes: largest encoded body accepted on send and on delivery.
        past_tolerance: how far in the past ``send_at``/``reschedule(at=...)`` may be and
            still run (at once); further in the past raises ``InvalidDurationError``.
        durability: make every send wait for replicas (``WAIT``, or ``WAITAOF`` on Redis
            >= 7.2 with AOF) and raise ``NotDurableError`` when too few confirm in time.
            ``None`` (default): a send returns once the primary stored the task.
    """

    def __init__(
        self, redis: Redis | RedisCluster, *, name: str = "default",
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, past_tolerance: Duration = 5.0,
        durability: Durability | None = None,
    ) -> None:  # fmt: skip
        self.name = check_queue_name(name)
        bounded_int(max_body_bytes, "max_body_bytes", 1)
        # A RedisCluster speaks the same commands; delayq's parts type it as Redis.
        self.redis: Redis = cast("Redis", redis)
        self.max_body_bytes = max_body_bytes
        self.past_tolerance_ms = to_millis(past_tolerance, name="past_tolerance")
        if durability is not None and not isinstance(durability, Durability):
            raise InvalidInputError(f"durability must be a Durability, got {durability!r}")
        self.durability = durability
        self._cluster = is_cluster(redis)
        self._durable = durable_sender(redis, durability) if durability else None
        self.topics: dict[str, Topic[Any]] = {}
        self.middlewares: list[Middleware] = []
        self.lifespan_factory: Lifespan | None = None
        self.hooks = Hooks()  # send hooks and event listeners for extensions (docs/api.md)
        self._keys: dict[str, TopicKeys] = {}
        self.shards = ShardMap(
            self.name, lambda: self.scripts, self.keys, self._declared_shards,
            sharded_wake=self._cluster,
        )  # fmt: skip
        """Which shard holds a task of a sharded topic (:class:`~delayq.shards.ShardMap`)."""
        # Finished tasks and activity of a topic.
        self.history = History(self.redis, self.keys, self.shards.route, self.shards.every)
        self._owns_client = False
        self._use_scripts(Scripts(self.redis))

    def _use_scripts(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._producer = Producer(
            self.redis, scripts, queue=self.name, keys=self.keys, adapter=self._adapter,
            max_body_bytes=self.max_body_bytes, past_tolerance_ms=self.past_tolerance_ms,
            durable=self._durable, hooks=self.hooks, shards=self.shards,
        )  # fmt: skip
        self.consumer = Consumer(
            self.redis, scripts, queue=self.name, keys=self.keys, options=self.topic_options,
            hooks=self.hooks, shards=self.shards,
        )  # fmt: skip
        """Lease, ack, nack and extend tasks without a handler (:class:`~delayq.consumer.Consumer`)."""

    @classmethod
    def from_url(
        cls, url: str, *, name: str = "default", cluster: bool = False, **options: Any
    ) -> Queue:
        """Open a queue on ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``).

        Credentials in the URL (``redis://user:password@host``) use Redis AUTH/ACL. Options
        that ``Queue`` takes are passed to it; the rest go to ``redis.asyncio.Redis.from_url``.
        By default a command that lost its connection is retried once on a fresh one (no
        backoff), so a stale pooled connection after a Redis restart costs no error while a
        Redis that is down fails fast; a Redis silent for 2 s (``socket_timeout`` and
        ``socket_connect_timeout``; pooled calls wait longer by the durability timeout)
        fails the command with ``RedisUnavailableError``, without a retry; and at most
        ``max_connections`` (100) pooled connections are opened, more concurrent calls
        waiting up to ``timeout`` (10 s) for a free one.  Script calls are pipelined
        automatically (:mod:`delayq.redis.lane`): one made while none is in flight goes at
        once on one more connection, and those made meanwhile go out together at the end
        of their event-loop turn.

        ``cluster=True``: ``url`` is any node of a Redis Cluster (docs/cluster.md); the
        queue uses ``redis.asyncio.RedisCluster`` (no script lane) and retries scripts that a
        reconfiguring cluster refuses (TRYAGAIN, CLUSTERDOWN, a failover) for up to 10 s.
        """
        client, lane, own = open_url(url, cluster=cluster, options=options)
        return cls._owning(client, name, own, lane)

    @classmethod
    def from_sentinel(
        cls, sentinels: Sequence[tuple[str, int]], *, service: str, name: str = "default",
        sentinel_options: Mapping[str, Any] | None = None, **options: Any,
    ) -> Queue:  # fmt: skip
        """Open a queue on the primary that Redis Sentinel names ``service``, following it
        through failovers (``redis.asyncio.sentinel``; no script lane).

        Args:
            sentinels: (host, port) of the Sentinels.
            service: the monitored primary's name.
            sentinel_options: connection options for the Sentinels themselves (their own
                ``password``, ``username``, ``ssl``...).
            options: ``Queue`` options, and connection options for the primary and
                replicas (``password``, ``username``, ``ssl``, ``socket_timeout``...).
        """
        client, own = open_sentinel(sentinels, service, dict(sentinel_options or {}), options)
        return cls._owning(client, name, own)

    @classmethod
    def _owning(
        cls, client: Redis | RedisCluster, name: str, options: dict[str, Any],
        lane: ScriptLane | None = None,
    ) -> Queue:  # fmt: skip
        queue = cls(client, name=name, **options)
        if lane is not None:
            queue._use_scripts(Scripts(queue.redis, lane=lane))
        queue._owns_client = True
        return queue

    async def close(self) -> None:
        """Close the Redis connections this queue opened (not a client passed in)."""
        await self.consumer.aclose()
        if isinstance(self._durable, ClusterDurableSender):
            await self._durable.aclose()
        if self._owns_client:
            await self.scripts.aclose()
            await close_client(self.redis)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.close()

    # -- registering handlers ---------------------------------------------------------------

    def topic(
        self, name: str, *, ttr: Duration = 30.0, max_attempts: int = 5,
        backoff: Backoff | None = None, rate_limit: str | None = None,
        max_running: int | None = None, history: int = 0, shards: int = 1,
    ) -> TopicDecorator:  # fmt: skip
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
        return topic_decorator(self.topics, self, self.name, name, options)

    def periodic(
        self, name: str, *, cron: str | None = None, every: Duration | None = None,
        tz: str | None = None, catch_up: CatchUp = "latest", ttr: Duration = 30.0,
        max_attempts: int = 5, backoff: Backoff | None = None, rate_limit: str | None = None,
        max_running: int | None = None,
    ) -> Callable[[PeriodicHandler], Topic[None]]:  # fmt: skip
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
        register = self.topic(name, ttr=ttr, max_attempts=max_attempts, backoff=backoff,
                              rate_limit=rate_limit, max_running=max_running)  # fmt: skip
        return periodic_decorator(register, options)

    async def next_tick(self, topic: str) -> datetime | None:
        """When periodic ``topic`` ticks next, as its chain in Redis says.

        Returns:
            The next tick scheduled, or ``None`` when no worker with this process's
            schedule for the topic has scheduled one yet (none ever ran, or one with
            another schedule did), or the last tick scheduled is already due.

        Raises:
            InvalidInputError: ``topic`` is not a periodic topic registered here.
        """
        return await next_tick(self.scripts, self.keys, self.topics, topic, self.name)

    def lifespan(self, lifespan: LifespanT) -> LifespanT:
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

    def middleware(self, middleware: MiddlewareT) -> MiddlewareT:
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

    # -- what a worker reads ------------------------------------------------------------------

    def keys(self, topic: str) -> TopicKeys:
        """The Redis key names of ``topic`` (validated)."""
        keys = self._keys.get(topic)
        if keys is None:
            keys = self._keys[topic] = TopicKeys.build(
                self.name, check_topic(topic), sharded_wake=self._cluster
            )
        return keys

    def shard_keys(self, topic: str) -> list[TopicKeys]:
        """The key names of every shard of registered ``topic``, as declared here."""
        return self.shards.of(topic, self.topics[topic].options.shards)

    async def check_shards(self, topics: Iterable[str]) -> None:
        """Resolve the shard count of ``topics`` now (a worker's start), not at first use.

        Raises:
            ShardCountError: a declared count differs from the one recorded in Redis while
                the topic holds tasks.
        """
        for topic in topics:
            await self.shards.count(topic)

    def _declared_shards(self, topic: str) -> int | None:
        registered = self.topics.get(topic)
        return registered.options.shards if registered else None

    def topic_options(self, topic: str) -> TopicOptions:
        """The options of ``topic``: its registered handler's, else the defaults."""
        registered = self.topics.get(topic)
        return registered.options if registered else TopicOptions()

    async def announce(self, topics: Iterable[str]) -> None:
        """Record topic names in the queue's topic set, which ``stats`` reads."""
        await self._producer.announce(topics)

    # -- producing --------------------------------------------------------------------------

    async def send(self, topic: str, body: Any, **options: Any) -> SendResult:
        """Send a task due now. Same options as :meth:`send_delayed`."""
        return await self.send_delayed(topic, body, delay=0, **options)

    async def send_delayed(
        self, topic: str, body: Any, delay: Duration, *, task_id: str | None = None,
        ttr: Duration | None = None, max_attempts: int | None = None,
        on_conflict: OnConflict = "keep", priority: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> SendResult:  # fmt: skip
        """Send a task that becomes due ``delay`` after Redis receives it (Redis's clock).

        Args:
            topic: the topic whose handler will run it.
            body: a pydantic model, dict, or anything pydantic can encode as JSON; validated
                against the topic's model when this process has the handler registered.
            delay: seconds (int/float) or a timedelta, >= 0.
            task_id: your business key; sending an id that is still delayed, ready or reserved
                adds nothing and returns the same id (but see ``on_conflict``).  Generated
                when omitted.
            ttr: this task's lease length, overriding the topic's.
            max_attempts: this task's attempt limit, overriding the topic's.
            on_conflict: ``"keep"`` (default) leaves a live task with this id as it is;
                ``"replace"`` gives a delayed or ready one this body, due time and options
                in one atomic step (debounce), but leaves a reserved (running) one alone.
            priority: among due tasks of the topic, higher runs first (default 0).
            headers: ``str -> str`` metadata for the handler (``task.headers``): 32, 4 KiB at most.

        Returns:
            The task id, a ``str`` whose ``outcome`` says what happened: ``"created"``,
            ``"kept"``, ``"replaced"``, or ``"reserved"`` (not replaced: it is running).

        Raises:
            InvalidInputError: a bad topic, id, delay, option or body (nothing is written).
            RedisUnavailableError: Redis could not be reached; retry with the same task_id.
            NotDurableError: (with ``durability``) stored, but too few replicas confirmed it;
                retry with the same task_id.
        """
        value_ms = to_millis(delay, name="delay")
        return await self._producer.send(
            topic, body, False, value_ms, task_id, ttr, max_attempts, on_conflict, priority,
            headers,
        )  # fmt: skip

    async def send_many(
        self, topic: str, bodies: Iterable[Any], *, delay: Duration | Sequence[Duration] = 0,
        task_ids: Iterable[str] | None = None, ttr: Duration | None = None,
        max_attempts: int | None = None, batch_size: int = 500, on_conflict: OnConflict = "keep",
        priority: int = 0, headers: Mapping[str, str] | None = None,
    ) -> list[SendResult]:  # fmt: skip
        """Send many tasks to one topic with one round trip per batch.

        Every body, id and delay is validated before anything is written.  Each batch of
        ``batch_size`` tasks is one atomic script call, and two calls are in flight at a time
        (one, with ``durability`` or an id repeated across batches); a failure part-way
        (Redis lost) may leave some batches written, and re-sending the same ``task_ids``
        is then safe.

        Args:
            topic: the topic of every task.
            bodies: the bodies, validated as in :meth:`send_delayed`.
            delay: one delay for all, or one per body.
            task_ids: one id per body (ids already delayed/ready/reserved are kept, as in
                ``send``, but see ``on_conflict``); generated when omitted.  An id given
                twice acts as two sends in the order given: with ``"keep"`` the first
                wins, with ``"replace"`` the last.
            ttr: lease length override for every task.
            max_attempts: attempt limit override for every task.
            batch_size: tasks per script call (bounds how long Redis is busy with one call).
            on_conflict: as in :meth:`send_delayed`, for every task: ``"replace"`` gives
                each delayed or ready task with one of ``task_ids`` its new body, due time
                and options, and leaves a reserved (running) one alone.
            priority: the priority of every task (see :meth:`send_delayed`).
            headers: headers every task carries (as in :meth:`send_delayed`).

        Returns:
            A :class:`SendResult` per body, in the order of ``bodies``: the task id (a
            ``str``) with its ``outcome``, as :meth:`send_delayed` returns.

        Raises:
            NotDurableError: (with ``durability``) a batch is stored but too few replicas
                confirmed it; later batches were not sent.  Repeat with the same task_ids.
        """
        return await self._producer.send_many(
            topic, bodies, delay=delay, task_ids=task_ids, ttr=ttr,
            max_attempts=max_attempts, batch_size=batch_size, on_conflict=on_conflict,
            priority=priority, headers=headers,
        )  # fmt: skip

    async def send_at(
        self, topic: str, body: Any, at: datetime, *, task_id: str | None = None,
        ttr: Duration | None = None, max_attempts: int | None = None,
        on_conflict: OnConflict = "keep", priority: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> SendResult:  # fmt: skip
        """Send a task due at the aware datetime ``at``.

        A time up to ``past_tolerance`` (default 5 s) in the past, judged on Redis's clock,
        runs at once; further in the past raises :class:`InvalidDurationError`.  Other
        arguments as in :meth:`send_delayed`.
        """
        value_ms = to_epoch_millis(at)
        return await self._producer.send(
            topic, body, True, value_ms, task_id, ttr, max_attempts, on_conflict, priority,
            headers,
        )  # fmt: skip

    def _adapter(self, topic: str) -> TypeAdapter[Any] | None:
        """The body validator of ``topic`` when this process has its handler registered."""
        registered = self.topics.get(topic)
        return registered.adapter if registered else None

    # -- managing ---------------------------------------------------------------------------

    async def cancel(self, topic: str, task_id: str) -> bool:
        """Delete a delayed, ready or dead task.

        Returns:
            True if it existed and was removed; False if unknown, already done, or reserved
            (running now: a running task cannot be recalled).
        """
        return await self._producer.cancel(topic, check_task_id(task_id), self._history_of(topic))

    def _history_of(self, topic: str) -> int:
        """The history ``topic`` keeps as registered in this process (0: not registered
        here, or none); a script then also reads what its workers recorded."""
        registered = self.topics.get(topic)
        return registered.options.history if registered else 0

    async def reschedule(
        self, topic: str, task_id: str, *, delay: Duration | None = None,
        at: datetime | None = None,
    ) -> bool:  # fmt: skip
        """Move a delayed or ready task to ``delay`` from now, or to the aware datetime ``at``.

        Returns:
            True if moved; False if the task is unknown, reserved (running) or dead.
        """
        if (delay is None) == (at is None):
            raise InvalidInputError("reschedule takes exactly one of delay= or at=")
        absolute = at is not None
        value_ms = to_epoch_millis(at) if at is not None else to_millis(delay or 0, name="delay")
        task_id = check_task_id(task_id)
        status, when = await self.scripts.reschedule(
            await self.shards.route(topic, task_id), task_id, absolute=absolute, value_ms=value_ms,
            tolerance_ms=self.past_tolerance_ms,
        )  # fmt: skip
        if status < 0:
            raise self._producer.too_far_past(value_ms, when)
        return status == 1

    # -- looking up and controlling ------------------------------------------------------

    async def get(self, topic: str, task_id: str) -> TaskInfo | None:
        """Look a task up by id.

        Returns:
            Its state, body and schedule; None once it was acked or cancelled, or if unknown.
        """
        return await get_task(self.scripts, self.shards, topic, task_id)

    async def topic_names(self) -> list[str]:
        """The names of the topics this queue has used (sent to, or consumed), sorted."""
        return await topic_names(self.redis, self.name)

    async def stats(self, topics: Iterable[str] | None = None) -> dict[str, TopicStats]:
        """Count tasks per state for every topic of this queue (or of ``topics``).

        A topic is listed when it holds any task, or is paused or limited (with its
        controls); a sharded topic's counts are the sums over its shards, its controls
        shard 0's (pause applies to every shard).
        """
        names = await self.topic_names() if topics is None else [check_topic(t) for t in topics]
        return await topic_stats(self.scripts, self.shards, names)

    async def dead_letters(self, topic: str, limit: int = 100, offset: int = 0) -> list[TaskInfo]:
        """List a topic's dead letters, oldest first, with their last error.

        Of a sharded topic: each shard's first ``offset + limit``, merged by time of death.

        Raises:
            InvalidInputError: ``limit`` < 1 or ``offset`` < 0.
        """
        return await dead_letters(self.scripts, self.shards, topic, limit, offset)

    async def replay(self, topic: str, task_id: str) -> bool:
        """Move a dead-lettered task back to ready (due now), its attempts reset.

        Returns:
            True if the task was dead and is now ready again.
        """
        return await replay(self.scripts, self.shards, topic, task_id)

    async def running(self, topic: str, limit: int = 50, offset: int = 0) -> RunningPage:
        """A page of ``topic``'s leased tasks (by workers or HTTP consumers), soonest lease
        deadline first, with Redis's time: a deadline before it is an expired lease that
        the topic's next lease reclaims.

        Raises:
            InvalidInputError: ``limit`` not in 1..500 or ``offset`` < 0.
        """
        return await leased(self.scripts, self.shards, check_topic(topic), limit, offset)

    async def replay_dead(self, topic: str) -> int:
        """Move every dead letter of ``topic`` back to ready (due now), attempts reset, in
        batches of one script call each. Returns how many were replayed."""
        return await dead_bulk(self.scripts, self.shards, check_topic(topic), "replay")

    async def delete_dead(self, topic: str) -> int:
        """Delete every dead letter of ``topic``, in batches of one script call each; a topic
        that keeps history records each as cancelled. Returns how many were deleted."""
        topic = check_topic(topic)
        return await dead_bulk(self.scripts, self.shards, topic, "delete", self._history_of(topic))

    async def forget(self, topic: str, *, idle: Duration | None = None) -> bool:
        """Clean the stored state of ``topic`` (controls, history, activity, counters) and
        drop it from :meth:`topic_names`, if it holds no task.

        Args:
            idle: only if it has no controls and was seen idle (no task, no send, lease or
                finished task) for this long by earlier calls; each call notes what it saw.

        Returns:
            True if forgotten; False if it holds tasks (or is not yet idle that long).
        """
        idle_ms = None if idle is None else to_millis(idle, name="idle")
        return await forget(
            self.redis, self.scripts, self.shards, self.name, check_topic(topic), idle_ms
        )

    async def upcoming(
        self, topic: str, *, limit: int = 50, cursor: str | None = None
    ) -> UpcomingPage:  # fmt: skip
        """The next ``limit`` (1..500) delayed or ready tasks of ``topic``, in due order.

        Costs Redis O(limit), not O(tasks).  Pass the page's ``cursor`` back for the next
        page; if the task it names has left the schedule since, the next page starts after
        its due time (so tasks due in that same millisecond may be skipped).
        """
        return await upcoming(self.scripts, await self.shards.every(topic), limit=limit,
                              cursor=cursor)  # fmt: skip

    async def timeline(self, topic: str, *, window: Duration = 60, windows: int = 60) -> Timeline:
        """How many tasks of ``topic`` fall due in each of the next ``windows`` (1..240)
        windows of ``window`` seconds, and how many are due already.

        Costs Redis O(windows * log(tasks)); a window of over ~2,000 tasks is estimated
        (flagged).
        """
        return await timeline(self.scripts, await self.shards.every(topic), window=window,
                              windows=windows)  # fmt: skip

    async def pause(self, topic: str) -> None:
        """Stop every worker of the queue from leasing ``topic``'s tasks, until :meth:`resume`.

        Takes effect at each worker's next lease (tasks already leased run to the end) and
        holds across worker restarts: the pause is stored in Redis.  Sends are still
        accepted; ``stats()`` and ``get()`` show the pause.  A sharded topic is paused
        shard by shard (each shard's ``controls`` hash).
        """
        await set_controls(self.scripts, self.shards, topic, {"paused": "1"})
        await self.announce([topic])  # so that stats() lists it, tasks or not

    async def resume(self, topic: str) -> None:
        """Let ``topic``'s tasks be leased again after :meth:`pause`; its workers are woken
        at once (a topic that is not paused is left as it is)."""
        await set_controls(self.scripts, self.shards, topic, {"paused": ""})

    # -- consuming --------------------------------------------------------------------------

    async def run_worker(
        self, concurrency: int = 50, topics: Iterable[str] | None = None, grace: Duration = 10.0, *,
        handle_signals: bool = True,
    ) -> None:  # fmt: skip
        """Consume this queue's registered topics until cancelled or SIGINT/SIGTERM.

        Args:
            concurrency: most handlers running at once in this process.
            topics: a subset of the registered topics (default: all).
            grace: on stop, how long running handlers may finish before they are cancelled
                and their tasks released for immediate redelivery.
            handle_signals: install SIGINT/SIGTERM handlers that stop the worker gracefully.
        """
        worker = Worker(self, concurrency=concurrency, topics=topics, grace=grace)
        await worker.run(handle_signals=handle_signals)

    def worker(
        self, concurrency: int = 50, topics: Iterable[str] | None = None, grace: Duration = 10.0,
        **options: Any,
    ) -> Worker:  # fmt: skip
        """A worker to run on this event loop: ``async with queue.worker(concurrency=20):``.

        Entering starts it in the background (lifespan, Redis check, leases) and returns
        once it consumes; leaving the block stops it gracefully, with the same two-stage
        stop as :meth:`run_worker` (``grace``, then cancel and hand back).  For a worker
        inside a web app's lifespan (FastAPI's, say); it installs no signal handlers.
        ``options`` go to :class:`~delayq.Worker` (``on_outcome``, ``threads``).
        """
        return Worker(self, concurrency=concurrency, topics=topics, grace=grace, **options)
