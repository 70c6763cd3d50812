"""delayq with a lifespan and two no-op middlewares: what the hooks cost a drain.

Run beside plain delayq in one run, e.g.
``scripts/bench --only delayq,delayq_hooks --scenarios drain --rounds 5``.
The target (issue 21): drain per process >= 0.9x plain delayq's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from benchmarks.common import run_cli
from benchmarks.peers.delayq import DelayqPeer, build
from delayq import CallNext, Queue, Task


class DelayqHooksPeer(DelayqPeer):
    name = "delayq_hooks"

    def settings(self) -> dict[str, Any]:
        return super().settings() | {"hooks": "a lifespan and two no-op middlewares"}

    def build(self, redis_url: str) -> Queue:
        queue = build(redis_url)

        @queue.lifespan
        async def resources() -> AsyncIterator[dict[str, str]]:
            yield {"pool": "a stand-in for a client the handlers share"}

        @queue.middleware
        async def outer(task: Task, call_next: CallNext) -> None:
            await call_next()

        @queue.middleware
        async def inner(task: Task, call_next: CallNext) -> None:
            await call_next()

        return queue


if __name__ == "__main__":
    run_cli(DelayqHooksPeer())
