"""The worker: fetch loops that lease tasks, a fixed pool of consumers that run handlers,
batched acks, and a two-stage graceful stop.

Shape of a running worker (one asyncio.TaskGroup)::

    Wakeup ──sets──▶ per-shard event ──▶ fetch loop (one per topic shard) ──reserve.lua──▶ buffer
    buffer ──▶ `concurrency` consumers ──▶ Executor: middleware ▶ handler ──▶ Acker | nack.lua

The queue's lifespan is entered around all of it.  Running a delivery (its chain of
middleware and handler, the TTR, recording the outcome) is :mod:`delayq.worker.execution`'s
job.  A consumer frees its slot once its ack is queued, so the next reserve travels with the
acks' flush rather than a round trip after it.

A fetch loop never polls: it sleeps until the next due time or lease deadline that
reserve.lua returned (Redis's clock, measured as a delta) or until woken by a publish.
A sharded topic has a fetch loop per shard, each with its own wake channel and sleep, so
a shard's due tasks never wait for another shard's; the loops take free handler slots in
turn (:class:`~delayq.worker.lease.Slots` wakes its waiters in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Self

import anyio

from delayq.bounds import bounded_int
from delayq.cancellation import cancel_all, first_of, raise_if_cancelling
from delayq.duration import Duration, to_seconds
from delayq.errors import DelayqError, LifespanError, RedisUnavailableError
from delayq.middleware import lifespan_context
from delayq.pacing import Outage, RetryPacing
from delayq.redis.checks import wait_for_server
from delayq.redis.wakeup import Wakeup
from delayq.task import Envelope
from delayq.worker.chain import build_chain
from delayq.worker.declare import consumed_topics, declare_limits
from delayq.worker.embedded import start as start_embedded
from delayq.worker.embedded import stop as stop_embedded
from delayq.worker.execution import Executor
from delayq.worker.heartbeat import DEFAULT_INTERVAL, Heartbeat, heartbeat_seconds
from delayq.worker.keepers import periodic_keepers, start_keepers
from delayq.worker.lease import Deadlines, Delivery, Slots, local_deadline
from delayq.worker.report import Reporter, log_skipped, tell_reclaimed
from delayq.worker.rollup import prepare
from delayq.worker.signals import install_signals
from delayq.worker.takeover import run_schedules

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable
    from types import TracebackType

    from delayq.redis.keys import TopicKeys
    from delayq.task import Outcome
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
STOP_TIMEOUT = 1.0
"""After the grace period, how long cancelled handlers get to unwind before we move on."""


class Worker:
    """Runs the handlers of a queue's topics.  Usually started with ``Queue.run_worker``.

    Args:
        queue: the queue whose registered topics to consume.
        concurrency: most handlers running at once.
        topics: names of registered topics to consume (default: all).
        grace: on stop, how long running handlers may finish before they are cancelled and
            their tasks released for immediate redelivery.
        on_outcome: called with the :class:`~delayq.task.Outcome` of every delivery this
            worker acked, retried or dead-lettered: an alias of an event listener
            (``queue.hooks.add_listener``) told only this worker's ``acked``, ``retried`` and
            ``dead`` events (it must not block, and an exception it raises is logged).
        threads: most plain ``def`` handlers running at once, each in a worker thread
            (default: ``concurrency``); the limiter is this worker's own.
        heartbeat: seconds between the heartbeats that keep this worker in the queue's
            registry of live workers (``Queue.workers()``); its entry expires after three.
    """

    def __init__(
        self, queue: TaskSource, *, concurrency: int = 50, topics: Iterable[str] | None = None,
        grace: Duration = 10.0, on_outcome: Callable[[Outcome], None] | None = None,
        threads: int | None = None, heartbeat: Duration = DEFAULT_INTERVAL,
    ) -> None:  # fmt: skip
        bounded_int(concurrency, "concurrency", 1)
        names = consumed_topics(queue, topics)
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
        self._shards = [(t, keys) for t in self.topics for keys in queue.shard_keys(t.name)]
        # One for all the worker's loops: an outage is one WARNING, not one per loop and retry.
        self._outage = Outage(log)
        self.heartbeat = Heartbeat(
            queue.registry, kind="worker", topics=[t.name for t in self.topics],
            concurrency=concurrency, running=lambda: self._running, outage=self._outage,
            interval=heartbeat_seconds(heartbeat), schedules=run_schedules(self.topics),
        )  # fmt: skip
        self._wakeup = Wakeup(queue.redis, [keys.wake for _, keys in self._shards], self._outage)
        self._embedded: asyncio.Task[None] | None = None
        self.threads = concurrency if threads is None else threads
        bounded_int(self.threads, "threads", 1)
        self._executor = Executor(
            queue.scripts, self._deadlines, self._held,
            max_body_bytes=queue.max_body_bytes, ack_limit=concurrency,
            reporter=Reporter(queue.hooks, on_outcome), outage=self._outage,
        )  # fmt: skip
        self._executor.channels = {keys.wake: t.name for t, keys in self._shards}
        self._wakeup.on_abort = self._executor.abort

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
    def listening(self) -> asyncio.Event:
        """Set while the worker listens for wake-ups (it then sees a new task at once): a
        started worker is consuming once this is set."""
        return self._wakeup.subscribed

    async def __aenter__(self) -> Self:
        """Run the worker (lifespan, Redis check, leases) in the background on this event
        loop (``queue.worker()``); returns once it consumes.  See :mod:`delayq.worker.embedded`."""
        self._embedded = await start_embedded(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        """Stop the worker gracefully (``grace``, then cancel and hand back) and wait for it."""
        run, self._embedded = self._embedded, None
        if run is not None:
            await stop_embedded(self, run)

    @property
    def held(self) -> int:
        """Tasks leased by this worker and not yet finished."""
        return len(self._held)

    async def run(self, *, handle_signals: bool = True) -> None:
        """Consume until :meth:`stop` (or SIGINT/SIGTERM); cancelling it also stops cleanly.

        Raises:
            LifespanError: the queue's lifespan raised on entry (nothing was leased).
            UnsupportedRedisError: the server is older than Redis 7.0.
        """
        async with self._lifespan():
            await self._wait_for_redis()
            await self.queue.check_shards(t.name for t in self.topics)
            # Before any lease: the fleet enforces what the last worker to start declared.
            await declare_limits(self.queue, self.topics)
            # The topics for stats, their history settings, and their activity counter.
            rollup, flushed = await prepare(self.queue, self.topics), asyncio.Event()
            flushing = asyncio.create_task(rollup.run(flushed)) if rollup else None
            try:
                await self._consume_until_stopped(handle_signals)
            finally:
                if rollup and flushing:
                    flushed.set()
                    await flushing  # a last flush of what the worker counted
                    self.queue.hooks.remove_listener(rollup)

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        """Hold the queue's lifespan, if any, around the whole run: its value becomes every
        Task's ``state``; it is left after the last handler finished."""
        lifespan = self.queue.lifespan_factory
        if lifespan is None:
            yield
            return
        entered = False
        try:
            async with lifespan_context(lifespan) as state:
                entered = True
                self._executor.state = state
                yield
        except Exception as exc:
            if entered:
                raise
            name = getattr(lifespan, "__qualname__", repr(lifespan))
            raise LifespanError(
                f"the queue's lifespan {name} raised on entry, so the worker did not start: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    async def _consume_until_stopped(self, handle_signals: bool) -> None:
        # Each topic's chain of middleware is composed here, once, not per task (the thread
        # limiter needs the running event loop).
        limiter = anyio.CapacityLimiter(self.threads)
        self._executor.keeps_inside = bool(self.queue.middlewares)
        self._executor.chains = {
            t.name: build_chain(t, self.queue.middlewares, limiter, self._executor.keep)
            for t in self.topics
        }
        loop = asyncio.get_running_loop()
        self._executor.now = loop.time
        signals = install_signals(loop, self.stop) if handle_signals else []
        names = [t.name for t in self.topics]
        log.info("worker started: topics=%s concurrency=%d", names, self.concurrency)
        keepers = periodic_keepers(self.queue, self.topics, self.heartbeat, self._wakeup,
                                   self._stopping, self._outage)  # fmt: skip
        await start_keepers(keepers, self.heartbeat)  # before any lease
        # Consumers live outside the TaskGroup: a handler that ignores cancellation (some
        # libraries swallow it on Python 3.11) must not keep run() from returning.
        consumers = [asyncio.create_task(self._consume()) for _ in range(self.concurrency)]
        try:
            async with asyncio.TaskGroup() as group:
                wakeup = group.create_task(self._wakeup.run(), name="delayq-wakeup")
                acker = group.create_task(self._executor.acker.run(), name="delayq-acker")
                group.create_task(self.heartbeat.run(self._stopping), name="delayq-heartbeat")
                fetchers = [group.create_task(self._fetch(t, k)) for t, k in self._shards]
                fetchers += [group.create_task(keeper.run()) for keeper in keepers]
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
        await wait_for_server(self.queue.redis, self._outage)

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch(self, topic: Topic[Any], keys: TopicKeys) -> None:
        wake = self._wakeup.event(keys.wake)
        loop = asyncio.get_running_loop()
        pacing = RetryPacing()
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
                    history=topic.options.history, results=topic.options.results_ms,
                )  # fmt: skip
            except DelayqError as exc:
                self._slots.give(wanted)
                pause = pacing.failed()
                if isinstance(exc, RedisUnavailableError):
                    self._outage.failed(f"reserve on {topic.name!r}", exc)
                else:
                    log.warning("reserve on %r failed (%s); retrying in %.2fs",
                                topic.name, exc, pause)  # fmt: skip
                await self._sleep(wake, pause)
                continue
            pacing.succeeded()
            self._outage.reachable()
            if found.skipped:
                log_skipped(topic.name, found.skipped)
            if found.reclaimed and self.queue.hooks.listeners:
                tell_reclaimed(self.queue.hooks, topic.name, found.reclaimed)
            arrived, leased_ms = loop.time(), found.now_us / 1000
            items = found.items
            self._slots.give(wanted - len(items))
            for task_id, raw in items:
                self._accept(topic, keys, task_id, raw, started, leased_ms, arrived)
            if len(items) < wanted:
                next_ms, now_us = found.next_ms, found.now_us
                pause = (next_ms * 1000 - now_us) / 1e6 if next_ms >= 0 else IDLE_RECHECK
                if pause > 0:
                    await self._sleep(wake, min(pause, IDLE_RECHECK))

    def _accept(
        self,
        topic: Topic[Any],
        keys: TopicKeys,
        task_id: str,
        raw: bytes,
        started: float,
        leased_ms: float = 0.0,
        arrived: float = 0.0,
    ) -> None:
        envelope = Envelope.parse(raw)  # reserve.lua already checked the header
        ttr_ms = envelope.ttr_ms or topic.options.ttr_ms
        # End the handler a little before Redis ends the lease, so that its failure is
        # recorded (with backoff) before another worker's reserve can reclaim the task.
        deadline = local_deadline(started, ttr_ms)
        delivery = Delivery(
            topic, keys, task_id, envelope, deadline=deadline, leased_ms=leased_ms,
            leased_at=arrived,
        )  # fmt: skip
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
                await self._executor.execute(delivery, me)
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

    # -- stopping ---------------------------------------------------------------------------

    async def _shutdown(
        self, fetchers: list[asyncio.Task[None]], consumers: list[asyncio.Task[None]],
        acker: asyncio.Task[None],
    ) -> None:  # fmt: skip
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
        self._executor.acker.close()
        await acker

    async def _release(self, deliveries: list[Delivery], reason: str) -> None:
        if not deliveries:
            return
        log.info("releasing %d task(s): %s", len(deliveries), reason)
        await asyncio.gather(*(self._executor.nack(d, "release", 0, "") for d in deliveries))
