"""An app with periodic topics, for ``delayq periodic`` (REDIS_URL and DELAYQ_QUEUE)."""

from __future__ import annotations

import os

from delayq import Queue, Task


def build(redis_url: str, name: str) -> Queue:
    """The queue with two periodic topics (their handlers do nothing)."""
    queue = Queue.from_url(redis_url, name=name)

    @queue.periodic("report.daily", cron="0 3 * * *", tz="Europe/Berlin")
    async def report(task: Task) -> None: ...

    @queue.periodic("cart.sweep", every=3600, catch_up="all")
    async def sweep() -> None: ...

    return queue


queue = build(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:1/0"), os.environ.get("DELAYQ_QUEUE", "ticking")
)
