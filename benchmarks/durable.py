"""The cost of a durable send: sends/s one by one, with and without ``Durability``.

Starts its own primary and one replica (``redis-server`` on free loopback ports, no
persistence, the replica attached with ``--replicaof``), then in every round times ``n``
awaited ``send`` calls on a plain queue and ``n`` on a durable one (``replicas=1``),
alternating which goes first, plus one ``send_many`` of ``n`` tasks each way.  Reports
the median over rounds and the durable/plain ratio, which is what to quote on a noisy
machine; the absolute rates depend on it.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.durable --n 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import redis

import delayq
from benchmarks.common import emit, percentile
from delayq import Durability, Queue
from tests.redis_server import PRIMARY_ARGS, RedisServer, replica_of


async def one_by_one(queue: Queue, n: int) -> tuple[float, list[float]]:
    """Seconds for ``n`` awaited sends, and each send's latency in ms."""
    latencies = []
    started = time.perf_counter()
    for i in range(n):
        before = time.perf_counter()
        await queue.send("bench", {"i": i})
        latencies.append((time.perf_counter() - before) * 1000)
    return time.perf_counter() - started, latencies


async def batched(queue: Queue, n: int) -> float:
    """Seconds for one ``send_many`` of ``n`` tasks (batches of 500)."""
    started = time.perf_counter()
    await queue.send_many("bench", [{"i": i} for i in range(n)])
    return time.perf_counter() - started


async def measure(url: str, n: int, rounds: int, timeout: float) -> dict[str, Any]:
    """Interleave plain and durable runs on the same servers; medians per mode."""
    modes = {"plain": None, "durable": Durability(replicas=1, timeout=timeout)}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    bulk: dict[str, list[float]] = {m: [] for m in modes}
    latencies: dict[str, list[float]] = {m: [] for m in modes}
    for round_no in range(rounds):
        order = list(modes) if round_no % 2 == 0 else list(reversed(modes))
        for mode in order:
            queue = Queue.from_url(url, name=f"b{uuid.uuid4().hex[:8]}", durability=modes[mode])
            try:
                await queue.send("bench", {})  # warm up: connection, script load
                seconds, lat = await one_by_one(queue, n)
                rates[mode].append(n / seconds)
                latencies[mode] += lat
                bulk[mode].append(n / await batched(queue, n))
            finally:
                await queue.close()
    result: dict[str, Any] = {"n": n, "rounds": rounds, "timeout_s": timeout}
    for mode in modes:
        result[f"{mode}_sends_per_s"] = round(statistics.median(rates[mode]))
        result[f"{mode}_send_many_per_s"] = round(statistics.median(bulk[mode]))
        result[f"{mode}_p50_ms"] = round(percentile(latencies[mode], 50), 3)
        result[f"{mode}_p99_ms"] = round(percentile(latencies[mode], 99), 3)
        result[f"{mode}_rates"] = [round(r) for r in rates[mode]]
    result["ratio_one_by_one"] = round(
        result["durable_sends_per_s"] / result["plain_sends_per_s"], 3
    )
    result["ratio_send_many"] = round(
        result["durable_send_many_per_s"] / result["plain_send_many_per_s"], 3
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable")
    parser.add_argument("--n", type=int, default=2000, help="sends per mode per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1.0, help="Durability timeout (s)")
    parser.add_argument("--pretty", action="store_true", help="indented JSON")
    args = parser.parse_args()
    with RedisServer(extra_args=PRIMARY_ARGS) as primary:
        replica = replica_of(primary)
        try:
            replica.start()
            replica.wait_replica_link(primary)
            result = asyncio.run(measure(primary.url, args.n, args.rounds, args.timeout))
            with primary.client() as client:
                result["redis"] = client.info("server")["redis_version"]
        finally:
            replica.close()
    result["delayq"] = delayq.__version__
    result["redis_py"] = redis.__version__
    emit(result, pretty=args.pretty)


if __name__ == "__main__":
    main()
