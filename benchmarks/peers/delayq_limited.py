"""delayq with a rate limit far above the drain rate on the benchmark topics: what the
rate limiter costs a topic it never holds back (issue 25: drain and enqueue >= 0.9x plain
delayq's, lateness unchanged).

Run beside plain delayq (and ``delayq_base``) in one run, e.g.
``scripts/bench --only delayq,delayq_base,delayq_limited --scenarios enqueue,drain,lateness``.
Every worker declares the limit at start and every ``reserve.lua`` call counts its leases
in the topic's rate window (docs/controls.md).
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import TASK_NAMES, run_cli
from benchmarks.peers.delayq import QUEUE_NAME, DelayqPeer, noop
from delayq import Queue

RATE_LIMIT = "1000000/s"
"""Far above any drain rate here (~20,000 tasks/s): the limiter counts, and never holds back."""


def build(redis_url: str) -> Queue:
    """The benchmark topics, each with :data:`RATE_LIMIT`."""
    queue = Queue.from_url(redis_url, name=QUEUE_NAME)
    for name in TASK_NAMES:
        queue.topic(name, rate_limit=RATE_LIMIT)(noop)
    return queue


class DelayqLimitedPeer(DelayqPeer):
    name = "delayq_limited"

    def settings(self) -> dict[str, Any]:
        return super().settings() | {"rate_limit": RATE_LIMIT}

    def build(self, redis_url: str) -> Queue:
        return build(redis_url)


if __name__ == "__main__":
    run_cli(DelayqLimitedPeer())
