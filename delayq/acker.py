"""Acknowledgements, batched: one ack.lua call per topic for every ack that arrived while
the previous call was in flight.  Under load this turns N acks into a handful of calls;
when idle an ack goes out at once."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from delayq.cancel import raise_if_cancelling
from delayq.errors import DelayqError

if TYPE_CHECKING:
    from delayq.keys import TopicKeys
    from delayq.scripts import Scripts

log = logging.getLogger("delayq.worker")

Lease = tuple[str, str]  # (task id, fencing token)


class Acker:
    """Collects acks and flushes them in batches; ``ack`` returns once its batch is applied."""

    def __init__(self, scripts: Scripts) -> None:
        self._scripts = scripts
        self._batch: defaultdict[TopicKeys, list[Lease]] = defaultdict(list)
        self._flushed: asyncio.Future[set[tuple[str, Lease]]] | None = None
        self._has_work = asyncio.Event()
        self._closing = False

    async def ack(self, keys: TopicKeys, task_id: str, token: str) -> bool:
        """Queue an ack and wait for its batch.

        Returns:
            True if acked; False if the lease was lost (another worker may hold the task),
            or the ack could not reach Redis before the worker stopped.
        """
        if self._flushed is None:
            self._flushed = asyncio.get_running_loop().create_future()
        flushed = self._flushed
        lease = (task_id, token)
        self._batch[keys].append(lease)
        self._has_work.set()
        # Shielded: the future is shared by the whole batch; one cancelled waiter must not
        # cancel it for the others.
        refused = await asyncio.shield(flushed)
        return (keys.topic, lease) not in refused

    def close(self) -> None:
        """Ask ``run`` to flush what is queued and return."""
        self._closing = True
        self._has_work.set()

    async def run(self) -> None:
        """Flush batches until closed and empty."""
        failures = 0
        while True:
            raise_if_cancelling()
            if not self._batch:
                if self._closing:
                    return
                await self._has_work.wait()
                self._has_work.clear()
                continue
            batch, self._batch = self._batch, defaultdict(list)
            flushed, self._flushed = self._flushed, None
            try:
                refused = await self._flush(batch)
            except DelayqError as exc:
                failures += 1
                if self._closing and failures >= 3:
                    log.error(
                        "giving up on %d acks: %s; their leases will expire", _size(batch), exc
                    )
                    refused = {(k.topic, lease) for k, leases in batch.items() for lease in leases}
                else:
                    log.warning("ack failed (%s); retrying", exc)
                    self._requeue(batch, flushed)
                    await asyncio.sleep(min(0.05 * 2**failures, 1.0))
                    continue
            failures = 0
            if flushed is not None:
                flushed.set_result(refused)

    def _requeue(
        self,
        batch: defaultdict[TopicKeys, list[Lease]],
        flushed: asyncio.Future[set[tuple[str, Lease]]] | None,
    ) -> None:
        # Acks that arrived since go out with the retried ones; their waiters are chained.
        for keys, leases in self._batch.items():
            batch[keys].extend(leases)
        newer = self._flushed
        self._batch, self._flushed = batch, flushed
        if newer is not None and flushed is not None:
            flushed.add_done_callback(lambda f: newer.set_result(f.result()))
        self._has_work.set()

    async def _flush(self, batch: dict[TopicKeys, list[Lease]]) -> set[tuple[str, Lease]]:
        async def one(keys: TopicKeys, leases: list[Lease]) -> list[tuple[str, Lease]]:
            applied = await self._scripts.ack(keys, leases)
            return [
                (keys.topic, lease) for lease, ok in zip(leases, applied, strict=True) if not ok
            ]

        results = await asyncio.gather(*(one(k, v) for k, v in batch.items()))
        return {item for result in results for item in result}


def _size(batch: dict[TopicKeys, list[Lease]]) -> int:
    return sum(len(leases) for leases in batch.values())
