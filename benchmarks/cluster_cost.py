"""What a Redis Cluster costs a producer and a worker, side by side in one run.

Starts one private redis-server and one private 3-master + 3-replica cluster
(tests/redis_cluster.py), then, per round and per setup, on a topic of its own:

- ``single+lane``: ``Queue.from_url(url)`` on the single node (the script lane);
- ``single-pool``: the same queue with its lane switched off (every script on redis-py's
  pool, as on a cluster);
- ``cluster``: ``Queue.from_url(url, cluster=True)`` (redis-py's ``RedisCluster``: no lane);

The single node has one replica, as each cluster master has, so that both Redis figures
include feeding a replica.

sends ``--n`` tasks one by one (``send_delayed``, 1 h): sends/s and the client's CPU µs per
send; then leases and acks ``--n`` ready tasks (``reserve`` + ``ack`` through the scripts,
100 a call): client CPU µs per task, and the CPU µs per task of the redis-server that ran
them (INFO's used_cpu_sys + used_cpu_user; on the cluster, the master owning the topic).
Medians over rounds::

    .venv/bin/python -m benchmarks.cluster_cost --rounds 5 --n 2000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from delayq import Queue
from tests.redis_cluster import RedisCluster
from tests.redis_server import PRIMARY_ARGS, RedisServer, replica_of


def _server_cpu(server: RedisServer) -> float:
    with server.client() as client:
        info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def _measure(queue: Queue, server: RedisServer, n: int) -> dict[str, float]:
    topic = "bench"
    keys = queue.keys(topic)
    ids = [uuid.uuid4().hex for _ in range(n)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for task_id in ids:
        await queue.send_delayed(topic, {"n": 1}, 3600, task_id=task_id)
    send_wall, send_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await queue.send_many(topic, [{"n": 1}] * n)
    redis0, cpu0 = _server_cpu(server), time.process_time()
    done = 0
    while done < n:
        _now, _next, items = await queue.scripts.reserve(
            keys, limit=100, reclaim=0, ttr_ms=60_000, max_attempts=5
        )
        if not items:
            break
        leases = [(task_id, raw.split(b",", 2)[1].decode()) for task_id, raw in items]
        await queue.scripts.ack(keys, leases)
        done += len(items)
    lease_cpu = time.process_time() - cpu0
    redis_cpu = _server_cpu(server) - redis0
    return {
        "sends_per_s": n / send_wall,
        "send_client_us": send_cpu / n * 1e6,
        "drain_client_us": lease_cpu / max(done, 1) * 1e6,
        "drain_redis_us": redis_cpu / max(done, 1) * 1e6,
    }


async def _round(single: RedisServer, cluster: RedisCluster, n: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    name = f"b{uuid.uuid4().hex[:8]}"
    queue = Queue.from_url(single.url, name=name)
    out["single+lane"] = await _measure(queue, single, n)
    await queue.close()
    queue = Queue.from_url(single.url, name=name + "p")
    await queue.scripts.aclose()
    queue.scripts.use_lane(None)  # the pool only, as on a cluster
    out["single-pool"] = await _measure(queue, single, n)
    await queue.close()
    queue = Queue.from_url(cluster.url, name=name + "c", cluster=True)
    owner = cluster.node_of(queue.keys("bench").wheel)
    out["cluster"] = await _measure(queue, owner, n)
    await queue.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    rows: dict[str, list[dict[str, float]]] = {}
    with (
        RedisServer(extra_args=list(PRIMARY_ARGS)) as single,
        replica_of(single) as replica,
        RedisCluster() as cluster,
    ):
        replica.wait_replica_link(single)
        for _ in range(args.rounds):
            for setup, figures in asyncio.run(_round(single, cluster, args.n)).items():
                rows.setdefault(setup, []).append(figures)
    keys: list[str] = list(next(iter(rows.values()))[0])
    print(f"{'setup':<14}" + "".join(f"{k:>18}" for k in keys))
    for setup, found in rows.items():
        medians: list[Any] = [statistics.median(r[k] for r in found) for k in keys]
        print(f"{setup:<14}" + "".join(f"{m:>18.1f}" for m in medians))


if __name__ == "__main__":
    main()
