"""Consuming without a handler: lease tasks, then ack, nack or extend them by a lease token.

This is what a consumer that is not a delayq worker uses, e.g. a service in another
language behind the HTTP API (``delayq.web``).  The protocol is the worker's, with the
same scripts and the same fencing: every lease carries a fresh fencing token, and an ack,
nack or extend whose token is no longer the task's (its lease expired and the task was
leased again) changes nothing and raises :class:`~delayq.errors.LeaseLostError`.

A waiting :meth:`Consumer.lease` is a long poll that never polls Redis: it sleeps until
the topic's next due time or lease deadline (Redis's clock, from the reserve reply), or
until a wake-up published by the scripts arrives on the queue's pattern subscription
(:class:`~delayq.redis.wakeup.WakeupHub`, one per queue, opened on the first wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field

from delayq.bounds import bounded_int
from delayq.codec import DEFAULT_MAX_BODY_BYTES
from delayq.duration import Duration, to_millis, to_seconds
from delayq.errors import InvalidDurationError, InvalidInputError, LeaseLostError
from delayq.events import Hooks, TaskEvent
from delayq.lease_token import LeaseHandle
from delayq.redis.keys import shard_wake_pattern, wake_pattern
from delayq.redis.wakeup import LazyHub, Signal, WakeupHub
from delayq.results import encode_result
from delayq.task import Envelope, from_millis
from delayq.worker.execution import MAX_ERROR_CHARS
from delayq.worker.report import log_skipped, nack_event, tell_reclaimed
from delayq.worker.runner import IDLE_RECHECK, MAX_BATCH, MAX_RECLAIM

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis.asyncio import Redis

    from delayq.events import EventKind
    from delayq.redis.keys import TopicKeys
    from delayq.redis.replies import Reservation
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap
    from delayq.topic import TopicOptions

T = TypeVar("T")

log = logging.getLogger("delayq")

MAX_WAIT_SECONDS = 30.0
"""Longest a :meth:`Consumer.lease` call may wait for a task."""


class LeasedTask(BaseModel):
    """A task leased by :meth:`Consumer.lease`: run it, then ack, nack or extend its lease."""

    model_config = ConfigDict(frozen=True)

    lease_token: str
    """Names this lease in :meth:`Consumer.ack`, ``nack`` and ``extend``."""
    id: str
    topic: str
    attempt: int
    """1 on the first delivery, 2 on the first retry, ..."""
    max_attempts: int
    """The attempt after which a failing task is dead-lettered."""
    due_at: datetime
    enqueued_at: datetime
    lease_deadline: datetime
    """When the lease ends unless extended (Redis's clock): the task is then leased again."""
    body: Any
    """The JSON body, decoded."""
    headers: dict[str, str] = Field(default_factory=dict)
    """The headers sent with the task (empty for none)."""


class NackResult(BaseModel):
    """What a nack did: the task is scheduled again at ``at``, or dead-lettered at ``at``."""

    model_config = ConfigDict(frozen=True)

    outcome: Literal["retry", "dead"]
    at: datetime


class Consumer:
    """Lease, ack, nack and extend without a registered handler (``Queue.consumer``).

    Args:
        redis: the client whose pool lends the wake-up subscription its connection.
        scripts: runs reserve, ack, nack and extend.
        queue: the queue's name.
        keys: the key names of a topic (validates the topic).
        options: the options of a topic: its registered handler's, or the defaults.
        hooks: the queue's hooks: its event listeners are told what this consumer's leases
            became, as a worker's deliveries (``delivered`` at the lease, ``acked``,
            ``retried``, ``dead``, ``lease_lost``, ``expired``), each with ``consumer`` set.
        shards: routes a sharded topic's leases (each shard in turn) and its lease tokens
            (by task id, as every call by id) to their shards.
    """

    def __init__(
        self,
        redis: Redis,
        scripts: Scripts,
        *,
        queue: str,
        keys: Callable[[str], TopicKeys],
        options: Callable[[str], TopicOptions],
        hooks: Hooks | None = None,
        shards: ShardMap | None = None,
        max_result_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._max_result_bytes = max_result_bytes
        self._hooks = hooks if hooks is not None else Hooks()
        self._shards = shards
        self._turn: dict[str, int] = {}  # the shard a sharded topic's next lease starts at
        self._scripts = scripts
        self._keys = keys
        self._options = options
        patterns = (wake_pattern(queue), shard_wake_pattern(queue))
        self._hub = LazyHub(lambda: WakeupHub(redis, *patterns), "delayq-wakeup-hub")

    async def lease(
        self, topic: str, *, limit: int = 1, wait: Duration = 0.0, ttr: Duration | None = None
    ) -> list[LeasedTask]:
        """Lease up to ``limit`` due tasks of ``topic``, waiting up to ``wait`` for one.

        Returns as soon as at least one task was leased, or empty-handed once ``wait`` ran
        out.  Expired leases of the topic are reclaimed on the way, as a worker's reserve
        does.

        Args:
            topic: the topic to consume.
            limit: most tasks to lease, 1..100.
            wait: seconds (up to 30) to wait for a task to fall due; 0 answers at once.
            ttr: the lease length for tasks without their own (default: the topic's, i.e.
                its registered handler's, else 30 s).

        Raises:
            InvalidInputError: a bad topic, limit, wait or ttr (nothing is leased).
            RedisUnavailableError: Redis could not be reached.
        """
        keys = self._keys(topic)
        bounded_int(limit, "limit", 1, MAX_BATCH)
        wait_s = to_seconds(wait, name="wait")
        if wait_s > MAX_WAIT_SECONDS:
            raise InvalidDurationError(f"wait must be at most {MAX_WAIT_SECONDS:g} s, got {wait!r}")
        options = self._options(topic)
        ttr_ms = options.ttr_ms if ttr is None else to_millis(ttr, name="ttr", allow_zero=False)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_s
        every = await self._every(topic, keys)
        channels = [k.wake for k in every]
        signal = await self._signal(channels, wait_s) if wait_s > 0 else None
        while True:
            woken = signal.watch() if signal is not None else None  # before looking
            found = await self._reserve(topic, every, limit, ttr_ms, options.max_attempts)
            left = give_up - loop.time()
            leased_any = any(f.items for f in found)
            if leased_any or woken is None or left <= 0:
                tasks = []
                for reply in found:
                    now_ms = reply.now_us // 1000
                    for task_id, raw in reply.items:
                        tasks.append(self._leased(topic, task_id, raw, now_ms, ttr_ms, options))
                return tasks
            pause = min(left, IDLE_RECHECK)
            for reply in found:
                if reply.next_ms >= 0:
                    pause = min(pause, (reply.next_ms * 1000 - reply.now_us) / 1e6)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await woken.wait()

    async def _every(self, topic: str, keys: TopicKeys) -> list[TopicKeys]:
        """Every shard of ``topic`` (``keys``, shard 0's, for an unsharded one)."""
        if self._shards is None:
            return [keys]
        count = self._shards.counts.get(topic) or await self._shards.count(topic)
        return [keys] if count == 1 else self._shards.of(topic, count)

    def _history(self, topic: str) -> int:
        """The history records ``topic`` keeps as registered here, or -1: the scripts then
        read the setting its workers recorded, so that a consumer that never registered the
        topic (``delayq web`` with no app) records its tasks too."""
        return self._options(topic).history or -1

    def _results(self, topic: str) -> int:
        """How long ``topic`` keeps results as registered here (ms), or -1: as its workers say."""
        return self._options(topic).results_ms or -1

    async def _reserve(
        self, topic: str, every: list[TopicKeys], limit: int, ttr_ms: int, max_attempts: int
    ) -> list[Reservation]:
        """Lease up to ``limit`` tasks from the shards in ``every``, starting at the shard
        after the one the previous lease of ``topic`` started at (no shard is always last)."""
        start = self._turn.get(topic, 0) % len(every)
        if len(every) > 1:
            self._turn[topic] = start + 1
        replies: list[Reservation] = []
        wanted = limit
        for n in range(len(every)):
            found = await self._scripts.reserve_reporting(
                every[(start + n) % len(every)], limit=wanted, reclaim=MAX_RECLAIM,
                ttr_ms=ttr_ms, max_attempts=max_attempts, history=self._history(topic),
                results=self._results(topic),
            )  # fmt: skip
            if found.skipped:
                log_skipped(topic, found.skipped)
            if found.reclaimed and self._hooks.listeners:
                tell_reclaimed(self._hooks, topic, found.reclaimed)
            replies.append(found)
            wanted -= len(found.items)
            if not wanted:
                break
        return replies

    def _leased(
        self, topic: str, task_id: str, raw: bytes, now_ms: int, ttr_ms: int,
        options: TopicOptions,
    ) -> LeasedTask:  # fmt: skip
        envelope = Envelope.parse(raw)  # reserve.lua already checked the header
        if self._hooks.listeners:
            self._hooks.emit(TaskEvent(
                "delivered", topic, task_id, envelope.attempts,
                lateness=(now_ms - envelope.due_ms) / 1000,
                headers=envelope.headers, due_ms=envelope.due_ms, consumer=True,
            ))  # fmt: skip
        return leased(topic, task_id, envelope, now_ms, ttr_ms, options)

    async def _by_id(
        self,
        handle: LeaseHandle,
        call: Callable[[TopicKeys], Awaitable[T]],
        found: Callable[[T], bool],
    ) -> T:
        """Run ``call`` on the shard holding a lease's task (found from its id, as every
        call by id: :meth:`delayq.shards.ShardMap.find`)."""
        if self._shards is None:
            return await call(self._keys(handle.topic))
        return await self._shards.find(handle.topic, handle.task_id, call, found)

    async def ack(self, lease_token: str, result: Any = None) -> None:
        """Finish the leased task: it is deleted.  ``result`` is its return value, stored
        when its topic keeps results (``results=``; encoded like a body, and, like a
        handler's, replaced by why when it cannot be stored).

        Raises:
            InvalidInputError: ``lease_token`` is not a lease token.
            LeaseLostError: the lease is no longer held (it expired and the task was
                leased again, or it was already acked or nacked): nothing changed.
        """
        handle = LeaseHandle.parse(lease_token)
        cap = self._history(handle.topic)  # recorded as ended now, start unknown
        lease: tuple[str | bytes, ...] = (handle.task_id, handle.fencing_token, ",")[
            : 3 if cap else 2
        ]
        results = self._results(handle.topic)
        lease += (encode_result(handle.topic, handle.task_id, result, self._max_result_bytes),)
        (acked,) = await self._by_id(
            handle,
            lambda keys: self._scripts.ack(keys, [lease], history=cap, results=results),
            lambda r: r[0],
        )
        self._tell("acked" if acked else "lease_lost", handle)
        if not acked:
            raise _lost(handle)

    async def nack(
        self,
        lease_token: str,
        *,
        delay: Duration | None = None,
        dead: bool = False,
        error: str = "",
    ) -> NackResult:
        """End the lease without success: retry after ``delay``, or dead-letter.

        Args:
            lease_token: the lease.
            delay: until the next attempt; ``None``: the topic's backoff for this attempt.
                A task that had its last attempt is dead-lettered instead.
            dead: dead-letter it now, whatever attempts are left.
            error: recorded as the task's ``last_error`` (cut at 2,000 characters);
                empty keeps the previous one.

        Raises:
            InvalidInputError: a malformed token or delay.
            LeaseLostError: the lease is no longer held: nothing changed.
        """
        handle = LeaseHandle.parse(lease_token)
        options = self._options(handle.topic)
        if delay is None:
            delay = options.backoff.delay(handle.attempt)
        delay_ms = to_millis(delay, name="delay")
        if not isinstance(error, str):
            raise InvalidInputError(f"error must be a str, got {type(error).__name__}")
        outcome, when = await self._by_id(handle, lambda keys: self._scripts.nack(
            keys, handle.task_id, handle.fencing_token, mode="dead" if dead else "retry",
            delay_ms=delay_ms, error=error[:MAX_ERROR_CHARS], max_attempts=options.max_attempts,
            history=self._history(handle.topic), results=self._results(handle.topic),
        ), lambda reply: reply[0] != 0)  # fmt: skip
        self._tell(nack_event("dead" if dead else "retry", outcome), handle, error)
        if outcome == 0:
            raise _lost(handle)
        return NackResult(outcome="retry" if outcome == 1 else "dead", at=from_millis(when))

    async def extend(self, lease_token: str, seconds: Duration) -> datetime:
        """Make the lease end ``seconds`` from now (it is never shortened).

        Returns:
            When the lease now ends (Redis's clock).

        Raises:
            InvalidInputError: a malformed token, or ``seconds`` not a positive duration.
            LeaseLostError: the lease is no longer held: nothing changed.
        """
        handle = LeaseHandle.parse(lease_token)
        ms = to_millis(seconds, name="seconds", allow_zero=False)
        deadline = await self._by_id(
            handle,
            lambda keys: self._scripts.extend(keys, handle.task_id, handle.fencing_token, ms),
            bool,
        )
        if not deadline:
            raise _lost(handle)
        return from_millis(deadline)

    def _tell(self, kind: EventKind, handle: LeaseHandle, error: str = "") -> None:
        if self._hooks.listeners:
            self._hooks.emit(TaskEvent(
                kind, handle.topic, handle.task_id, handle.attempt,
                error=error[:MAX_ERROR_CHARS] or None, consumer=True,
            ))  # fmt: skip

    async def aclose(self) -> None:
        """Stop the wake-up subscription, if a waiting lease opened one."""
        await self._hub.aclose()

    async def _signal(self, channels: list[str], within: float) -> Signal:
        """The wake-up signal of ``channels`` (a topic's shards share one), once the
        queue's subscription is confirmed (waiting at most ``within`` s; after that the
        lease sleeps by the schedule alone)."""
        hub = self._hub.on(asyncio.get_running_loop())
        signal = hub.signal(*channels)  # first: on a cluster it subscribes to the channels
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await hub.subscribed.wait()
        return signal


def leased(
    topic: str, task_id: str, envelope: Envelope, now_ms: int, ttr_ms: int, options: TopicOptions
) -> LeasedTask:
    """A :class:`LeasedTask` from one task of a reserve reply."""
    max_attempts = options.max_attempts
    try:
        body = pydantic_core.from_json(envelope.body)
    except ValueError:
        body = envelope.body.decode(errors="replace")
    handle = LeaseHandle(topic, task_id, envelope.token, envelope.attempts)
    return LeasedTask(
        lease_token=handle.encode(), id=task_id, topic=topic, attempt=envelope.attempts,
        max_attempts=envelope.max_attempts or max_attempts, due_at=from_millis(envelope.due_ms),
        enqueued_at=from_millis(envelope.enqueued_ms),
        lease_deadline=from_millis(now_ms + (envelope.ttr_ms or ttr_ms)), body=body,
        headers=dict(envelope.headers),
    )  # fmt: skip


def _lost(handle: LeaseHandle) -> LeaseLostError:
    return LeaseLostError(
        f"lease of {handle.topic}/{handle.task_id} (token {handle.fencing_token}) is no longer held"
    )
