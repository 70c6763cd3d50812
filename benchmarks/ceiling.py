"""Scenario 6: what bare redis-py asyncio does on one connection, as a reference ceiling.

* sequential: ``await EVALSHA`` of a trivial script, one at a time — the best
  any library can do for "one awaited round trip per task";
* pipelined: ``LPUSH`` of the 20-byte payload in non-transactional pipelines
  of 1,000 — roughly what a bulk enqueue can approach.

Run by the harness with the dev interpreter: ``python -m benchmarks.ceiling``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import redis
import redis.asyncio as aioredis

from benchmarks.common import PAYLOAD, emit, rate, stopwatch

PIPELINE_BATCH = 1000


async def evalsha_sequential(client: aioredis.Redis, n: int) -> float:
    """Seconds for ``n`` awaited EVALSHA calls of ``return 1``."""
    sha = await client.script_load("return 1")
    with stopwatch() as timer:
        for _ in range(n):
            await client.evalsha(sha, 0)
    return timer["seconds"]


async def lpush_pipelined(client: aioredis.Redis, n: int) -> float:
    """Seconds for ``n`` LPUSHes sent in pipelines of :data:`PIPELINE_BATCH`."""
    with stopwatch() as timer:
        for start in range(0, n, PIPELINE_BATCH):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(PIPELINE_BATCH, n - start)):
                pipe.lpush("ceiling:list", PAYLOAD)
            await pipe.execute()
    return timer["seconds"]


async def measure(url: str, n_seq: int, n_pipe: int) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url, single_connection_client=True)
    try:
        seq_s = await evalsha_sequential(client, n_seq)
        pipe_s = await lpush_pipelined(client, n_pipe)
    finally:
        await client.aclose()
    return {
        "evalsha_seq_rate": rate(n_seq, seq_s),
        "lpush_pipe_rate": rate(n_pipe, pipe_s),
        "n_seq": n_seq,
        "n_pipe": n_pipe,
        "pipeline_batch": PIPELINE_BATCH,
        "redis_py": redis.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ceiling")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--n-seq", type=int, default=50_000)
    parser.add_argument("--n-pipe", type=int, default=500_000)
    args = parser.parse_args()
    emit(asyncio.run(measure(args.redis_url, args.n_seq, args.n_pipe)))


if __name__ == "__main__":
    main()
