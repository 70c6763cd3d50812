"""A tour of delayq in one process: a worker and a producer sharing a throw-away queue.

Run it with ``./scripts/demo`` (which starts a private redis-server), or against a Redis
of your own: ``REDIS_URL=redis://host:6379/0 .venv/bin/python examples/demo.py``.  The
queue gets a fresh name and its keys are deleted at the end.

On a live timeline it shows:

* three topics with typed (pydantic) bodies and their handlers;
* a few dozen tasks due 0.2-4 s from now, each fired milliseconds after it is due;
* cancelling tasks that are no longer needed, and moving one earlier;
* an idempotent re-send of a task id that is already queued;
* failures retried with the topic's backoff or after an explicit ``Retry(delay=...)``;
* a handler overrunning its TTR, cancelled by the worker and retried;
* a task dead-lettered after ``max_attempts=2``, listed with its last error;
* a graceful stop of the worker.

Lateness is ``time.time() - task.due_at``: the worker's clock against Redis's, so the
figures mean something only when both run on one host (as with ``./scripts/demo``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import secrets
import sys
import time

from pydantic import BaseModel

from delayq import Backoff, DelayqError, Queue, Retry, Task, Worker

DEADLINE = 20.0
"""Seconds every task gets to settle before the demo calls it a failure."""
QUICK = Backoff(initial=0.2, factor=2.0, max=1.0, jitter=0.1)
"""Retry delays short enough for a demo: 0.2 s, 0.4 s, 0.8 s, 1 s (±10 %)."""
TOPICS = ("order.close", "webhook.retry", "review.approve")


class CloseOrder(BaseModel):
    """Close an order nobody paid for.  ``fails``: attempts that fail, to show retries."""

    order_id: int
    fails: int = 0


class Webhook(BaseModel):
    """Deliver an event to a customer's endpoint.  ``fails``: attempts answered with 503;
    ``hang``: the first attempt never returns, so the worker cancels it at its TTR."""

    url: str
    event: str
    fails: int = 0
    hang: bool = False


class Review(BaseModel):
    """Auto-approve a review that nobody moderated in time."""

    order_id: int
    text: str


class Timeline:
    """Prints one line per event and tracks the tasks that have yet to succeed or die."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.lateness_ms: list[float] = []
        self.producing = True
        self._open: set[tuple[str, str]] = set()
        self._settled = asyncio.Event()

    def line(self, event: str, topic: str, task_id: str, detail: str = "") -> None:
        """Print ``+elapsed  event  topic  id  detail``."""
        elapsed = time.monotonic() - self.started
        text = f"{elapsed:7.3f}s  {event:<10} {topic:<15} {task_id:<12} {detail}"
        print(text.rstrip(), flush=True)

    def fired(self, task: Task, what: str) -> None:
        """A handler started: record how long after its due time."""
        late = (time.time() - task.due_at.timestamp()) * 1000
        self.lateness_ms.append(late)
        attempt = f"attempt {task.attempt}/{task.max_attempts}"
        self.line("fire", task.topic, task.id, f"{attempt}  late {late:5.1f} ms  {what}")

    def failed(self, task: Task, error: str, then: str) -> None:
        """A handler is about to fail: it is retried, or dead-lettered after its last attempt."""
        if task.attempt >= task.max_attempts:
            self.line("dead", task.topic, task.id, f"{error}: no attempts left, dead-lettered")
            self.settle(task.topic, task.id)
        else:
            self.line("retry", task.topic, task.id, f"{error}: {then}")

    @property
    def waiting(self) -> int:
        """Tasks sent that have not yet succeeded, died or been cancelled."""
        return len(self._open)

    def expect(self, topic: str, task_id: str) -> None:
        """A task was sent (or is about to be): wait for it."""
        self._open.add((topic, task_id))

    def settle(self, topic: str, task_id: str) -> None:
        """A task succeeded, died or was cancelled: stop waiting for it."""
        self._open.discard((topic, task_id))
        if not self._open and not self.producing:
            self._settled.set()

    def done_producing(self) -> None:
        """The producer sent everything it will send."""
        self.producing = False
        if not self._open:
            self._settled.set()

    async def wait(self) -> None:
        """Return once every expected task has settled."""
        await self._settled.wait()


