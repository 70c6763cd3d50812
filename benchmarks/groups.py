"""Groups: what a grouped topic costs, and what fairness it gives (docs/controls.md, "Groups").

    PYTHONPATH=. python -m benchmarks.groups [--n 20000] [--rounds 3] [--out results.json]
    PYTHONPATH=. python -m benchmarks.groups --base main [--rounds 12]

One private redis-server (no persistence), one process, one ``Worker`` (concurrency 100,
no-op handlers) per measurement:

* **drain** — N ready tasks sent with ``send_many``, then the worker drains them: tasks/s
  from the worker's start to the last completion, for an ungrouped topic, a grouped one
  (1,000 groups, no cap) and one with ``max_running_per_group=1``; ratios to the
  ungrouped drain.  Rounds interleave the variants; medians.
* **blocked** — the Redis time of a ``reserve.lua`` call (``INFO commandstats``,
  ``evalsha`` usec per call, reserve calls only) leasing 10 tasks from 1,000 groups of 10
  with ``max_running_per_group=1``, with and without a blocked group (at its cap) holding
  100,000 ready tasks, and with a group of 100,000 tasks due in an hour instead (the same
  data size: 100,000 more tasks split the topic's buckets, which costs every lease a
  little, grouped or not); the ratios, and the commands the calls ran inside Redis (the
  same in the three: the blocked group is never read).
* **--base REF** — instead: the drain of an ungrouped topic by this tree and by delayq at
  git ``REF`` (exported with ``git archive``), each in its own process, in pairs run back
  to back (the order alternating); the median of the pairs' ratios, and of the worker's
  CPU and Redis's script time per task.  A loaded host swings a single drain by tens of
  percent; pairs cancel most of that.
* **fairness** — one group with 5,000 ready tasks and 100 groups with 5, all due, no cap,
  concurrency 10: the rank of the last small-group start among the big group's starts
  (it must come before the big group's 50th), and the lateness (start - due) p50/p99 of
  the small and the big groups.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from delayq import Queue, Task, Worker
from delayq.testing import PrivateRedis

GROUPS = 1_000


async def drain(url: str, n: int, variant: str) -> float:
    queue = Queue.from_url(url, name=f"drain-{variant}-{time.monotonic_ns()}")
    done = asyncio.Event()
    count = 0
    options: dict[str, Any] = {}
    if variant != "ungrouped":
        options["group_by"] = "g"
    if variant == "cap1":
        options["max_running_per_group"] = 1

    @queue.topic("t", **options)
    async def handler(body: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    bodies = [{"g": f"g{i % GROUPS}"} for i in range(n)]
    await queue.send_many("t", bodies, batch_size=1_000)
    worker = Worker(queue, concurrency=100)
    started = time.perf_counter()
    async with worker:
        await done.wait()
        elapsed = time.perf_counter() - started
    await queue.redis.flushall()
    await queue.close()
    return n / elapsed


async def reserve_usec(url: str, variant: str) -> tuple[float, int]:
    """Redis usec per reserve.lua call, and the commands the calls ran inside Redis."""
    queue = Queue.from_url(url, name=f"blocked-{variant}-{time.monotonic_ns()}")

    @queue.topic("t", group_by="g", max_running_per_group=1)
    async def handler(body: dict[str, Any]) -> None: ...

    from delayq.worker.declare import declared

    keys = queue.keys("t")
    await queue.scripts.control(keys, declared(queue.topics["t"]))
    if variant == "blocked":
        await queue.send_many("t", [{"g": "big"}] * 100_000, batch_size=1_000)
        await queue.scripts.reserve(keys, limit=1, reclaim=100, ttr_ms=3_600_000, max_attempts=5)
    elif variant == "same_size":  # as many tasks stored, in a group due in an hour
        await queue.send_many("t", [{"g": "big"}] * 100_000, batch_size=1_000, delay=3600)
    await queue.send_many(
        "t", [{"g": f"g{i % GROUPS}"} for i in range(10 * GROUPS)], batch_size=1_000
    )
    await queue.redis.config_resetstat()
    calls = 0
    while True:
        _, _, leased = await queue.scripts.reserve(
            keys, limit=10, reclaim=100, ttr_ms=3_600_000, max_attempts=5
        )
        calls += 1
        if not leased:
            break
    stats = await queue.redis.info("commandstats")
    usec = stats["cmdstat_evalsha"]["usec"] / stats["cmdstat_evalsha"]["calls"]
    inner = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_evalsha")
    await queue.redis.flushall()
    await queue.close()
    return usec, inner


def paired(these: list[float], those: list[float]) -> float:
    """The median of the rounds' ratios (a round's figures are seconds apart, the rounds
    minutes: the host's speed drifts less within a round)."""
    return round(statistics.median(a / b for a, b in zip(these, those, strict=True)), 3)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def fairness(url: str) -> dict[str, Any]:
    queue = Queue.from_url(url, name=f"fair-{time.monotonic_ns()}")
    starts: list[tuple[str, float]] = []
    total = 5_000 + 100 * 5
    done = asyncio.Event()

    @queue.topic("t", group_by="g")
    async def handler(body: dict[str, Any], task: Task) -> None:
        starts.append((str(task.group), time.time() - task.due_at.timestamp()))
        if len(starts) == total:
            done.set()

    await queue.send_many("t", [{"g": "big"}] * 5_000, batch_size=1_000)
    await queue.send_many("t", [{"g": f"s{i}"} for i in range(100) for _ in range(5)])
    async with Worker(queue, concurrency=10):
        await done.wait()
    big_ranks = [n for n, (g, _) in enumerate(starts) if g == "big"]
    last_small = max(n for n, (g, _) in enumerate(starts) if g != "big")
    big_before_last_small = sum(1 for r in big_ranks if r < last_small)
    small = [late * 1000 for g, late in starts if g != "big"]
    big = [late * 1000 for g, late in starts if g == "big"]
    await queue.redis.flushall()
    await queue.close()
    return {
        "big_tasks_started_before_the_last_small_one": big_before_last_small,
        "every_small_before_big_50th": big_before_last_small < 50,
        "small_lateness_ms_p50": round(percentile(small, 0.5), 1),
        "small_lateness_ms_p99": round(percentile(small, 0.99), 1),
        "big_lateness_ms_p50": round(percentile(big, 0.5), 1),
        "big_lateness_ms_p99": round(percentile(big, 0.99), 1),
    }


