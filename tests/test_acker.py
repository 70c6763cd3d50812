"""The Acker on its own, against a real Redis: outcomes and its bound on queued acks.

Giving a batch up when Redis stays unreachable is covered by tests/faults/test_05_redis_down.py.
"""

from __future__ import annotations

import asyncio
import logging

from delayq import Queue
from delayq.pacing import Outage
from delayq.task import Envelope
from delayq.worker.acker import Acker
from delayq.worker.lease import Delivery


async def leased_deliveries(queue: Queue, count: int) -> list[Delivery]:
    """Send ``count`` tasks to topic ``t`` and lease them, as a worker would."""
    keys = queue.keys("t")
    topic = queue.topic("t")(_noop)
    await queue.send_many("t", [{"n": n} for n in range(count)])
    _, _, items = await queue.scripts.reserve(
        keys, limit=count, reclaim=0, ttr_ms=60_000, max_attempts=3
    )
    return [
        Delivery(topic, keys, task_id, Envelope.parse(raw), deadline=0.0) for task_id, raw in items
    ]


async def _noop(body: object) -> None:
    return None


async def test_outcomes_are_reported_once_per_ack_and_the_bound_makes_callers_wait(
    queue: Queue,
) -> None:
    outcomes: list[tuple[str, bool]] = []
    acker = Acker(
        queue.scripts,
        lambda ds, refused: outcomes.extend((d.task_id, id(d) not in refused) for d in ds),
        limit=2,
        outage=Outage(logging.getLogger("delayq.worker")),
    )  # fmt: skip
    deliveries = await leased_deliveries(queue, 4)
    # One lease lost to another holder: its token no longer matches.
    stale = deliveries[3]
    deliveries[3] = Delivery(
        stale.topic, stale.keys, stale.task_id,
        Envelope.parse("1,999999,0,0,0,0,{}"), deadline=0.0,
    )  # fmt: skip
    for delivery in deliveries[:2]:
        acker.submit(delivery)
    await asyncio.wait_for(acker.room(), 1)  # two queued: within the bound
    for delivery in deliveries[2:]:
        acker.submit(delivery)
    assert acker.pending == 4
    waiting = asyncio.ensure_future(acker.room())
    await asyncio.sleep(0.05)
    assert not waiting.done(), "room() must wait while more than `limit` acks are queued"

    flusher = asyncio.ensure_future(acker.run())
    await asyncio.wait_for(waiting, 2)
    acker.close()
    await asyncio.wait_for(flusher, 2)
    assert sorted(outcomes) == sorted(
        [(d.task_id, True) for d in deliveries[:3]] + [(stale.task_id, False)]
    )
    assert acker.pending == 0
    stats = await queue.stats()
    assert (stats["t"].reserved, stats["t"].ready) == (1, 0)  # only the refused lease is left
