"""delayq at several git refs, interleaved in one run: which change costs what.

``scripts/bench`` compares libraries (and ``delayq_base``, one ref) end to end; on a busy
host its rounds swing more than a few percent.  This tool isolates the Python and Lua of
each ref: every round, for each ref in turn (the order rotating), a fresh child process
imports that ref's ``delayq`` (exported with ``git archive``, as ``delayq_base`` does; ``WT``
is the working tree) and, on a topic of its own on one private ``redis-server``:

- sends ``--n`` tasks one by one (``send_delayed``, delayed 1 h): tasks/s, and the
  child's and redis-server's CPU µs per send;
- sends ``--n`` ready tasks with ``send_many`` and leases and acks them all through the
  scripts (``reserve`` and ``ack``, 100 a call, as a worker does): the child's and
  redis-server's CPU µs per task of that lease-and-ack phase.

CPU time moves less than wall time with the host's load.  Reported: the median over rounds
per ref, and each ref's median ratio to the first ref within the same round.  Run with the
dev interpreter::

    .venv/bin/python -m benchmarks.refs_ab 4d95bbb,WT --rounds 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks.peers.delayq_base import ROOT, base_tree
from tests.redis_server import RedisServer

CHILD = r"""
import asyncio, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import redis
from delayq import Queue

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def redis_cpu(admin):
    info = admin.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

async def main(url, n, topic):
    queue = Queue.from_url(url, name="refs")
    admin = redis.Redis.from_url(url)
    await queue.send_delayed(topic, {"x": 0}, 3600)  # connected, scripts loaded
    c0, r0, t0 = cpu(), redis_cpu(admin), time.perf_counter()
    for _ in range(n):
        await queue.send_delayed(topic, {"order_id": 1234567, "due": 0}, 3600)
    t1, c1, r1 = time.perf_counter(), cpu(), redis_cpu(admin)
    keys = queue.keys(topic + "-drain")
    await queue.send_many(keys.topic, [{"order_id": 1234567}] * n, batch_size=1000)
    c2, r2 = cpu(), redis_cpu(admin)
    while True:
        _, _, items = await queue.scripts.reserve(
            keys, limit=100, reclaim=100, ttr_ms=60_000, max_attempts=5
        )
        if not items:
            break
        leases = [(task_id, raw.split(b",", 2)[1].decode()) for task_id, raw in items]
        await queue.scripts.ack(keys, leases)
    c3, r3 = cpu(), redis_cpu(admin)
    await queue.close()
    admin.close()
    print(json.dumps({
        "send_rate": n / (t1 - t0), "send_cpu_us": (c1 - c0) / n * 1e6,
        "send_redis_us": (r1 - r0) / n * 1e6, "drain_cpu_us": (c3 - c2) / n * 1e6,
        "drain_redis_us": (r3 - r2) / n * 1e6,
    }))

asyncio.run(main(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
"""

METRICS = ("send_rate", "send_cpu_us", "send_redis_us", "drain_cpu_us", "drain_redis_us")


def tree_of(ref: str) -> str:
    """The directory holding ``ref``'s ``delayq`` package (``WT``: the working tree)."""
    return str(ROOT) if ref == "WT" else str(base_tree(ref)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("refs", help="comma-separated git refs, WT for the working tree")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--n", type=int, default=5_000, help="tasks per phase and round")
    args = parser.parse_args()
    refs = args.refs.split(",")
    trees = {ref: tree_of(ref) for ref in refs}
    results: dict[str, list[dict[str, float]]] = {ref: [] for ref in refs}
    with RedisServer() as server:
        for round_index in range(args.rounds):
            shift = round_index % len(refs)
            for ref in refs[shift:] + refs[:shift]:
                run = subprocess.run(
                    [sys.executable, "-c", CHILD, trees[ref], server.url, str(args.n),
                     f"t{round_index}-{len(results[ref])}-{ref.replace('/', '_')}"],
                    capture_output=True, text=True, check=True, env=os.environ | {"PYTHONPATH": ""},
                )  # fmt: skip
                results[ref].append(json_line(run.stdout))
    first = refs[0]
    for ref in refs:
        medians = {m: statistics.median(r[m] for r in results[ref]) for m in METRICS}
        shown = "  ".join(f"{m} {v:,.1f}" for m, v in medians.items())
        print(f"{ref:>10}  {shown}")
        if ref != first:
            ratios = {
                m: statistics.median(
                    mine[m] / theirs[m]
                    for mine, theirs in zip(results[ref], results[first], strict=True)
                )
                for m in METRICS
            }
            print(f"{'':>10}  ratio to {first} within rounds: "
                  + "  ".join(f"{m} {v:.3f}" for m, v in ratios.items()))  # fmt: skip


def json_line(stdout: str) -> dict[str, float]:
    parsed: dict[str, float] = json.loads(stdout.strip().splitlines()[-1])
    return parsed


if __name__ == "__main__":
    main()
