"""Queue: the one object users touch.  Each public method is here (or, for lookups and
topic-wide steering, in its base :class:`~delayq.reads.QueueReads`) with its signature and
docstring, and delegates to the part that holds the logic: the producer and consumer (wired
in :mod:`delayq.parts`), the registry, the management calls, the shard map and the worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from delayq.codec import DEFAULT_MAX_BODY_BYTES
from delayq.duration import Duration, to_epoch_millis, to_millis
from delayq.errors import InvalidInputError
from delayq.middleware import (
    Lifespan,
    LifespanT,
    Middleware,
    MiddlewareT,
    check_lifespan,
    check_middleware,
)
from delayq.parts import QueueParts
from delayq.reads import QueueReads
from delayq.redis.clients import open_sentinel, open_url
from delayq.redis.keys import check_task_id, check_topic
from delayq.registry import PeriodicHandler, next_tick, periodic_decorator, topic_decorator
from delayq.ticks import CatchUp, PeriodicOptions, check_catch_up, schedule
from delayq.topic import Topic, TopicDecorator, topic_options
from delayq.worker import Worker
from delayq.worker.heartbeat import DEFAULT_INTERVAL

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from datetime import datetime

    from redis.asyncio import Redis, RedisCluster

    from delayq.backoff import Backoff
    from delayq.groups import GroupBy
    from delayq.redis.durability import Durability
    from delayq.results import TaskResult
    from delayq.task import SendResult
    from delayq.topic import OnConflict


class Queue(QueueReads):
    """A named delay queue on one Redis.

    Args:
        redis: a ``redis.asyncio.Redis`` client; delayq does not close a client it was given.
        name: namespaces every key (``delayq:{name:topic}:...``); no ``{}``, ``:`` or spaces.
        max_body_bytes: largest encoded body accepted on send and on delivery.
        past_tolerance: how far in the past ``send_at``/``reschedule(at=...)`` may be and
            still run (at once); further in the past raises ``InvalidDurationError``.
        durability: make every send wait for replicas (:class:`~delayq.Durability`) and raise
            ``NotDurableError`` when too few confirm; ``None`` (default): no wait.
        strict_topics: sends to a topic not registered here raise ``UnknownTopicError``.
    """

    def __init__(
        self, redis: Redis | RedisCluster, *, name: str = "default", past_tolerance: Duration = 5.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, durability: Durability | None = None,
        strict_topics: bool = False,
    ) -> None:  # fmt: skip
        self._parts = parts = QueueParts(
            redis, name, max_body_bytes, past_tolerance, durability, strict_topics)  # fmt: skip
        self.name, self.redis, self.topics = parts.name, parts.redis, parts.topics
        self.scripts, self.shards, self.durability = parts.scripts, parts.shards, parts.durability
        self.max_body_bytes, self.past_tolerance_ms = parts.max_body_bytes, parts.past_tolerance_ms
        self.hooks, self.history, self.registry = parts.hooks, parts.history, parts.registry
        self.middlewares: list[Middleware] = []
        self.lifespan_factory: Lifespan | None = None
        self.consumer, self.admin = parts.consumer, parts.admin
        """Handler-less leases (:class:`~delayq.Consumer`); a topic as a whole (:class:`~delayq.Admin`)."""
        self.keys, self.shard_keys, self.announce = parts.keys, parts.shard_keys, parts.announce
        self.check_shards, self.topic_options = parts.check_shards, parts.topic_options

    @classmethod
    def from_url(
        cls, url: str, *, name: str = "default", cluster: bool = False, **options: Any
    ) -> Queue:
        """Open a queue on ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``;
        credentials in it, ``redis://user:password@host``, use Redis AUTH/ACL).

        Args:
            cluster: ``url`` is any node of a Redis Cluster (docs/cluster.md); a script it
                refuses while it reconfigures is retried for up to 10 s (no script lane).
            options: ``Queue``'s, and ``redis.asyncio.Redis.from_url``'s, unset ones with
                delayq's defaults (docs/api.md): a script lane, a pool of 100,
                one retry of a lost connection, ``RedisUnavailableError`` after 2 s of silence.
        """
        client, lane, own = open_url(url, cluster=cluster, options=options)
        queue = cls(client, name=name, **own)
        queue._parts.own(lane)
        return queue

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
            sentinel_options: the Sentinels' own connection options (``password``, ``ssl``...).
            options: ``Queue``'s options, and connection options for the primary and
                replicas (``password``, ``username``, ``ssl``, ``socket_timeout``...).
        """
        client, own = open_sentinel(sentinels, service, dict(sentinel_options or {}), options)
        queue = cls(client, name=name, **own)
        queue._parts.own(None)
        return queue

    async def close(self) -> None:
        """Close the Redis connections this queue opened (not a client passed in)."""
        await self._parts.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def topic(
        self, name: str, *, ttr: Duration = 30.0, max_attempts: int = 5, history: int = 0, shards: int = 1,
        backoff: Backoff | None = None, rate_limit: str | None = None, max_running: int | None = None,
        results: Duration | None = None,
        group_by: GroupBy | None = None, max_running_per_group: int | None = None,
        rate_limit_per_group: str | None = None,
    ) -> TopicDecorator:  # fmt: skip
        """Register the decorated ``async def`` handler for topic ``name`` (one per topic):
        the decorator returns the handler's :class:`Topic` handle.  The other arguments are
        the topic's options, each described in :class:`~delayq.topic.TopicOptions`.

        Raises:
            InvalidInputError: a bad name or option.
            UnsupportedShardingError: ``shards`` > 1 with ``rate_limit`` or ``max_running``.
        """
        check_topic(name)
        options = topic_options(ttr=ttr, max_attempts=max_attempts, backoff=backoff, history=history,
                                rate_limit=rate_limit, max_running=max_running, shards=shards,
                                results=results,
                                group_by=group_by, max_running_per_group=max_running_per_group,
                                rate_limit_per_group=rate_limit_per_group)  # fmt: skip
        return topic_decorator(self.topics, self, self.name, name, options)

    def periodic(
        self, name: str, *, cron: str | None = None, every: Duration | None = None, tz: str | None = None,
        catch_up: CatchUp = "latest", ttr: Duration = 30.0, max_attempts: int = 5,
        backoff: Backoff | None = None, rate_limit: str | None = None, max_running: int | None = None,
        max_running_per_group: int | None = None, rate_limit_per_group: str | None = None,
    ) -> Callable[[PeriodicHandler], Topic[None]]:  # fmt: skip
        """Register the decorated ``async def handler(task)`` to run on a schedule, each tick once
        across every worker (:class:`~delayq.ticks.PeriodicOptions`).  The options after ``catch_up``
        are :meth:`topic`'s (``max_running=1``: a run never overlaps the previous one, on any worker).

        Args:
            cron: a cron expression (5 fields, or 6 with seconds first), evaluated by cronsim in ``tz``.
            every: or a fixed interval (ticks at its multiples since the Unix epoch).
            tz: the IANA time zone of ``cron`` (default UTC).
            catch_up: which ticks missed while no worker ran (the stored one too) run: ``"latest"``,
                ``"all"`` or ``"none"`` (:class:`~delayq.ticks.PeriodicOptions`).

        Raises:
            InvalidScheduleError: a bad ``cron``, ``every``, ``tz`` or ``catch_up``.
        """
        options = PeriodicOptions(schedule(cron=cron, every=every, tz=tz), check_catch_up(catch_up))
        register = self.topic(name, ttr=ttr, max_attempts=max_attempts, backoff=backoff,
                              rate_limit=rate_limit, max_running=max_running,
                              max_running_per_group=max_running_per_group,
                              rate_limit_per_group=rate_limit_per_group)  # fmt: skip
        return periodic_decorator(register, options)

    async def next_tick(self, topic: str) -> datetime | None:
        """When periodic ``topic`` ticks next, as its chain in Redis says; ``None`` if the last tick
        is due, or no worker with this process's schedule scheduled one yet (none ran, or another did).

        Raises:
            InvalidInputError: ``topic`` is not a periodic topic registered here.
        """
        return await next_tick(self.scripts, self.keys, self.topics, topic, self.name)

    def lifespan(self, lifespan: LifespanT) -> LifespanT:
        """Register the queue's lifespan, the resources its handlers share (one per queue; a
        decorator returning ``lifespan`` itself).  What it is: :data:`~delayq.middleware.Lifespan`.

        Raises:
            InvalidInputError: not a lifespan, or the queue already has one.
        """
        check_lifespan(lifespan)
        if self.lifespan_factory is not None:
            raise InvalidInputError(f"queue {self.name!r} already has a lifespan")
        self.lifespan_factory = lifespan
        return lifespan

    def middleware(self, middleware: MiddlewareT) -> MiddlewareT:
        """Register ``async def middleware(task, call_next)`` around every handler call, before
        starting the workers (a decorator returning it; how: :data:`~delayq.middleware.Middleware`).

        Raises:
            InvalidInputError: not an ``async def`` taking (task, call_next).
        """
        self.middlewares.append(check_middleware(middleware))
        return middleware

    async def send(self, topic: str, body: Any, **options: Any) -> SendResult:
        """Send a task due now. Same options as :meth:`send_delayed`."""
        return await self.send_delayed(topic, body, delay=0, **options)

    async def send_delayed(
        self, topic: str, body: Any, delay: Duration, *, task_id: str | None = None,
        ttr: Duration | None = None, max_attempts: int | None = None, priority: int = 0,
        on_conflict: OnConflict = "keep", headers: Mapping[str, str] | None = None,
        group: str | int | None = None,
    ) -> SendResult:  # fmt: skip
        """Send a task that becomes due ``delay`` after Redis receives it (Redis's clock).

        Args:
            topic: the topic whose handler will run it.
            body: a pydantic model, dict, or anything pydantic can encode as JSON; validated
                against the topic's model when this process has the handler registered.
            delay: seconds (int/float) or a timedelta, >= 0.
            task_id: your business key (generated when omitted); sending an id still delayed,
                ready or reserved adds nothing and returns it (but see ``on_conflict``).
            ttr: this task's lease length, overriding the topic's.
            max_attempts: this task's attempt limit, overriding the topic's.
            priority: among due tasks of the topic, higher runs first (default 0).
            on_conflict: keep (default) or replace a live task with this id (:data:`~delayq.OnConflict`).
            headers: ``str -> str`` metadata for the handler (``task.headers``): 32, 4 KiB at most.
            group: the task's group (a str or int; default: the topic's ``group_by``), see docs/controls.md.

        Returns:
            The task id, a :class:`~delayq.SendResult` whose ``outcome`` says what happened.

        Raises:
            InvalidInputError: a bad topic, id, delay, option or body (nothing is written).
            RedisUnavailableError: Redis could not be reached; retry with the same task_id.
            NotDurableError: (with ``durability``) stored, but too few replicas confirmed it.
        """
        delay_ms = to_millis(delay, name="delay")
        return await self._parts.producer.send(topic, body, False, delay_ms, task_id, ttr, max_attempts,
                                               on_conflict, priority, headers, group)  # fmt: skip

    async def send_many(
        self, topic: str, bodies: Iterable[Any], *, delay: Duration | Sequence[Duration] = 0,
        task_ids: Iterable[str] | None = None, ttr: Duration | None = None, priority: int = 0,
        max_attempts: int | None = None, batch_size: int = 500, on_conflict: OnConflict = "keep",
        headers: Mapping[str, str] | None = None, group: str | int | None = None,
    ) -> list[SendResult]:  # fmt: skip
        """Send many tasks to one topic with one round trip per batch.

        Every body, id and delay is validated before anything is written.  A batch is one atomic
        script call, two in flight at a time (one with ``durability`` or an id repeated across
        batches); a failure part-way may leave some batches written: re-sending the ``task_ids``
        is safe.  Other arguments are :meth:`send_delayed`'s, for every task; ``delay`` may also
        be one per body.

        Args:
            task_ids: one id per body, generated when omitted.  An id given twice acts as
                two sends in the order given: with ``"keep"`` the first wins, with
                ``"replace"`` the last.
            batch_size: tasks per script call (bounds how long Redis is busy with one call).

        Returns:
            A :class:`~delayq.SendResult` per body, in the order of ``bodies``.

        Raises:
            NotDurableError: (with ``durability``) a batch is stored but too few replicas
                confirmed it; later batches were not sent (its ``unsent``).
        """
        return await self._parts.producer.send_many(
            topic, bodies, delay=delay, task_ids=task_ids, ttr=ttr, max_attempts=max_attempts,
            batch_size=batch_size, on_conflict=on_conflict, priority=priority, headers=headers, group=group,
        )  # fmt: skip

    async def send_at(
        self, topic: str, body: Any, at: datetime, *, task_id: str | None = None,
        ttr: Duration | None = None, max_attempts: int | None = None, priority: int = 0,
        on_conflict: OnConflict = "keep", headers: Mapping[str, str] | None = None,
        group: str | int | None = None,
    ) -> SendResult:  # fmt: skip
        """Send a task due at the aware datetime ``at``; a time up to ``past_tolerance`` (5 s)
        in the past, judged on Redis's clock, runs at once, further in the past raises
        :class:`InvalidDurationError`.  Other arguments as in :meth:`send_delayed`."""
        at_ms = to_epoch_millis(at)
        return await self._parts.producer.send(topic, body, True, at_ms, task_id, ttr, max_attempts,
                                               on_conflict, priority, headers, group)  # fmt: skip

    async def cancel(self, topic: str, task_id: str, *, running: bool = False) -> bool:
        """Delete a delayed, ready or dead task: True if it existed and was removed; False if
        unknown, already done, or reserved (running now) and ``running`` is not set.

        ``running=True`` also aborts a reserved task: its lease ends at once, its worker
        cancels the handler and its ack is refused, and it never runs again (see "Aborting
        a running task" in docs/api.md; a plain ``def`` handler's thread runs on)."""
        return await self._parts.producer.cancel(topic, check_task_id(task_id), running)

    async def result(
        self, topic: str, task_id: str, *, wait: Duration = 0
    ) -> TaskResult[Any] | None:
        """The result of task ``task_id`` of ``topic``, a topic registered with ``results=``
        (the value as decoded JSON; :meth:`Topic.result <delayq.Topic.result>` validates it).

        A finished task whose result is kept: its :class:`~delayq.TaskResult` at once.  A
        task still to finish (delayed, ready or running): waits up to ``wait`` seconds for
        it, woken by Redis when it finishes (no polling).  A dead letter counts as finished
        (``outcome="dead"``) until it is replayed.

        Returns:
            ``None`` for an unknown id, a result that expired, or a topic without results.

        Raises:
            ResultNotReadyError: the task had not finished after ``wait`` (a TimeoutError).
            InvalidInputError: a bad topic, id or ``wait``.
        """
        return await self._parts.results.get(topic, task_id, wait)

    async def reschedule(
        self, topic: str, task_id: str, *, delay: Duration | None = None, at: datetime | None = None
    ) -> bool:  # fmt: skip
        """Move a delayed or ready task to ``delay`` from now, or to the aware datetime ``at``:
        True if moved; False if the task is unknown, reserved (running) or dead.

        Raises:
            InvalidInputError: not exactly one of ``delay`` and ``at``, or a bad one.
        """
        return await self._parts.producer.reschedule(topic, task_id, delay, at)

    async def run_worker(
        self, concurrency: int = 50, topics: Iterable[str] | None = None, grace: Duration = 10.0, *,
        handle_signals: bool = True, heartbeat: Duration = DEFAULT_INTERVAL,
    ) -> None:  # fmt: skip
        """Run a :class:`~delayq.Worker` (same arguments) until cancelled, or until SIGINT or
        SIGTERM with ``handle_signals``, which then stop it gracefully."""
        worker = self.worker(concurrency, topics, grace, heartbeat=heartbeat)
        await worker.run(handle_signals=handle_signals)

    def worker(
        self, concurrency: int = 50, topics: Iterable[str] | None = None, grace: Duration = 10.0,
        **options: Any,
    ) -> Worker:  # fmt: skip
        """A :class:`~delayq.Worker` (taking these arguments) to run in the background on this event
        loop, no signal handlers: ``async with queue.worker(concurrency=20):`` in a web app's lifespan."""
        return Worker(self, concurrency=concurrency, topics=topics, grace=grace, **options)
