"""A worker's start: which topics it consumes, and storing the limits its topics declare,
for the whole fleet to enforce (``max_running_per_group`` and ``rate_limit_per_group``
too, as ``group_max_running`` and ``group_rate_limit``).

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

from delayq.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from delayq.topic import Topic
    from delayq.worker.source import TaskSource

log = logging.getLogger("delayq.worker")


def declared(topic: Topic[Any]) -> dict[str, str]:
    """The control fields ``topic``'s options declare ('' clears one)."""
    options = topic.options
    rate, running = options.rate_limit, options.max_running
    group_rate, group_running = options.rate_limit_per_group, options.max_running_per_group
    return {
        "rate_limit": rate.text if rate is not None else "",
        "max_running": str(running) if running is not None else "",
        "group_rate_limit": group_rate.text if group_rate is not None else "",
        "group_max_running": str(group_running) if group_running is not None else "",
    }


async def declare_limits(queue: TaskSource, topics: Iterable[Topic[Any]]) -> None:
    """Store each topic's declared limits in its controls hash (waking its workers when
    that changed anything), and log the change."""
    for topic in topics:
        fields = declared(topic)
        # A grouped topic's groups may live in any of its shards: each holds the settings.
        every = queue.shard_keys(topic.name) if topic.options.grouped else []
        for keys in every[1:]:
            await queue.scripts.control(keys, fields)
        if await queue.scripts.control(queue.keys(topic.name), fields):
            shown = ", ".join(f"{k}={v or 'none'}" for k, v in fields.items())
            log.info("topic %r: %s now holds for every worker of the queue", topic.name, shown)


def consumed_topics(queue: TaskSource, topics: Iterable[str] | None) -> list[str]:
    """The names of the topics a worker consumes: ``topics``, or every registered one.

    Raises:
        InvalidInputError: a topic without a handler here, or none at all.
    """
    names = list(queue.topics) if topics is None else list(topics)
    unknown = [name for name in names if name not in queue.topics]
    if unknown:
        raise InvalidInputError(f"no handler registered for topic(s) {', '.join(unknown)}")
    if not names:
        raise InvalidInputError("no topics to consume: register a handler with @queue.topic")
    return names
