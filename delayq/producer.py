"""Sending: validate and encode what a producer hands over, then run the send scripts (and
cancel, reschedule).

:class:`delayq.Queue` delegates ``send``, ``send_delayed``, ``send_at``, ``send_many``,
``cancel`` and ``reschedule`` here; the public docstrings live on the queue.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from delayq.bounds import bounded_int
from delayq.codec import encode_body
from delayq.duration import to_epoch_millis, to_millis
from delayq.errors import DelayqError, InvalidDurationError, InvalidInputError, NotDurableError
from delayq.events import Sending, TaskEvent
from delayq.groups import NO_GROUP, task_group
from delayq.headers import check_headers, encode_headers
from delayq.ids import new_task_id, new_task_ids
from delayq.redis.cluster import run_command
from delayq.redis.keys import check_task_id, shard_of, topics_key
from delayq.redis.scripts import SEND_STATUS
from delayq.send_order import schedule_order, send_results
from delayq.strict import check_registered
from delayq.task import SendResult, from_millis
from delayq.topic import check_on_conflict, check_priority, task_overrides

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
    from datetime import datetime

    from pydantic import TypeAdapter
    from redis.asyncio import Redis

    from delayq.duration import Duration
    from delayq.events import Hooks
    from delayq.redis.durability import DurableSender
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.topic import OnConflict, TopicOptions

ANNOUNCE_EVERY = 60.0
"""Seconds after which a send records its topic in the topic set again: an idle topic that
was forgotten (``Queue.forget``) comes back to the stats once it is sent to again."""
log = logging.getLogger("delayq")

MAX_BATCH_SIZE = 1000
SENT_STATUSES = (1, 2)
"""send.lua statuses that stored the task: created, or replaced (``on_conflict="replace"``)."""


class Producer:
    """Sends tasks for one queue.

    Args:
        redis: the client that records topic names.
        scripts: runs the send scripts.
        queue: the queue's name.
        keys: the key names of a topic (validates the topic).
        adapter: the body validator of a topic whose handler this process registered.
        max_body_bytes: the largest encoded body accepted.
        past_tolerance_ms: how far in the past an absolute time may be and still run.
        durable: waits for replicas after each send, when the queue asks for it.
        hooks: the queue's send hooks and event listeners.
        shards: routes a task of a sharded topic to its shard.
        topics: the topics registered in this process (read at each send).
        strict: refuse sends to any other topic (``strict_topics``).
        history: the records a topic registered in this process keeps (0: none, or not
            registered here), which its cancels carry; ``results``: its results' lifetime
            in ms, likewise.
        options: the options of a topic registered in this process (defaults else): a
            grouped one's sends get their group from its ``group_by``.
    """

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts,
        *,
        queue: str,
        keys: Callable[[str], TopicKeys],
        adapter: Callable[[str], TypeAdapter[Any] | None],
        max_body_bytes: int,
        past_tolerance_ms: int,
        durable: DurableSender | None,
        hooks: Hooks,
        shards: ShardMap,
        topics: Collection[str] = (),
        strict: bool = False,
        history: Callable[[str], int] = lambda topic: 0,
        results: Callable[[str], int] = lambda topic: 0,
        options: Callable[[str], TopicOptions] | None = None,
    ) -> None:
        self._redis = redis
        self._options = options
        self._topics = topics
        self._strict = strict
        self._history = history
        self._results = results
        self._shards = shards
        self._hooks = hooks
        self.scripts = scripts
        self._queue = queue
        self._keys = keys
        self._adapter = adapter
        self._max_body_bytes = max_body_bytes
        self._past_tolerance_ms = past_tolerance_ms
        self._durable = durable
        self._announced: dict[str, float] = {}
        """Topic -> when this process last recorded it in the topic set (monotonic s)."""

    async def send(
        self,
        topic: str,
        body: Any,
        absolute: bool,
        value_ms: int,
        task_id: str | None,
        ttr: Duration | None,
        max_attempts: int | None,
        on_conflict: OnConflict = "keep",
        priority: int = 0,
        headers: Mapping[str, str] | None = None,
        group: str | int | None = None,
    ) -> SendResult:
        """Send one task due ``value_ms`` from now, or at Unix ms ``value_ms`` (``absolute``)."""
        keys = self._keys(topic)
        if self._strict:
            check_registered(topic, self._topics, self._queue)
        task_id = new_task_id() if task_id is None else check_task_id(task_id)
        ttr_ms, attempts = task_overrides(ttr, max_attempts)
        replace = check_on_conflict(on_conflict)
        priority = check_priority(priority)
        data = encode_body(topic, body, self._adapter(topic), self._max_body_bytes)
        stored_group = self.group(topic, body, group)
        if self._shards.counts.get(topic) != 1:  # unresolved yet, or sharded
            keys = await self._shards.route(topic, task_id, stored_group)
        given = check_headers(headers)
        status = 0

        async def store() -> None:
            nonlocal status
            try:
                status, when = await self.scripts.send(
                    keys, task_id, absolute=absolute, value_ms=value_ms, max_attempts=attempts,
                    ttr_ms=ttr_ms, body=encode_headers(check_headers(given)) + data if given else data,
                    tolerance_ms=self._past_tolerance_ms, replace=replace, priority=priority,
                    durable=self._durable, group=stored_group,
                )  # fmt: skip
            except NotDurableError:
                await self.announce_quietly(topic)  # the task is stored
                raise
            if status < 0:
                raise self.too_far_past(value_ms, when)

        if self._hooks.send_hooks:
            given = (sending := Sending(self._queue, topic, (task_id,), given)).headers
            await self._hooks.around_send(sending, store)
        else:
            await store()
        if status in SENT_STATUSES and self._hooks.listeners:
            self._hooks.emit(TaskEvent("sent", topic, task_id))
        await self.announce_quietly(topic)
        return SendResult(task_id, SEND_STATUS[status])

    async def send_many(
        self,
        topic: str,
        bodies: Iterable[Any],
        *,
        delay: Duration | Sequence[Duration],
        task_ids: Iterable[str] | None,
        ttr: Duration | None,
        max_attempts: int | None,
        batch_size: int,
        on_conflict: OnConflict = "keep",
        priority: int = 0,
        headers: Mapping[str, str] | None = None,
        group: str | int | None = None,
    ) -> list[SendResult]:
        """Send many tasks to one topic, a script call per batch (see ``Queue.send_many``)."""
        keys = self._keys(topic)
        if self._strict:
            check_registered(topic, self._topics, self._queue)
        items = list(bodies)
        # Generated ids are sorted: with one delay for all, that is already the order below.
        ids = (
            sorted(new_task_ids(len(items)))
            if task_ids is None
            else [check_task_id(t) for t in task_ids]
        )
        delays = list(delay) if isinstance(delay, Sequence) else [delay] * len(items)
        if not (len(ids) == len(delays) == len(items)):
            raise InvalidInputError("bodies, task_ids and delay must have the same length")
        bounded_int(batch_size, "batch_size", 1, MAX_BATCH_SIZE)
        ttr_ms, attempts = task_overrides(ttr, max_attempts)
        replace = check_on_conflict(on_conflict)
        priority = check_priority(priority)
        adapter = self._adapter(topic)
        delays_ms = [to_millis(one_delay, name="delay") for one_delay in delays]
        encoded = [encode_body(topic, body, adapter, self._max_body_bytes) for body in items]
        groups = [self.group(topic, body, group) for body in items]
        grouped = any(g is not None for g in groups)
        order = schedule_order(ids, delays_ms)
        count = self._shards.counts.get(topic) or await self._shards.count(topic)
        # A grouped task's shard follows its group (the group's limits hold in one shard).
        routes = [g if g is not None else i for g, i in zip(groups, ids, strict=True)]
        if count > 1:  # one script call per shard (and batch), each share in schedule order
            order.sort(key=lambda n: shard_of(routes[n], count))  # stable
        sent_ids = [ids[n] for n in order]
        parts = self._parts(topic, keys, [routes[n] for n in order], count)
        given = check_headers(headers)
        statuses: list[int] = []

        async def store() -> None:
            nonlocal statuses
            prefix = encode_headers(check_headers(given)) if given else b""
            fields: list[str | int | bytes] = []
            for n in order:
                fields += (ids[n], delays_ms[n], prefix + encoded[n] if prefix else encoded[n])
                if grouped:
                    fields.append(groups[n] or NO_GROUP)
            statuses = []
            for shard, start, end in parts:
                send = functools.partial(
                    self.scripts.send_many, shard, max_attempts=attempts, ttr_ms=ttr_ms,
                    tolerance_ms=self._past_tolerance_ms, priority=priority, replace=replace,
                    grouped=grouped,
                )  # fmt: skip
                width = 4 if grouped else 3
                share = fields if len(parts) == 1 else fields[width * start : width * end]
                statuses += await self._store_batches(
                    topic, send, share, sent_ids[start:end], batch_size, width
                )

        if self._hooks.send_hooks and ids:
            given = (sending := Sending(self._queue, topic, sent_ids, given)).headers
            await self._hooks.around_send(sending, store)
        else:
            await store()
        if self._hooks.listeners and (stored := sum(s in SENT_STATUSES for s in statuses)):
            self._hooks.emit(TaskEvent("sent", topic, sent_ids[0], count=stored))
        await self.announce_quietly(topic)
        return send_results(ids, order, statuses)

    def group(self, topic: str, body: Any, group: str | int | None) -> str | None:
        """The group of a task sent to ``topic`` (:func:`~delayq.groups.task_group`), read
        from the body as the handler receives it (a dict sent to a topic whose body is a
        model is validated into the model first)."""
        options = self._options(topic) if self._options else None
        if group is None and options is not None and options.group_by is not None:
            adapter = self._adapter(topic)
            body = adapter.validate_python(body) if adapter is not None else body
        return task_group(options, body, group)

    def _parts(
        self, topic: str, keys: TopicKeys, sent_ids: list[str], count: int
    ) -> list[tuple[TopicKeys, int, int]]:
        """The shards ``send_many`` writes to, each with its share of ``sent_ids`` (grouped
        by shard) as [start, end); one part, the whole, for an unsharded topic.  ``sent_ids``
        are what routes each task: its id, or its group."""
        if count == 1:
            return [(keys, 0, len(sent_ids))]
        every = self._shards.of(topic, count)
        parts: list[tuple[TopicKeys, int, int]] = []
        start = 0
        for end in range(1, len(sent_ids) + 1):
            shard = shard_of(sent_ids[start], count)
            if end == len(sent_ids) or shard_of(sent_ids[end], count) != shard:
                parts.append((every[shard], start, end))
                start = end
        return parts

    async def _store_batches(
        self,
        topic: str,
        send: Callable[..., Awaitable[list[int]]],
        fields: list[str | int | bytes],
        sent_ids: list[str],
        batch_size: int,
        width: int = 3,
    ) -> list[int]:
        """Run send_many.lua (``send``) on ``fields`` (``width`` a task) in batches; returns
        each task's status, in the order sent."""
        batches = [
            fields[width * start : width * (start + batch_size)]
            for start in range(0, len(sent_ids), batch_size)
        ]
        if self._durable is None and (len(batches) < 2 or len(set(sent_ids)) == len(sent_ids)):
            return await send_overlapped(send, batches)
        # An id sent twice in different batches: one batch at a time, so that Redis runs
        # them in order (two in flight may take two connections) and the sends of that id
        # apply in the order given.
        statuses: list[int] = []
        for number, batch in enumerate(batches):
            try:
                statuses += await send(batch, durable=self._durable)
            except NotDurableError as exc:
                await self.announce_quietly(topic)  # the batch is stored
                raise NotDurableError(
                    exc.task_ids, confirmed=exc.confirmed, required=exc.required,
                    timeout_ms=exc.timeout_ms, unsent=sent_ids[(number + 1) * batch_size :],
                ) from None  # fmt: skip
        return statuses

    async def cancel(self, topic: str, task_id: str, running: bool = False) -> bool:
        """Run cancel.lua (see ``Queue.cancel``; ``running``: abort a reserved task too) and
        tell the listeners.  A topic registered here with ``history=N`` (``results=``)
        passes it (a script else reads what its workers recorded)."""
        history, results = self._history(topic), self._results(topic)
        cancelled = await self._shards.find(
            topic,
            task_id,
            lambda keys: self.scripts.cancel(keys, task_id, history, results, running=running),
            bool,
        )
        if cancelled and self._hooks.listeners:
            self._hooks.emit(TaskEvent("cancelled", topic, task_id))
        return cancelled > 0

    async def reschedule(
        self, topic: str, task_id: str, delay: Duration | None, at: datetime | None
    ) -> bool:
        """Run reschedule.lua (see ``Queue.reschedule``): True if the task moved."""
        if (delay is None) == (at is None):
            raise InvalidInputError("reschedule takes exactly one of delay= or at=")
        absolute = at is not None
        value_ms = to_epoch_millis(at) if at is not None else to_millis(delay or 0, name="delay")
        task_id = check_task_id(task_id)
        status, when = await self._shards.find(topic, task_id, lambda keys: self.scripts.reschedule(
            keys, task_id, absolute=absolute, value_ms=value_ms,
            tolerance_ms=self._past_tolerance_ms,
        ), lambda reply: reply[0] != 0)  # fmt: skip
        if status < 0:
            raise self.too_far_past(value_ms, when)
        return status == 1

    async def announce(self, topics: Iterable[str]) -> None:
        """Record topic names in the queue's topic set, which ``stats`` reads."""
        now = time.monotonic()
        new = [t for t in topics if now - self._announced.get(t, -ANNOUNCE_EVERY) >= ANNOUNCE_EVERY]
        if new:
            # Also after a send that stored its task: a failover must not fail that send.
            await run_command(self._redis, lambda: self._redis.sadd(topics_key(self._queue), *new))
            self._announced.update(dict.fromkeys(new, now))

    async def announce_quietly(self, topic: str) -> None:
        """Record ``topic`` for ``stats`` after a task was stored; a failure is only logged.

        The topic set only feeds stats(), so failing to update it must neither write
        anything for a rejected send nor fail a send that succeeded.
        """
        if time.monotonic() - self._announced.get(topic, -ANNOUNCE_EVERY) < ANNOUNCE_EVERY:
            return
        try:
            await self.announce([topic])
        except DelayqError as exc:
            log.warning("could not record topic %r for stats: %s", topic, exc)

    def too_far_past(self, at_ms: int, redis_now_ms: int) -> InvalidDurationError:
        """The error for an absolute time further in the past than the tolerance."""
        return InvalidDurationError(
            f"at={from_millis(at_ms).isoformat()} is more than {self._past_tolerance_ms} ms "
            f"in the past (Redis time {from_millis(redis_now_ms).isoformat()})"
        )


async def send_overlapped(
    send: Callable[[list[str | int | bytes]], Awaitable[list[int]]],
    batches: list[list[str | int | bytes]],
) -> list[int]:
    """Run send_many.lua on each batch, the next one sent while Redis runs the previous
    (two in flight): the client's packing and parsing of one batch hides behind Redis's
    work on the other, instead of the two taking turns.  Returns each task's status."""
    in_flight: list[asyncio.Future[list[int]]] = []
    statuses: list[int] = []
    try:
        for batch in batches:
            in_flight.append(asyncio.ensure_future(send(batch)))
            if len(in_flight) == 2:
                statuses += await in_flight.pop(0)
        while in_flight:
            statuses += await in_flight.pop(0)
        return statuses
    finally:
        for call in in_flight:  # left by a failure: its batch may or may not be stored
            call.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