def register(queue: Queue, timeline: Timeline) -> None:
    """Register the three demo handlers on ``queue``."""

    @queue.topic("order.close", ttr=5, max_attempts=4, backoff=QUICK)
    async def close_order(body: CloseOrder, task: Task) -> None:
        timeline.fired(task, f"close unpaid order #{body.order_id}")
        await asyncio.sleep(0.02)  # the "work"
        if task.attempt <= body.fails:
            timeline.failed(task, "ConnectionError", "retry after the topic's backoff")
            raise ConnectionError("payment service unreachable")
        timeline.settle(task.topic, task.id)

    @queue.topic("webhook.retry", ttr=5, max_attempts=5, backoff=QUICK)
    async def deliver_webhook(body: Webhook, task: Task) -> None:
        timeline.fired(task, f"POST {body.event} to {body.url}")
        if body.hang and task.attempt == 1:
            try:
                await asyncio.sleep(60)  # the endpoint never answers
            except asyncio.CancelledError:
                timeline.failed(task, f"TTR of {task.ttr:g}s exceeded", "cancelled, retry")
                raise  # never swallow a cancellation
        if task.attempt <= body.fails:
            timeline.failed(task, "HTTP 503", "Retry(delay=0.3)")
            raise Retry(delay=0.3, reason=f"{body.url} answered 503")
        timeline.settle(task.topic, task.id)

    @queue.topic("review.approve", ttr=5, max_attempts=5, backoff=QUICK)
    async def approve_review(body: Review, task: Task) -> None:
        timeline.fired(task, f"approve review of order #{body.order_id}")
        if "spam" in body.text:
            timeline.failed(task, "ValueError", "retry after the topic's backoff")
            raise ValueError("review text rejected by moderation")
        timeline.settle(task.topic, task.id)


async def send(
    queue: Queue,
    timeline: Timeline,
    topic: str,
    task_id: str,
    body: BaseModel,
    delay: float,
    *,
    ttr: float | None = None,
    max_attempts: int | None = None,
) -> None:
    """Send with our own task id: a send that fails in flight can then be retried safely."""
    timeline.expect(topic, task_id)
    await queue.send_delayed(
        topic, body, delay, task_id=task_id, ttr=ttr, max_attempts=max_attempts
    )


async def produce(queue: Queue, timeline: Timeline) -> None:
    """Send a few dozen tasks due 0.2-4 s from now, then cancel, reschedule and re-send."""
    for i in range(16):
        body = CloseOrder(order_id=1000 + i, fails=1 if i in (2, 9) else 0)
        await send(queue, timeline, "order.close", f"order-{1000 + i}", body, 0.2 + 0.25 * i)
    for i in range(10):
        hook = Webhook(url=f"https://shop{i}.example/hook", event="order.paid",
                       fails=2 if i == 4 else 0, hang=i == 7)  # fmt: skip
        ttr = 0.5 if hook.hang else None  # this task's own, shorter lease
        await send(queue, timeline, "webhook.retry", f"hook-{i}", hook, 0.3 + 0.35 * i, ttr=ttr)
    for i in range(8):
        review = Review(order_id=2000 + i, text="great, thanks" if i != 3 else "buy spam now")
        limit = 2 if i == 3 else None  # this task's own attempt limit
        await send(
            queue, timeline, "review.approve", f"review-{i}", review, 0.5 + 0.5 * i,
            max_attempts=limit,
        )  # fmt: skip
    timeline.line("sent", "*", "*", f"{timeline.waiting} tasks, due in 0.2-4.0 s")
    await manage(queue, timeline)
    timeline.done_producing()


async def manage(queue: Queue, timeline: Timeline) -> None:
    """What an application does to tasks it already sent."""
    for order_id in (1011, 1012, 1013, 1014):  # these orders got paid: no need to close them
        task_id = f"order-{order_id}"
        info = await queue.get("order.close", task_id)
        cancelled = await queue.cancel("order.close", task_id)
        state = info.state if info else "unknown"
        timeline.line("cancel", "order.close", task_id, f"was {state}; cancelled={cancelled}")
        if cancelled:
            timeline.settle("order.close", task_id)
    # The customer opened the app: approve their review sooner than planned.
    moved = await queue.reschedule("review.approve", "review-7", delay=0.6)
    timeline.line(
        "reschedule", "review.approve", "review-7", f"due 4.0 s -> in 0.6 s; moved={moved}"
    )
    # A producer that timed out re-sends with the same id: nothing is added.
    again = await queue.send_delayed(
        "order.close", CloseOrder(order_id=1000), 0.2, task_id="order-1000"
    )
    timeline.line("re-send", "order.close", again, "same id while queued: nothing added")


