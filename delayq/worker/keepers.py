"""Building a worker's keepers of periodic chains, each with its judge of abandoned chains."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from delayq.errors import DelayqError
from delayq.worker.periodic import Keeper
from delayq.worker.takeover import Takeover

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Iterable

    from delayq.pacing import Outage
    from delayq.redis.wakeup import Wakeup
    from delayq.topic import Topic
    from delayq.worker.heartbeat import Heartbeat
    from delayq.worker.source import TaskSource


def periodic_keepers(
    queue: TaskSource, topics: Iterable[Topic[Any]], heartbeat: Heartbeat, wakeup: Wakeup,
    stopping: asyncio.Event, outage: Outage,
) -> list[Keeper]:  # fmt: skip
    """One :class:`~delayq.worker.periodic.Keeper` per periodic topic of ``topics``: keeps
    its next tick scheduled, and takes its chain over when abandoned."""
    keepers = []
    for topic in topics:
        if topic.options.periodic is not None:
            keys = queue.keys(topic.name)
            keepers.append(Keeper(
                queue.scripts, keys, topic.options.periodic, wakeup.listener(keys.wake),
                stopping, outage, takeover=Takeover(heartbeat, topic.name),
            ))  # fmt: skip
    return keepers


async def start_keepers(keepers: list[Keeper], heartbeat: Heartbeat) -> None:
    """Before a worker leases anything: register its schedules with one heartbeat, then
    give each keeper its first look (see :meth:`~delayq.worker.periodic.Keeper.first_look`).

    Registered first, since a first look may claim a chain: a worker of the chain's old
    schedule would otherwise see the new schedule run by nobody and take the chain back.
    """
    if not keepers:
        return
    with contextlib.suppress(DelayqError):  # the heartbeat loop retries and warns
        await heartbeat.beat()
    for keeper in keepers:
        await keeper.first_look()
