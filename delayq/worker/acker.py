"""Acknowledgements, batched and out of the handlers' way.

A handler that succeeded queues its ack and frees its slot at once: the worker's next
reserve then goes out together with the flush of the acks, instead of one round trip after
it.  One ack.lua call per topic carries every ack that arrived while the previous call was
in flight, so under load N acks take a handful of calls, and when idle an ack goes out at
once.  The worker learns the outcomes through a callback, once per call: what it tells its
batch listeners is then one event per call rather than one per task.

Queued acks are bounded: once more than ``limit`` are waiting for Redis (it is slow or
refusing them), :meth:`Acker.room` makes finished handlers wait, so that a worker whose
acks fail does not keep leasing new tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from delayq.cancellation import raise_if_cancelling
from delayq.errors import DelayqError, RedisUnavailableError
from delayq.pacing import RetryPacing

if TYPE_CHECKING:
    from delayq.pacing import Outage
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts
    from delayq.worker.lease import Delivery

log = logging.getLogger("delayq.worker")

Outcomes = Callable[[list["Delivery"], set[int]], None]
"""Called once per ack call (of one topic's keys) with its deliveries and the ``id()`` of
those whose ack was refused: the lease was lost (another worker may hold the task) or the
ack could not reach Redis before the worker stopped.  Each queued ack is reported once."""


class Acker:
    """Collects acks and flushes them in batches, reporting their outcomes to ``on_outcomes``.

    Args:
        scripts: runs ack.lua.
        on_outcomes: called with each call's deliveries and those refused (see
            :data:`Outcomes`).
        limit: most acks queued or in flight before :meth:`room` makes callers wait.
        outage: the worker's, told whether each flush reached Redis.
    """

    def __init__(
        self, scripts: Scripts, on_outcomes: Outcomes, *, limit: int, outage: Outage
    ) -> None:
        self._scripts = scripts
        self._outage = outage
        self._on_outcomes = on_outcomes
        self._limit = limit
        self._batch: defaultdict[TopicKeys, list[Delivery]] = defaultdict(list)
        self._pending = 0  # queued or in flight
        self._has_work = asyncio.Event()
        self._has_room = asyncio.Event()
        self._has_room.set()
        self._closing = False

    @property
    def pending(self) -> int:
        """Acks queued or in flight."""
        return self._pending

    def submit(self, delivery: Delivery) -> None:
        """Queue the ack of a delivery whose handler succeeded."""
        self._batch[delivery.keys].append(delivery)
        self._pending += 1
        if self._pending > self._limit:
            self._has_room.clear()
        self._has_work.set()

    async def room(self) -> None:
        """Return once no more than ``limit`` acks are queued or in flight."""
        while self._pending > self._limit:
            await self._has_room.wait()

    def close(self) -> None:
        """Ask ``run`` to flush what is queued and return."""
        self._closing = True
        self._has_work.set()

    async def run(self) -> None:
        """Flush batches until closed and empty."""
        pacing = RetryPacing()
        while True:
            raise_if_cancelling()
            if not self._batch:
                if self._closing:
                    return
                await self._has_work.wait()
                self._has_work.clear()
                continue
            batch, self._batch = self._batch, defaultdict(list)
            try:
                refused = await self._flush(batch)
            except DelayqError as exc:
                pause = pacing.failed()
                if self._closing and pacing.failures >= 3:
                    log.error(
                        "giving up on %d acks: %s; their leases will expire", _size(batch), exc
                    )
                    refused = {id(d) for deliveries in batch.values() for d in deliveries}
                else:
                    if isinstance(exc, RedisUnavailableError):
                        self._outage.failed("ack", exc)
                    else:
                        log.warning("ack failed (%s); retrying", exc)
                    self._requeue(batch)
                    await asyncio.sleep(pause)
                    continue
            pacing.succeeded()
            self._outage.reachable()
            self._report(batch, refused)

    def _report(self, batch: dict[TopicKeys, list[Delivery]], refused: set[int]) -> None:
        for deliveries in batch.values():
            self._on_outcomes(deliveries, refused)
        self._pending -= _size(batch)
        if self._pending <= self._limit:
            self._has_room.set()

    def _requeue(self, batch: defaultdict[TopicKeys, list[Delivery]]) -> None:
        # Acks that arrived since go out with the retried ones.
        for keys, deliveries in self._batch.items():
            batch[keys].extend(deliveries)
        self._batch = batch
        self._has_work.set()

    async def _flush(self, batch: dict[TopicKeys, list[Delivery]]) -> set[int]:
        """Apply a batch; returns the ``id()`` of each delivery whose ack was refused."""

        async def one(keys: TopicKeys, deliveries: list[Delivery]) -> list[int]:
            options = deliveries[0].topic.options  # one topic per keys
            cap, results = options.history, options.results_ms
            leases: list[tuple[str | bytes, ...]] = [
                (d.task_id, d.envelope.token, d.times()) if cap else (d.task_id, d.envelope.token)
                for d in deliveries
            ]
            if results:
                leases = [(*lease, d.result) for lease, d in zip(leases, deliveries, strict=True)]
            applied = await self._scripts.ack(keys, leases, history=cap, results=results)
            return [id(d) for d, ok in zip(deliveries, applied, strict=True) if not ok]

        results = await asyncio.gather(*(one(k, v) for k, v in batch.items()))
        return {item for result in results for item in result}


def _size(batch: dict[TopicKeys, list[Delivery]]) -> int:
    return sum(len(deliveries) for deliveries in batch.values())
