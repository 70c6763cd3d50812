"""delayq with results kept: every benchmark topic registered with ``results=1 h``, its
handler returning a small value, so each ack also stores a result and notifies its channel
(``_results.lua``).  Run beside plain delayq:
``scripts/bench --only delayq,delayq_results --scenarios drain``; target >= 0.9x of plain."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from benchmarks.common import TASK_NAMES, record, run_cli
from benchmarks.peers.delayq import QUEUE_NAME, DelayqPeer
from delayq import Queue


async def noop_with_result(body: dict[str, Any]) -> int:
    """The benchmark task, returning a value to keep."""
    await record(body["due"])
    return 1


class DelayqResultsPeer(DelayqPeer):
    name = "delayq_results"

    def build(self, redis_url: str) -> Queue:
        queue = Queue.from_url(redis_url, name=QUEUE_NAME)
        for name in TASK_NAMES:
            queue.topic(name, results=timedelta(hours=1))(noop_with_result)
        return queue


if __name__ == "__main__":
    run_cli(DelayqResultsPeer())
