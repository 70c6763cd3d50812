"""Lateness of a 12-shard topic against a 1-shard topic on one Redis, rounds interleaved.

Each round, for each shard count in turn (the order alternating), a queue of its own on one
private ``redis-server`` sends ``--n`` tasks (``send_many``, 500 a call) due 1-4 s ahead,
uniformly spread, and an in-process worker (``concurrency=50``) runs them; a task's
lateness is the handler's start (``time.time()``) minus its due time.  Reported: each
round's p50 and p99, and the median of each over rounds.  A sharded topic runs one fetch
loop per shard, each sleeping until its own shard's next due time::

    .venv/bin/python -m benchmarks.shard_lateness --rounds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from delayq import Queue, Task
from tests.redis_server import RedisServer

RESULTS = Path(__file__).resolve().parent / "results"


async def one_run(url: str, shards: int, n: int, seed: int) -> list[float]:
    """Lateness (s) of each of ``n`` tasks on a topic of ``shards`` shards."""
    queue = Queue.from_url(url, name=f"lateness-{shards}-{seed}")
    late: list[float] = []
    done = asyncio.Event()

    @queue.topic("t", shards=shards)
    async def handle(body: Any, task: Task) -> None:
        late.append(time.time() - task.due_at.timestamp())
        if len(late) == n:
            done.set()

    try:
        async with queue.worker(concurrency=50):
            rng = random.Random(seed)
            delays = [1.0 + rng.uniform(0, 3.0) for _ in range(n)]
            for start in range(0, n, 500):
                await queue.send_many("t", [{}] * len(delays[start : start + 500]),
                                      delay=delays[start : start + 500])  # fmt: skip
            await asyncio.wait_for(done.wait(), 120)
    finally:
        await queue.close()
    return late


def percentile_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--shards", type=int, default=12)
    args = parser.parse_args()
    counts = (1, args.shards)
    rows: dict[int, list[tuple[float, float]]] = {c: [] for c in counts}
    server = RedisServer().start()
    try:
        for rnd in range(args.rounds):
            for shards in counts if rnd % 2 == 0 else counts[::-1]:
                late = await one_run(server.url, shards, args.n, rnd)
                p50, p99 = percentile_ms(late, 0.5), percentile_ms(late, 0.99)
                rows[shards].append((p50, p99))
                print(
                    f"round {rnd} shards={shards}: p50 {p50:.1f} ms  p99 {p99:.1f} ms", flush=True
                )
    finally:
        server.close()
    summary = {
        str(c): {"p50_ms": statistics.median(r[0] for r in rows[c]),
                 "p99_ms": statistics.median(r[1] for r in rows[c]), "rounds": rows[c]}
        for c in counts
    }  # fmt: skip
    for c in counts:
        print(f"shards={c}: median p50 {summary[str(c)]['p50_ms']:.1f} ms, "
              f"median p99 {summary[str(c)]['p99_ms']:.1f} ms")  # fmt: skip
    out = RESULTS / f"shard-lateness-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"n": args.n, "rounds": args.rounds, "summary": summary}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    asyncio.run(main())
