"""What the middleware chain costs per task, in-process: ``await chain(body, task)`` for a
topic without middleware and with one and two no-op middlewares, composed by the worker's
own ``build_chain``; rounds alternate the variants.  No Redis: this isolates the Python a
middleware adds to each delivery (the drain A/B in ``scripts/bench --only
delayq,delayq_hooks`` measures it with everything else).

    .venv/bin/python -m benchmarks.hooks_cost --rounds 7
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import anyio
import redis.asyncio

from delayq import CallNext, Queue, Task
from delayq.worker.chain import build_chain

CALLS = 200_000


async def noop_middleware(task: Task, call_next: CallNext) -> None:
    await call_next()


async def handler(body: dict[str, Any], task: Task) -> None:
    """The benchmark handler: does nothing."""


async def measure(rounds: int) -> dict[str, list[float]]:
    queue = Queue(redis.asyncio.Redis(), name="bench")
    topic = queue.topic("noop")(handler)
    limiter = anyio.CapacityLimiter(1)
    chains = {
        "no middleware": build_chain(topic, [], limiter),
        "1 middleware": build_chain(topic, [noop_middleware], limiter),
        "2 middlewares": build_chain(topic, [noop_middleware, noop_middleware], limiter),
    }
    body: dict[str, Any] = {}
    task: Any = None
    results: dict[str, list[float]] = {name: [] for name in chains}
    for _ in range(rounds):
        for name, chain in chains.items():
            started = time.perf_counter()
            for _ in range(CALLS):
                await chain(body, task)
            results[name].append((time.perf_counter() - started) / CALLS * 1e6)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    results = asyncio.run(measure(args.rounds))
    base = statistics.median(results["no middleware"])
    print(f"{'chain':16} {'us/task (median)':>17} {'added':>8}   rounds")
    for name, values in results.items():
        median = statistics.median(values)
        spread = " ".join(f"{v:.2f}" for v in values)
        print(f"{name:16} {median:17.2f} {median - base:8.2f}   {spread}")


if __name__ == "__main__":
    main()
