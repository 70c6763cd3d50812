"""The worker: fetch loops that lease tasks, a fixed pool of consumers that run handlers,
batched acks, and a two-stage graceful stop.

Shape of a running worker (one asyncio.TaskGroup)::

    Wakeup ──sets──▶ per-topic event ──▶ fetch loop (one per topic) ──reserve.lua──▶ buffer
    buffer ──▶ `concurrency` consumers ──▶ handler ──▶ Acker (ack.lua, batched) | nack.lua

A consumer frees its slot once its ack is queued, so the next reserve travels with the
acks' flush rather than a round trip after it.

A fetch loop never polls: it sleeps until the next due time or lease deadline that
reserve.lua returned (Redis's clock, measured as a delta) or until woken by a publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING, Any

from delayq.cancel import cancel_all, cancelled_from_outside, first_of, raise_if_cancelling
from delayq.codec import decode_body
from delayq.duration import Duration, to_millis, to_seconds
from delayq.errors import (
    BodyTooLargeError,
    BodyValidationError,
    DelayqError,
    InvalidInputError,
    LeaseLostError,
    RedisUnavailableError,
    Retry,
    UnsupportedRedisError,
)
from delayq.redis.checks import check_server
from delayq.redis.wakeup import Wakeup
from delayq.task import Envelope, Task, from_millis
from delayq.worker.acker import Acker
from delayq.worker.declare import declare_limits
from delayq.worker.lease import Deadlines, Delivery, Slots, local_deadline

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import NackMode
    from delayq.topic import Topic
    from delayq.worker.source import TaskSource

log = logging.getLogger("delayq.worker")

MAX_BATCH = 100
"""Most tasks one reserve.lua call leases (bounds the script's run time)."""
MAX_RECLAIM = 100
"""Most expired leases one reserve.lua call reclaims."""
IDLE_RECHECK = 2.0
"""Longest sleep of an idle fetch loop.  Precision comes from due times and wake-ups; this
only bounds the damage of a silently dead pub/sub connection."""
MAX_ERROR_CHARS = 2000
MAX_LOGGED_IDS = 10
SKIP_REASONS = {
    "missing": "dropped: scheduled or leased, but the stored task is missing (a send whose "
    "HSET failed, e.g. denied by an ACL, or a field deleted by hand); nothing to run",
    "corrupt": "dead-lettered as CorruptTask: the stored envelope is unreadable",
}
"""What reserve.lua reports for entries it could not lease, as the worker logs them."""
STOP_TIMEOUT = 1.0
"""After the grace period, how long cancelled handlers get to unwind before we move on."""


class Worker:
    """Runs the handlers of a queue's topics.  Usually started with ``Queue.run_worker``.

    Args:
        queue: the queue whose registered topics to consume.
        concurrency: most handlers running at once.
        topics: names of registered topics to consume (default: all).
        grace: on stop, how long running handlers may finish before being cancelled.
    """

    def __init__(
        self,
        queue: TaskSource,
        *,
        concurrency: int = 50,
        topics: Iterable[str] | None = None,
        grace: Duration = 10.0,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInputError(f"concurrency must be a positive int, got {concurrency!r}")
        names = list(queue.topics) if topics is None else list(topics)
        unknown = [name for name in names if name not in queue.topics]
        if unknown:
            raise InvalidInputError(f"no handler registered for topic(s) {', '.join(unknown)}")
        if not names:
            raise InvalidInputError("no topics to consume: register a handler with @queue.topic")
        self.queue = queue
        self.concurrency = concurrency
        self.grace = to_seconds(grace, name="grace")
        self.topics = [queue.topics[name] for name in dict.fromkeys(names)]
        self._batch = min(concurrency, MAX_BATCH)
        self._stopping = asyncio.Event()
        self._grace_over = asyncio.Event()
        self._held: dict[tuple[str, str], Delivery] = {}
        self._buffer: asyncio.Queue[Delivery] = asyncio.Queue()
        self._slots = Slots(concurrency)
        self._deadlines = Deadlines()
        self._running = 0
        self._idle = asyncio.Event()
        self._wakeup = Wakeup(queue.redis, [queue.keys(t.name).wake for t in self.topics])
        self._acker = Acker(queue.scripts, self._acked, limit=concurrency)

    def stop(self) -> None:
        """Stop reserving and shut down gracefully (idempotent).  A second call skips the grace."""
        if self._stopping.is_set():
            self._grace_over.set()
            return
        log.info(
            "stopping: no new tasks; %d running get %.1fs to finish", self._running, self.grace
        )
        self._stopping.set()
        self._slots.wake()
        self._wakeup.set_all()

    @property
    def held(self) -> int:
        """Tasks leased by this worker and not yet finished."""
        return len(self._held)

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until :meth:`stop` (or SIGINT/SIGTERM); cancelling it also stops cleanly."""
        await self._wait_for_redis()
        # Before any lease: the fleet enforces what the last worker to start declared.
        await declare_limits(self.queue, self.topics)
        try:
            await self.queue.announce(t.name for t in self.topics)
        except DelayqError as exc:
            # The topic set only feeds stats(); consuming must not depend on it.
            log.warning("could not record topics for stats: %s", exc)
        loop = asyncio.get_running_loop()
        signals = self._install_signals(loop) if handle_signals else []
        log.info(
            "worker started: topics=%s concurrency=%d",
            [t.name for t in self.topics],
            self.concurrency,
        )
        # Consumers live outside the TaskGroup: a handler that ignores cancellation (some
        # libraries swallow it on Python 3.11) must not keep run() from returning.
        consumers = [asyncio.create_task(self._consume()) for _ in range(self.concurrency)]
        try:
            async with asyncio.TaskGroup() as group:
                wakeup = group.create_task(self._wakeup.run(), name="delayq-wakeup")
                acker = group.create_task(self._acker.run(), name="delayq-acker")
                fetchers = [group.create_task(self._fetch(t)) for t in self.topics]
                await self._stopping.wait()
                await self._shutdown(fetchers, consumers, acker)
                wakeup.cancel()
        finally:
            stuck = await cancel_all(consumers, within=STOP_TIMEOUT)
            if stuck:
                # Their leases are released below and fenced: if they ever finish, their acks
                # are refused and the redelivery stands.
                log.error("%d handler(s) ignored cancellation; releasing their tasks", len(stuck))
            # Reached on a normal stop with nothing held, or when run() itself was cancelled:
            # hand back every lease still held so it is redelivered now, not after its TTR.
            await self._release(list(self._held.values()), "worker stopped")
            self._deadlines.clear()
            for sig in signals:
                loop.remove_signal_handler(sig)
            log.info("worker stopped")

    async def _wait_for_redis(self) -> None:
        retry_in = 0.1
        while True:
            try:
                await check_server(self.queue.redis)
                return
            except UnsupportedRedisError:
                raise
            except RedisUnavailableError as exc:
                log.warning("waiting for Redis: %s", exc)
                await asyncio.sleep(retry_in)
                retry_in = min(retry_in * 2, 2.0)

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        installed: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (ValueError, RuntimeError, NotImplementedError):
                continue  # not the main thread, or no signal support: stop() still works
            installed.append(sig)
        return installed

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch(self, topic: Topic[Any]) -> None:
        keys = self.queue.keys(topic.name)
        wake = self._wakeup.event(keys.wake)
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            raise_if_cancelling()
            wanted = await self._slots.take(self._batch, self._stopping)
            if not wanted:
                return
            wake.clear()
            started = loop.time()
            try:
                found = await self.queue.scripts.reserve_reporting(
                    keys, limit=wanted, reclaim=MAX_RECLAIM,
                    ttr_ms=topic.options.ttr_ms, max_attempts=topic.options.max_attempts,
                )  # fmt: skip
            except DelayqError as exc:
                self._slots.give(wanted)
                failures += 1
                pause = min(0.05 * 2**failures, 1.0)
                log.warning("reserve on %r failed (%s); retrying in %.2fs", topic.name, exc, pause)
                await self._sleep(wake, pause)
                continue
            failures = 0
            if found.skipped:
                log_skipped(topic.name, found.skipped)
            items = found.items
            self._slots.give(wanted - len(items))
            for task_id, raw in items:
                self._accept(topic, keys, task_id, raw, started)
            if len(items) < wanted:
                next_ms, now_us = found.next_ms, found.now_us
                pause = (next_ms * 1000 - now_us) / 1e6 if next_ms >= 0 else IDLE_RECHECK
                if pause > 0:
                    await self._sleep(wake, min(pause, IDLE_RECHECK))

    def _accept(
        self, topic: Topic[Any], keys: TopicKeys, task_id: str, raw: bytes, started: float
    ) -> None:
        envelope = Envelope.parse(raw)  # reserve.lua already checked the header
        ttr_ms = envelope.ttr_ms or topic.options.ttr_ms
        # End the handler a little before Redis ends the lease, so that its failure is
        # recorded (with backoff) before another worker's reserve can reclaim the task.
        deadline = local_deadline(started, ttr_ms)
        delivery = Delivery(topic, keys, task_id, envelope, deadline=deadline)
        self._held[(topic.name, task_id)] = delivery
        self._deadlines.add(delivery)
        self._buffer.put_nowait(delivery)

    async def _sleep(self, wake: asyncio.Event, seconds: float) -> None:
        if self._stopping.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await wake.wait()

    # -- running handlers -------------------------------------------------------------------

    async def _consume(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        while True:
            delivery = await self._buffer.get()
            self._running += 1
            self._idle.clear()
            try:
                await self._execute(delivery, me)
            except Exception:
                # A bug of ours must not take the worker down; the lease expires and the
                # task is redelivered.
                log.exception(
                    "unexpected error running %s/%s", delivery.topic.name, delivery.task_id
                )
            finally:
                self._running -= 1
                if not self._running:
                    self._idle.set()
                self._slots.give(1)
            raise_if_cancelling()

    async def _execute(self, d: Delivery, me: asyncio.Task[Any]) -> None:
        topic, envelope = d.topic, d.envelope
        if d.expired:
            # Leased, then left in the buffer past its deadline (a handler blocked the
            # loop): another worker may run it soon, so this one must not start.
            error = "TTRExceeded: the lease ran out before the handler started"
            await self._nack(d, "retry", self._backoff_ms(d), error)
            return
        try:
            body = decode_body(topic.name, envelope.body, topic.adapter, self.queue.max_body_bytes)
        except (BodyValidationError, BodyTooLargeError) as exc:
            self._deadlines.done(d)
            # No attempt can succeed with this body: dead at once (_nack logs it).
            await self._nack(d, "dead", 0, f"{type(exc).__name__}: {exc}")
            return
        task = Task(
            id=d.task_id, topic=topic.name, attempt=envelope.attempts,
            max_attempts=envelope.max_attempts or topic.options.max_attempts,
            due_at=from_millis(envelope.due_ms), enqueued_at=from_millis(envelope.enqueued_ms),
            ttr=(envelope.ttr_ms or topic.options.ttr_ms) / 1000, token=envelope.token,
            extend=lambda seconds: self._extend(d, seconds),
        )  # fmt: skip
        try:
            await self._run_handler(d, body, task, me)
        except Retry as retry:
            await self._retry(d, retry)
        except asyncio.CancelledError as exc:
            if cancelled_from_outside():
                raise
            # The handler raised CancelledError itself (e.g. from a cancelled inner task):
            # that is its failure, not ours to stop on.
            await self._nack(d, "retry", self._backoff_ms(d), f"CancelledError: {exc}")
        except BaseException as exc:
            if isinstance(exc, TimeoutError) and d.expired:
                error = f"TTRExceeded: handler still running after its {task.ttr:g}s lease"
            else:
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "handler for %s/%s failed: %s", topic.name, d.task_id, error, exc_info=exc
                )
            await self._nack(d, "retry", self._backoff_ms(d), error)
        else:
            # The slot is free once the ack is queued (see Acker); _acked ends the delivery.
            self._acker.submit(d)
            await self._acker.room()

    async def _run_handler(self, d: Delivery, body: Any, task: Task, me: asyncio.Task[Any]) -> None:
        """Run ``d``'s handler in ``me`` (this task); TimeoutError once its lease runs out."""
        self._deadlines.watch(d, me)
        try:
            await d.topic(body, task)
        except asyncio.CancelledError as exc:
            if self._deadlines.done(d):
                raise TimeoutError from exc
            raise
        finally:
            self._deadlines.done(d)

    def _acked(self, d: Delivery, acked: bool) -> None:
        self._held.pop((d.topic.name, d.task_id), None)
        if not acked:
            log.warning("ack of %s/%s refused: its lease was lost", d.topic.name, d.task_id)

    @staticmethod
    def _backoff_ms(d: Delivery) -> int:
        return to_millis(d.topic.options.backoff.delay(d.envelope.attempts), name="backoff")

    async def _retry(self, d: Delivery, retry: Retry) -> None:
        error = f"Retry: {retry.reason}" if retry.reason else "Retry: requested by the handler"
        if retry.delay is None:
            delay_ms = self._backoff_ms(d)
        else:
            try:
                delay_ms = to_millis(retry.delay, name="Retry.delay")
            except InvalidInputError as exc:
                log.warning(
                    "%s/%s raised Retry with %s; using the backoff", d.topic.name, d.task_id, exc
                )
                delay_ms, error = self._backoff_ms(d), f"{type(exc).__name__}: {exc}"
        await self._nack(d, "retry", delay_ms, error)

    async def _nack(self, d: Delivery, mode: NackMode, delay_ms: int, error: str) -> None:
        try:
            outcome, _ = await self.queue.scripts.nack(
                d.keys, d.task_id, d.envelope.token, mode=mode, delay_ms=delay_ms,
                error=error[:MAX_ERROR_CHARS], max_attempts=d.topic.options.max_attempts,
            )  # fmt: skip
        except DelayqError as exc:
            # The lease stays in Redis and expires: the task is redelivered, not lost.
            log.warning("could not record the outcome of %s/%s (%s)", d.topic.name, d.task_id, exc)
            return
        self._held.pop((d.topic.name, d.task_id), None)
        if outcome == 0 and mode == "release":
            # Usually an ack that landed while we were stopping: nothing to hand back.
            log.debug("nothing to release for %s/%s", d.topic.name, d.task_id)
        elif outcome == 0:
            log.warning("%s of %s/%s refused: its lease was lost", mode, d.topic.name, d.task_id)
        elif outcome == 2:
            log.warning("dead-lettered %s/%s: %s", d.topic.name, d.task_id, error)

    async def _extend(self, d: Delivery, seconds: float) -> None:
        ms = to_millis(seconds, name="seconds", allow_zero=False)
        # Measured from before the call, like the lease itself, so the handler's timeout
        # still precedes the new end of the lease in Redis.
        sent = asyncio.get_running_loop().time()
        deadline = await self.queue.scripts.extend(d.keys, d.task_id, d.envelope.token, ms)
        if not deadline:
            raise LeaseLostError(f"lease of {d.topic.name}/{d.task_id} was lost")
        self._deadlines.extend(d, local_deadline(sent, ms))

    # -- stopping ---------------------------------------------------------------------------

    async def _shutdown(
        self,
        fetchers: list[asyncio.Task[None]],
        consumers: list[asyncio.Task[None]],
        acker: asyncio.Task[None],
    ) -> None:
        # 1. Stop leasing; a fetch loop finishes the reserve call it is in, so no reply is lost.
        await asyncio.gather(*fetchers, return_exceptions=True)
        # 2. Leased but not started: hand back at once.
        waiting = []
        while not self._buffer.empty():
            waiting.append(self._buffer.get_nowait())
        await self._release(waiting, "worker stopping before the task started")
        # 3. Running handlers get the grace period (a second signal ends it early).
        if self._running:
            await first_of(self._idle, self._grace_over, within=self.grace)
        # 4. Cancel what still runs; its leases are released in run()'s finally.
        await cancel_all(consumers, within=STOP_TIMEOUT)
        self._acker.close()
        await acker

    async def _release(self, deliveries: list[Delivery], reason: str) -> None:
        if not deliveries:
            return
        log.info("releasing %d task(s): %s", len(deliveries), reason)
        await asyncio.gather(*(self._nack(d, "release", 0, "") for d in deliveries))


def log_skipped(topic: str, skipped: list[tuple[str, str]]) -> None:
    """Warn about the entries a reserve dropped or buried, naming at most
    :data:`MAX_LOGGED_IDS` ids per reason: they never reach a handler."""
    for reason, what in SKIP_REASONS.items():
        ids = [task_id for task_id, why in skipped if why == reason]
        if ids:
            shown = ", ".join(map(repr, ids[:MAX_LOGGED_IDS]))
            more = f" and {len(ids) - MAX_LOGGED_IDS} more" if len(ids) > MAX_LOGGED_IDS else ""
            log.warning("topic %r: %d task(s) %s: %s%s", topic, len(ids), what, shown, more)
