"""``tests.apps.counting:queue``: the app that CLI and multi-process tests run workers of.

Configured from the environment at import, like a deployed app: ``REDIS_URL`` and
``DELAYQ_QUEUE`` (the test's unique queue name).  Handlers record every delivery in Redis
(see :mod:`tests.apps.records`) because they run in another process than the test.

Topics:
    count  sleeps ``body.sleep`` seconds, then counts the run in the handled hash.
    slow   like ``count`` but also logs ``started``/``finished`` events, to tell a finished
           handler from one cancelled by a shutdown.
    fail   always raises; dead after 2 attempts.
    blocking  a plain ``def`` that blocks its thread for ``body.sleep`` seconds.
"""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel

from delayq import Backoff, Queue, Task
from tests.apps.records import events_key, handled_key

queue = Queue.from_url(os.environ["REDIS_URL"], name=os.environ["DELAYQ_QUEUE"])

FAST_RETRY = Backoff(initial=0.05, jitter=0)


class Job(BaseModel):
    """A test job: how long the handler takes."""

    sleep: float = 0.0


@queue.topic("count", backoff=FAST_RETRY)
async def count(body: Job, task: Task) -> None:
    """Sleep, then count this run."""
    if body.sleep:
        await asyncio.sleep(body.sleep)
    await queue.redis.hincrby(handled_key(queue.name), task.id, 1)


@queue.topic("slow", backoff=FAST_RETRY)
async def slow(body: Job, task: Task) -> None:
    """Log the start, sleep, count the run, log the finish."""
    await _event("started", task)
    await asyncio.sleep(body.sleep)
    await queue.redis.hincrby(handled_key(queue.name), task.id, 1)
    await _event("finished", task)


@queue.topic("fail", max_attempts=2, backoff=FAST_RETRY)
async def fail(body: Job, task: Task) -> None:
    """Always fail, so the task ends up dead."""
    raise RuntimeError(f"boom on attempt {task.attempt}")


async def _event(event: str, task: Task) -> None:
    await queue.redis.rpush(events_key(queue.name), f"{event} {task.id} {task.attempt}")


@queue.topic("blocking", ttr=3600)
def blocking(body: Job) -> None:
    """A plain def that blocks its thread for ``body.sleep`` seconds."""
    print("blocking handler started", flush=True)
    time.sleep(body.sleep)
