"""What a million waiting tasks cost the drain, and the part no layout can avoid.

The scale scenario compares draining 10,000 due tasks with 10k and with 1M tasks delayed in
the topic; on this kind of host its two halves run a minute apart, and the host's speed
drifts by tens of percent in that time.  This script keeps both sizes alive at once, on
two private ``redis-server`` processes, and alternates between them round by round:

- **drain**: 10,000 due tasks leased and acked in-process (reserve.lua, 100 at a time, then
  ack.lua), with redis-server user+sys CPU per task and the time inside the bucket
  commands (``INFO commandstats``);
- **memory**: ``used_memory`` growth per delayed task, and the fill time;
- **floor**: the same number of ``GET`` of random keys on two more servers holding 10k and
  1M plain string keys (one key per task: the simplest layout there is).  A drain must
  read each task at least once wherever it lies in memory, so this ratio is what the
  memory hierarchy alone charges for the larger data set.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.scale_floor --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import redis.asyncio

from benchmarks.ceiling import redis_cpu_seconds
from benchmarks.common import emit
from delayq import Queue
from delayq.task import Envelope
from tests.helpers import bucket_count
from tests.redis_server import RedisServer

PROBE = 10_000
SIZES = {"small": 10_000, "large": 1_000_000}
BUCKET_COMMANDS = ("hget", "hmget", "hset", "hdel", "hlen")
BODY = {"order_id": 1234567}


async def fill_delayq(queue: Queue, n: int) -> None:
    for start in range(0, n, 100_000):
        count = min(100_000, n - start)
        await queue.send_many("t", [BODY] * count, delay=3600, batch_size=1000)


async def drain(queue: Queue) -> dict[str, float]:
    """Send PROBE due tasks, then lease and ack them all; Redis's cost per task."""
    await queue.send_many("t", [BODY] * PROBE, batch_size=1000)
    client, keys = queue.redis, queue.keys("t")
    await client.config_resetstat()
    cpu_before = await redis_cpu_seconds(client)
    done = 0
    while done < PROBE:
        _, _, items = await queue.scripts.reserve(
            keys, limit=100, reclaim=100, ttr_ms=60_000, max_attempts=3
        )
        acked = await queue.scripts.ack(
            keys, [(task_id, Envelope.parse(raw).token) for task_id, raw in items]
        )
        done += sum(acked)
    cpu = await redis_cpu_seconds(client) - cpu_before
    stats = await client.info("commandstats")
    buckets = sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in BUCKET_COMMANDS)
    return {
        "drain_cpu_usec": cpu * 1e6 / PROBE,
        "script_usec": stats["cmdstat_evalsha"]["usec"] / PROBE,
        "bucket_usec": buckets / PROBE,
    }


async def fill_plain(client: redis.asyncio.Redis, n: int) -> None:
    for start in range(0, n, 10_000):
        async with client.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + 10_000, n)):
                pipe.set(f"task:{i:012d}", "0,0,0,0,1763818655927,1763822255927")
            await pipe.execute()


async def random_gets(client: redis.asyncio.Redis, n: int, seed: int) -> float:
    """Microseconds inside Redis per GET of a random one of the ``n`` keys."""
    picks = random.Random(seed).sample(range(n), min(PROBE, n))
    await client.config_resetstat()
    async with client.pipeline(transaction=False) as pipe:
        for i in picks:
            pipe.get(f"task:{i:012d}")
        await pipe.execute()
    return float((await client.info("commandstats"))["cmdstat_get"]["usec_per_call"])


async def measure(rounds: int) -> dict[str, Any]:
    servers = {name: RedisServer().start() for name in ("q_small", "q_large", "p_small", "p_large")}
    queues = {size: Queue.from_url(servers[f"q_{size}"].url, name="floor") for size in SIZES}
    plains = {size: redis.asyncio.Redis.from_url(servers[f"p_{size}"].url) for size in SIZES}
    try:
        fill_s, bytes_per_task = {}, {}
        for size, n in SIZES.items():
            before = (await queues[size].redis.info("memory"))["used_memory"]
            started = time.perf_counter()
            await fill_delayq(queues[size], n)
            fill_s[size] = time.perf_counter() - started
            after = (await queues[size].redis.info("memory"))["used_memory"]
            bytes_per_task[size] = (after - before) / n
            await fill_plain(plains[size], n)
        samples: dict[str, dict[str, list[float]]] = {size: {} for size in SIZES}
        for round_no in range(rounds):
            order = list(SIZES) if round_no % 2 == 0 else list(reversed(SIZES))
            for size in order:
                got = await drain(queues[size])
                got["floor_get_usec"] = await random_gets(plains[size], SIZES[size], round_no)
                for name, value in got.items():
                    samples[size].setdefault(name, []).append(value)
        buckets = {
            size: await bucket_count(queues[size].redis, queues[size].keys("t")) for size in SIZES
        }
        medians = {
            size: {name: statistics.median(values) for name, values in found.items()}
            for size, found in samples.items()
        }
        ratios = {
            name: statistics.median(
                large / small
                for small, large in zip(samples["small"][name], samples["large"][name], strict=True)
            )
            for name in samples["small"]
        }
        return {
            "rounds": rounds,
            "sizes": SIZES,
            "probe": PROBE,
            "buckets": buckets,
            "fill_seconds": fill_s,
            "bytes_per_task": bytes_per_task,
            "medians": medians,
            "ratio_medians": ratios,
            "samples": samples,
        }
    finally:
        for queue in queues.values():
            await queue.close()
        for client in plains.values():
            await client.aclose()
        for server in servers.values():
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(measure(args.rounds))
    print(f"{'':24}{'10k':>10}{'1M':>10}{'1M / 10k':>12}   (medians of {args.rounds} rounds)")
    for name, label in (
        ("drain_cpu_usec", "drain: Redis CPU us/task"),
        ("script_usec", "drain: in scripts us"),
        ("bucket_usec", "  of which buckets us"),
        ("floor_get_usec", "floor: random GET us"),
    ):
        small, large = (result["medians"][size][name] for size in SIZES)
        print(f"{label:24}{small:10.2f}{large:10.2f}{result['ratio_medians'][name]:12.2f}")
    print(f"buckets: {result['buckets']}, bytes per delayed task: {result['bytes_per_task']}")
    print(f"fill seconds (send_many): {result['fill_seconds']}")
    emit(result)


if __name__ == "__main__":
    main()
