"""``run_due``: let queue time pass in a test, and run what falls due, for real.

Every delayq script reads the time as Redis's ``TIME`` plus the topic's clock offset, which
only a test writes (:mod:`delayq.testing.clock`).  ``run_due`` runs a real
:class:`~delayq.Worker` in this process (the queue's lifespan, middleware, TTR, retries and
dead letters all apply) and repeats: wait until nothing due is left to run, then move the
queue's clock to the next due time (a task, a retry, a periodic tick) if it falls inside the
horizon, and wake the worker.  Nothing is faked in delayq: its scripts run as in production,
on any Redis the queue is open on.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from delayq.duration import to_millis
from delayq.errors import DelayqError
from delayq.testing.clock import QueueClock
from delayq.worker import Worker

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.duration import Duration
    from delayq.queue import Queue
    from delayq.task import Outcome

POLL = 0.005
"""Seconds between looks at the queue while handlers run (an outcome wakes it sooner)."""


class RunDueTimeoutError(DelayqError):
    """Raised by :func:`run_due` when the due work did not settle within ``settle_timeout``
    (a handler that never returns, or a topic paused or rate-limited by its controls)."""


async def run_due(
    queue: Queue,
    within: Duration,
    topics: Iterable[str] | None = None,
    *,
    concurrency: int = 1,
    settle_timeout: float = 30.0,
) -> list[Outcome]:
    """Let ``within`` of queue time pass and run every task that falls due meanwhile.

    Tasks due now or within the horizon (also retries and periodic ticks that fall
    inside it) run in due order, through a real worker in this process, on the real
    Redis; tasks due later stay untouched.  The queue's clock ends ``within`` ahead of
    where it started, so what the test sends next is due relative to that.  Only this
    queue's time moves: other queues on the same Redis keep the real time.

    Args:
        queue: an open queue, on any Redis (the plugin's ``delayq_redis_url``, or one from
            docker-compose or testcontainers), its handlers registered.  No other worker
            should consume it meanwhile.
        within: how much queue time passes (seconds or a timedelta).
        topics: the topics to run (default: every registered one); the queue's other
            topics are left alone, though their tasks see the time pass too.
        concurrency: handlers at once (1: one at a time, in due order).
        settle_timeout: real seconds the due work may take to settle at each step.

    Returns:
        What happened to each delivery, in the order it ended.

    Raises:
        RunDueTimeoutError: due work did not settle within ``settle_timeout``.
    """
    span_ms = to_millis(within, name="within")
    names = list(queue.topics) if topics is None else list(topics)
    outcomes: list[Outcome] = []
    progress = asyncio.Event()

    def record(outcome: Outcome) -> None:
        outcomes.append(outcome)
        progress.set()

    # Before the worker starts: it must read every topic's time as the queue's.
    clock = await QueueClock(queue).load()
    worker = Worker(queue, concurrency=concurrency, topics=names, on_outcome=record)
    async with worker:
        horizon = await clock.now_ms() + span_ms
        while True:
            await _settle(queue, worker, names, progress, settle_timeout)
            following, now = await _next_due(queue, names), await clock.now_ms()
            target = following if following is not None and following <= horizon else horizon
            if target <= now:
                if now >= horizon:
                    return outcomes
                continue  # due already (a retry with no delay): run it
            await clock.advance(target - now)  # wakes every topic's (and shard's) fetch loop
    return outcomes  # pragma: no cover - the loop returns


async def _next_due(queue: Queue, names: list[str]) -> int | None:
    """The earliest due time scheduled in ``names``, in Unix ms."""
    earliest: int | None = None
    for name in names:
        page = await queue.upcoming(name, limit=1)
        if page.tasks:
            due = round(page.tasks[0].due_at.timestamp() * 1000)
            earliest = due if earliest is None else min(earliest, due)
    return earliest


async def _unsettled(queue: Queue, worker: Worker, names: list[str]) -> str | None:
    """What is still to happen before time may move on, or None."""
    if worker.held:
        return f"{worker.held} task(s) running or being acked"
    for name in names:
        page = await queue.upcoming(name, limit=1)
        if page.tasks and page.tasks[0].state == "ready":
            return f"{name}/{page.tasks[0].id} is due"
        options = queue.topics[name].options.periodic
        if options is not None and await queue.next_tick(name) is None:
            return f"periodic {name}: its next tick is not scheduled yet"
    return None


async def _settle(
    queue: Queue, worker: Worker, names: list[str], progress: asyncio.Event, limit: float
) -> None:
    """Wait until nothing due is left to run (handlers done, acks applied, the next ticks
    scheduled)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while (pending := await _unsettled(queue, worker, names)) is not None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RunDueTimeoutError(f"due work did not settle within {limit:g}s: {pending}")
        progress.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(POLL, remaining)):
                await progress.wait()