async def wait_until_settled(queue: Queue, timeline: Timeline, worker: asyncio.Task[None]) -> None:
    """Wait for every task to settle and for Redis to show no work left but dead letters.

    Raises:
        TimeoutError: not settled within ``DEADLINE``.
    """
    async with asyncio.timeout(DEADLINE):
        settled = asyncio.ensure_future(timeline.wait())
        await asyncio.wait({settled, worker}, return_when=asyncio.FIRST_COMPLETED)
        if worker.done():
            settled.cancel()
            await worker  # surface the worker's error
            raise RuntimeError("the worker stopped early")
        # Acks go out in batches just after a handler returns; wait for the last one.
        while True:
            stats = (await queue.stats()).values()
            if not any(s.delayed or s.ready or s.reserved for s in stats):
                return
            await asyncio.sleep(0.02)


async def report(queue: Queue, timeline: Timeline) -> int:
    """Print the final state, the dead letters and the lateness; return the exit status."""
    print("\nfinal stats (topics holding no task are not listed by queue.stats()):")
    stats = await queue.stats()
    for topic in TOPICS:
        s = stats.get(topic)
        counts = (
            f"delayed={s.delayed} ready={s.ready} reserved={s.reserved} dead={s.dead}"
            if s
            else "empty"
        )
        print(f"  {topic:<15} {counts}")
    print("\ndead letters:")
    dead = [info for topic in TOPICS for info in await queue.dead_letters(topic)]
    for info in dead:
        print(f"  {info.topic}/{info.id}  attempts={info.attempts}  last_error={info.last_error!r}")
    late = sorted(timeline.lateness_ms)
    print(f"\nlateness over {len(late)} firings (time.time() - task.due_at):")
    print(f"  p50 {_rank(late, 50):.1f} ms   p99 {_rank(late, 99):.1f} ms   max {late[-1]:.1f} ms")
    return 0 if [(d.topic, d.id) for d in dead] == [("review.approve", "review-3")] else 1


def _rank(values: list[float], percent: float) -> float:
    """The nearest-rank percentile of sorted ``values``."""
    return values[max(0, math.ceil(percent / 100 * len(values)) - 1)]


async def cleanup(queue: Queue) -> None:
    """Delete every key of this demo's queue (its name is unique to this run)."""
    keys = [key async for key in queue.redis.scan_iter(match=f"delayq:{{{queue.name}:*")]
    keys.append(f"delayq:{{{queue.name}}}:topics")
    await queue.redis.delete(*keys)


async def run(queue: Queue) -> int:
    """Start a worker, produce, wait, report, stop the worker."""
    timeline = Timeline()
    register(queue, timeline)
    worker = Worker(queue, concurrency=10, grace=2.0)
    running = asyncio.create_task(worker.run(handle_signals=False))
    try:
        await produce(queue, timeline)
        await wait_until_settled(queue, timeline, running)
    except TimeoutError:
        print(f"demo: {timeline.waiting} task(s) unsettled after {DEADLINE:g}s", file=sys.stderr)
        status = 1
    else:
        status = await report(queue, timeline)
    finally:
        worker.stop()  # stop leasing; running handlers get the grace period
        await running
        await cleanup(queue)
    print(f"\nworker stopped gracefully; leases still held: {worker.held}")
    return status


async def main() -> int:
    """Run the tour against ``$REDIS_URL``; returns the exit status."""
    url = os.environ.get("REDIS_URL")
    if not url:
        print("set REDIS_URL, or run ./scripts/demo to get a private redis-server", file=sys.stderr)
        return 2
    logging.basicConfig(level=os.environ.get("DELAYQ_LOG_LEVEL", "ERROR").upper())
    async with Queue.from_url(url, name=f"demo-{secrets.token_hex(4)}") as queue:
        try:
            await queue.stats()  # fail fast if Redis is not there
        except DelayqError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 2
        print(f"queue {queue.name!r} on {re.sub(r'//[^@/]*@', '//***@', url)}\n")
        return await run(queue)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
