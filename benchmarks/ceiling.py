"""Scenario 6: what bare redis-py asyncio does, as a reference ceiling, and what Redis costs.

* sequential: ``await EVALSHA`` of a trivial script, one at a time — the best any
  library can do for "one awaited round trip per task".  Measured twice: on one
  dedicated connection (``single_connection_client=True``: no pool at all), and
  through a ``BlockingConnectionPool`` with the settings ``delayq.Queue.from_url``
  uses (``max_connections=100``, ``timeout=10``, one retry), which is what any
  concurrency-safe client pays per call to borrow and return a connection;
* sequential ``EVALSHA`` of delayq's own ``send.lua`` with arguments built beforehand,
  on one connection: a send without delayq's Python, i.e. how much of the gap to the
  trivial script is the script's work in Redis;
* pipelined: ``LPUSH`` of the 20-byte payload, and ``EVALSHA`` of the trivial
  script, in non-transactional pipelines of 1,000 — roughly what a bulk enqueue
  can approach.

For each, the redis-server process's user+sys CPU (``INFO cpu``) per request is
reported too: the floor of Redis CPU per request on this machine, whatever the
script does.  A task life cycle needs at least one request to send it, so the
sequential figure bounds the Redis CPU per task of any one-request-per-send API.

Run by the harness with the dev interpreter: ``python -m benchmarks.ceiling``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from benchmarks.common import PAYLOAD, emit, rate, stopwatch
from delayq.keys import TopicKeys
from delayq.scripts import lua_source, waiting_keys

PIPELINE_BATCH = 1000
TRIVIAL_SCRIPT = "return 1"


async def evalsha_sequential(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of ``return 1``."""
    for _ in range(n):
        await client.evalsha(sha, 0)


async def evalsha_pipelined(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` EVALSHA calls of ``return 1`` in pipelines of :data:`PIPELINE_BATCH`."""
    for start in range(0, n, PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, n - start)):
            pipe.evalsha(sha, 0)
        await pipe.execute()


async def send_lua_sequential(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of delayq's ``send.lua``, arguments built beforehand.

    What a ``send_delayed`` costs without delayq's Python: the Redis side of its script
    and the redis-py client, nothing else.
    """
    topic = TopicKeys.build("ceiling", "t")
    keys = waiting_keys(topic)
    body = json.dumps({"payload": PAYLOAD, "due": 0}).encode()
    ids = [f"{i:012d}" for i in range(n)]  # generated ids are 12 characters
    for task_id in ids:
        await client.evalsha(
            sha, len(keys), *keys, task_id, "d", 3_600_000, 0, 0, body, 5000, topic.wake
        )


async def lpush_pipelined(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` LPUSHes sent in pipelines of :data:`PIPELINE_BATCH`."""
    for start in range(0, n, PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, n - start)):
            pipe.lpush("ceiling:list", PAYLOAD)
        await pipe.execute()


def pooled_client(url: str) -> aioredis.Redis:
    """A client on the pool ``delayq.Queue.from_url`` builds (same redis-py class and settings)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        retry=Retry(NoBackoff(), 1),
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        max_connections=100,
        timeout=10.0,
    )
    return aioredis.Redis.from_pool(pool)


async def redis_cpu_seconds(client: aioredis.Redis) -> float:
    """redis-server's user + sys CPU time so far."""
    cpu = await client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


Workload = Callable[[aioredis.Redis, str, int], Awaitable[None]]


async def timed(
    client: aioredis.Redis, probe: aioredis.Redis, work: Workload, sha: str, n: int
) -> tuple[float, float]:
    """(requests/s, redis-server CPU µs per request) for ``work`` on ``client``.

    ``probe`` reads the CPU counters on a connection of its own (two requests, not counted).
    """
    cpu_before = await redis_cpu_seconds(probe)
    with stopwatch() as timer:
        await work(client, sha, n)
    cpu = await redis_cpu_seconds(probe) - cpu_before
    return rate(n, timer["seconds"]), cpu * 1e6 / n


async def measure(url: str, n_seq: int, n_pipe: int) -> dict[str, Any]:
    single = aioredis.Redis.from_url(url, single_connection_client=True)
    pooled = pooled_client(url)
    probe = aioredis.Redis.from_url(url, single_connection_client=True)
    try:
        sha = await single.script_load(TRIVIAL_SCRIPT)
        await pooled.ping()  # connect outside the timed loop, as single does on script_load
        seq_rate, seq_cpu = await timed(single, probe, evalsha_sequential, sha, n_seq)
        send_sha = await single.script_load(lua_source("send"))
        send_rate, send_cpu = await timed(single, probe, send_lua_sequential, send_sha, n_seq)
        pooled_rate, pooled_cpu = await timed(pooled, probe, evalsha_sequential, sha, n_seq)
        pipe_rate, pipe_cpu = await timed(single, probe, lpush_pipelined, sha, n_pipe)
        eval_pipe_rate, eval_pipe_cpu = await timed(single, probe, evalsha_pipelined, sha, n_pipe)
    finally:
        for client in (single, pooled, probe):
            await client.aclose()
    return {
        "evalsha_seq_rate": seq_rate,
        "evalsha_seq_cpu_usec": seq_cpu,
        "send_lua_seq_rate": send_rate,
        "send_lua_seq_cpu_usec": send_cpu,
        "evalsha_pooled_rate": pooled_rate,
        "evalsha_pooled_cpu_usec": pooled_cpu,
        "lpush_pipe_rate": pipe_rate,
        "lpush_pipe_cpu_usec": pipe_cpu,
        "evalsha_pipe_rate": eval_pipe_rate,
        "evalsha_pipe_cpu_usec": eval_pipe_cpu,
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
