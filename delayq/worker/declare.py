"""A worker's start: store the limits its topics declare, for the whole fleet to enforce.

``rate_limit`` and ``max_running`` are options of ``@queue.topic``, but they must hold across
every worker, so ``reserve.lua`` reads them from the topic's ``controls`` hash in Redis,
not from its caller.  Each worker writes its topics' declarations there when it starts
(clearing a limit its code no longer declares), so the last worker to start decides:
after a deploy, the new code's limits hold for old and new workers alike, and
``delayq stats`` shows them from any host (docs/controls.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.topic import Topic
    from delayq.worker.source import TaskSource

log = logging.getLogger("delayq.worker")


def declared(topic: Topic[Any]) -> dict[str, str]:
    """The control fields ``topic``'s options declare ('' clears one)."""
    rate, running = topic.options.rate_limit, topic.options.max_running
    return {
        "rate_limit": rate.text if rate is not None else "",
        "max_running": str(running) if running is not None else "",
    }


async def declare_limits(queue: TaskSource, topics: Iterable[Topic[Any]]) -> None:
    """Store each topic's declared limits in its controls hash (waking its workers when
    that changed anything), and log the change."""
    for topic in topics:
        fields = declared(topic)
        if await queue.scripts.control(queue.keys(topic.name), fields):
            shown = ", ".join(f"{k}={v or 'none'}" for k, v in fields.items())
            log.info("topic %r: %s now holds for every worker of the queue", topic.name, shown)
