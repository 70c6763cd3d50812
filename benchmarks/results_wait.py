"""Task results: how soon a waiting ``queue.result(..., wait=S)`` returns after the ack that
finishes its task, and what a stored result costs Redis in memory.

    PYTHONPATH=. python -m benchmarks.results_wait [--samples 1000]

Latency: a private redis-server; one task at a time is sent, leased (``queue.consumer``)
and waited for (``queue.result(topic, id, wait=10)``, already subscribed and reading); the
clock starts just before the ack is sent and stops when the wait returns: the ack's round
trip, the notice (``PUBLISH`` from ack.lua to the wait's subscription) and the wait's one
read of the result.  ``ack_reply_to_result`` starts at the ack's reply instead.
Memory: ``MEMORY USAGE`` of result keys holding no value, a small int and a 100-byte JSON
object, and ``used_memory`` per result over 10,000 results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import timedelta
from typing import Any

from delayq import Queue
from delayq.testing import PrivateRedis

TOPIC = "bench.results"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def latency(queue: Queue, samples: int) -> dict[str, float]:
    sent_to_result: list[float] = []
    reply_to_result: list[float] = []
    for i in range(samples):
        task_id = f"lat-{i}"
        await queue.send(TOPIC, {"i": i}, task_id=task_id)
        (lease,) = await queue.consumer.lease(TOPIC)
        waiting = asyncio.create_task(queue.result(TOPIC, task_id, wait=10))
        await asyncio.sleep(0.002)  # the wait subscribed and read: it now sleeps
        start = time.perf_counter()
        await queue.consumer.ack(lease.lease_token, i)
        replied = time.perf_counter()
        res = await waiting
        done = time.perf_counter()
        assert res is not None and res.value == i, res
        sent_to_result.append((done - start) * 1000)
        reply_to_result.append((done - replied) * 1000)
    return {
        "samples": samples,
        "ack_sent_to_result_ms_p50": statistics.median(sent_to_result),
        "ack_sent_to_result_ms_p99": percentile(sent_to_result, 99),
        "ack_sent_to_result_ms_max": max(sent_to_result),
        "ack_reply_to_result_ms_p50": statistics.median(reply_to_result),
        "ack_reply_to_result_ms_p99": percentile(reply_to_result, 99),
    }


async def memory(queue: Queue, client: Any) -> dict[str, float]:
    keys = queue.keys(TOPIC)
    out: dict[str, float] = {}
    for label, value in (("none", None), ("int", 7), ("json100", {"url": "x" * 88})):
        task_id = f"mem-{label}"
        await queue.send(TOPIC, {}, task_id=task_id)
        (lease,) = await queue.consumer.lease(TOPIC)
        await queue.consumer.ack(lease.lease_token, value)
        out[f"memory_usage_bytes_{label}"] = await client.memory_usage(
            keys.result(task_id), samples=0
        )
    await client.config_set("activedefrag", "no")
    before = (await client.info("memory"))["used_memory"]
    n = 10_000
    await queue.send_many(TOPIC, [{}] * n, task_ids=[f"many-{i}" for i in range(n)])
    left = n
    while left:
        leases = await queue.consumer.lease(TOPIC, limit=100)
        await asyncio.gather(*(queue.consumer.ack(x.lease_token, 7) for x in leases))
        left -= len(leases)
    after = (await client.info("memory"))["used_memory"]
    out["used_memory_bytes_per_result_int"] = (after - before) / n
    return out


async def main(samples: int) -> None:
    with PrivateRedis() as server:
        queue = Queue.from_url(server.url, name="bench")
        queue.topic(TOPIC, results=timedelta(hours=1))(handler)
        client = queue.redis
        # The HTTP-style consumer reads the setting its workers recorded: register it here.
        await queue.result(TOPIC, "warm-up", wait=0.01)  # opens the subscription
        figures = await latency(queue, samples)
        figures |= await memory(queue, client)
        await queue.close()
    print(json.dumps(figures, indent=2))


async def handler(body: Any) -> int:
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000)
    asyncio.run(main(parser.parse_args().samples))
