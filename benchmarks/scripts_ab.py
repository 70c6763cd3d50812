"""The Lua scripts of a git ref against the working tree's, side by side in one run.

Redis's cost of a change to the scripts, measured as ``lifecycle_cost`` (in git at aa9bda3)
measured delayq: for each implementation, on a fresh private ``redis-server`` each round (the two take turns,
each going first in alternate rounds), N tasks are sent one by one (``send.lua``), N more in
calls of 1,000 (``send_many.lua``), then all leased in calls of 100 (``reserve.lua``) and
acked in calls of 100 (``ack.lua``).  Per phase: µs inside ``EVALSHA`` per task and
redis-server user+sys CPU per task.  Then ``stats()`` on a topic of ``--stats-tasks`` delayed
tasks: the median of 50 calls (µs, the client's round trip included).

Both implementations run through the working tree's Python (``Scripts``), so this compares
scripts whose KEYS and ARGV did not change.  Run with the dev interpreter::

    .venv/bin/python -m benchmarks.scripts_ab --base main --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import time
from typing import Any

import redis

from benchmarks.common import cpu_seconds, emit
from delayq import Queue
from delayq.redis.scripts import lua_source
from tests.redis_server import RedisServer

NAMES = ("send", "send_many", "reserve", "ack", "stats")
BODY = {"order_id": 1234567}
_INCLUDE = re.compile(r"^--@include (\w+)$", re.MULTILINE)


def git_source(ref: str, name: str) -> str:
    """``lua/<name>.lua`` as it is at ``ref``, includes expanded."""
    text = subprocess.run(
        ["git", "show", f"{ref}:delayq/redis/lua/{name}.lua"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return _INCLUDE.sub(lambda m: git_source(ref, m.group(1)), text)


def use_sources(queue: Queue, sources: dict[str, str]) -> None:
    """Make ``queue`` run ``sources`` instead of its own scripts (same KEYS/ARGV)."""
    for name, source in sources.items():
        queue.scripts._scripts[name] = queue.redis.register_script(source)


def counters(admin: redis.Redis) -> tuple[float, float]:
    stats = admin.info("commandstats").get("cmdstat_evalsha", {"usec": 0})
    return float(stats["usec"]), cpu_seconds(admin.info("cpu"))


async def phases(queue: Queue, admin: redis.Redis, n: int) -> dict[str, float]:
    keys = queue.keys("t")
    measured: dict[str, float] = {}
    leases: list[list[tuple[str, str]]] = []

    async def one_by_one() -> None:
        for _ in range(n):
            await queue.send("t", BODY)

    async def bulk() -> None:
        await queue.send_many("t", [BODY] * n, batch_size=1000)

    async def lease() -> None:
        while True:
            _, _, items = await queue.scripts.reserve(
                keys, limit=100, reclaim=100, ttr_ms=60_000, max_attempts=5
            )
            if not items:
                return
            leases.append([(i, raw.split(b",")[1].decode()) for i, raw in items])

    async def ack() -> None:
        for batch in leases:
            await queue.scripts.ack(keys, batch)

    for name, run, tasks in (("send", one_by_one, n), ("send_many", bulk, n),
                             ("lease", lease, 2 * n), ("ack", ack, 2 * n)):  # fmt: skip
        inside, cpu = counters(admin)
        await run()
        inside_after, cpu_after = counters(admin)
        measured[f"{name}_inside_usec"] = (inside_after - inside) / tasks
        measured[f"{name}_cpu_usec"] = (cpu_after - cpu) * 1e6 / tasks
    return measured


async def stats_cost(queue: Queue, tasks: int) -> float:
    for start in range(0, tasks, 100_000):
        count = min(100_000, tasks - start)
        await queue.send_many("big", [BODY] * count, delay=3600, batch_size=1000)
    times = []
    for _ in range(50):
        began = time.perf_counter()
        await queue.stats()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e6


async def one_round(sources: dict[str, str] | None, n: int, stats_tasks: int) -> dict[str, float]:
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    queue = Queue.from_url(server.url)
    try:
        if sources is not None:
            use_sources(queue, sources)
        await queue.send("warm", {})  # loads the scripts outside the timed phases
        await queue.stats()
        measured = await phases(queue, admin, n)
        if stats_tasks:
            measured["stats_usec"] = await stats_cost(queue, stats_tasks)
        return measured
    finally:
        await queue.close()
        admin.close()
        server.stop()


async def measure(base: str, rounds: int, n: int, stats_tasks: int) -> dict[str, Any]:
    variants: dict[str, dict[str, str] | None] = {
        base: {name: git_source(base, name) for name in NAMES},
        "working tree": None,
    }
    assert all(lua_source(name) for name in NAMES)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    order = list(variants)
    for round_no in range(rounds):
        for name in order if round_no % 2 == 0 else order[::-1]:
            runs[name].append(await one_round(variants[name], n, stats_tasks))
    summary = {
        name: {metric: statistics.median(r[metric] for r in measured) for metric in measured[0]}
        for name, measured in runs.items()
    }
    return {"base": base, "rounds": rounds, "tasks": n, "stats_tasks": stats_tasks,
            "summary": summary, "runs": runs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main", help="git ref whose scripts to compare")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--stats-tasks", type=int, default=1_000_000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.base, args.rounds, args.tasks, args.stats_tasks))
    for name, metrics in result["summary"].items():
        print(name)
        for metric, value in metrics.items():
            print(f"  {metric:22} {value:10.2f}")
    emit(result)


if __name__ == "__main__":
    main()