async def main(n: int, rounds: int) -> dict[str, Any]:
    server = PrivateRedis().start()
    try:
        rates: dict[str, list[float]] = {"ungrouped": [], "grouped": [], "cap1": []}
        for _ in range(rounds):
            for variant, measured in rates.items():
                measured.append(await drain(server.url, n, variant))
        drain_rates = {k: round(statistics.median(v)) for k, v in rates.items()}
        usec: dict[str, list[float]] = {"none": [], "same_size": [], "blocked": []}
        commands: dict[str, int] = {}
        for _ in range(rounds):
            for variant, spent in usec.items():
                used, commands[variant] = await reserve_usec(server.url, variant)
                spent.append(used)
        usec_median = {k: round(statistics.median(v), 1) for k, v in usec.items()}
        return {
            "n": n, "rounds": rounds, "groups": GROUPS,
            "drain_tasks_per_s": drain_rates,
            "drain_ratio_grouped": paired(rates["grouped"], rates["ungrouped"]),
            "drain_ratio_cap1": paired(rates["cap1"], rates["ungrouped"]),
            "reserve_usec_per_call": usec_median,
            "reserve_ratio_blocked": paired(usec["blocked"], usec["none"]),
            "reserve_ratio_blocked_same_size": paired(usec["blocked"], usec["same_size"]),
            "reserve_commands_inside_redis": commands,
            "fairness": await fairness(server.url),
        }  # fmt: skip
    finally:
        server.stop()


ROOT = Path(__file__).resolve().parents[1]


async def plain_drain(url: str, n: int) -> str:
    """One ungrouped drain (run in a child process): "rate cpu_us_per_task redis_us_per_task"."""
    queue = Queue.from_url(url, name=f"ab-{time.monotonic_ns()}")
    done = asyncio.Event()
    count = 0

    @queue.topic("t")
    async def handler(body: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    await queue.send_many("t", [{}] * n, batch_size=1_000)
    await queue.redis.config_resetstat()
    cpu, started = time.process_time(), time.perf_counter()
    async with Worker(queue, concurrency=100):
        await done.wait()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    script = (await queue.redis.info("commandstats"))["cmdstat_evalsha"]["usec"]
    await queue.redis.flushall()
    await queue.close()
    return f"{n / elapsed} {cpu / n * 1e6} {script / n}"


def against_base(ref: str, n: int, rounds: int) -> dict[str, Any]:
    """Paired drains of this tree and of ``ref`` (see the module's docstring)."""
    export = Path(tempfile.mkdtemp(prefix="delayq-base-"))
    archive = subprocess.run(
        ["git", "archive", ref, "delayq"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(export)], input=archive, check=True)
    server = PrivateRedis().start()
    trees = {"tree": ROOT, "base": export}
    found: dict[str, list[list[float]]] = {"tree": [], "base": []}
    try:
        for k in range(rounds):
            for name in ("tree", "base") if k % 2 == 0 else ("base", "tree"):
                env = {**os.environ, "PYTHONPATH": f"{trees[name]}{os.pathsep}{ROOT}"}
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.groups", "--child", server.url, str(n)],
                    cwd=export if name == "base" else ROOT, env=env, capture_output=True,
                    text=True, check=True,
                ).stdout.split()  # fmt: skip
                found[name].append([float(v) for v in out])
    finally:
        server.stop()
    pairs = list(zip(found["tree"], found["base"], strict=True))
    return {
        "base": ref, "n": n, "rounds": rounds,
        "drain_ratio_median_of_pairs": round(statistics.median(t[0] / b[0] for t, b in pairs), 3),
        "worker_cpu_ratio": round(statistics.median(t[1] / b[1] for t, b in pairs), 3),
        "redis_script_time_ratio": round(statistics.median(t[2] / b[2] for t, b in pairs), 3),
        "tree_rates": [round(t[0]) for t, _ in pairs],
        "base_rates": [round(b[0]) for _, b in pairs],
    }  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(asyncio.run(plain_drain(sys.argv[2], int(sys.argv[3]))))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the figures to this JSON file")
    parser.add_argument("--base", help="compare an ungrouped drain with delayq at this git ref")
    args = parser.parse_args()
    if args.base:
        figures = against_base(args.base, args.n, args.rounds)
    else:
        figures = asyncio.run(main(args.n, args.rounds))
    print(json.dumps(figures, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
