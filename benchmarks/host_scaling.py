"""How far a second worker process can scale a drain on this host, with no library at all.

The drain scenario's 2-process target asks one Redis and two worker processes to share two
cores.  What a second process can add depends on the shape of the work, not only on the
library: how long Redis works on each batch and how long the worker's Python works on it.
This tool builds that shape from nothing.  Each process loops: an ack call and a lease
call, pipelined as delayq's worker sends them, to a script that spins ``S`` µs (split
between the two) inside Redis, the lease returning 100 small strings; then ``P`` µs of
Python CPU on the batch: JSON decoding and object building, calibrated in each process
before the start (``--python spin``: a busy loop instead, which touches no memory;
``--calls 1``: one call a batch).  Processes are released together (as in
:mod:`benchmarks.drain_cores`) and run for ``--seconds``; their CPU and redis-server's are
read around the run.

Each ``--shapes`` entry ``S:P`` is measured with 1 and 2 processes (and 4 with
``--processes 1,2,4``), round after round.  Pick ``S`` and ``P`` so that one process
matches a worker's figures in ``drain_cores`` (tasks/s, cores in use), then lower ``S``
to see where this host lets two processes reach 1.5x one.  In the same rounds, delayq's
workers drain ``--delayq`` ready tasks (``drain_cores``' drain), so the library sits beside
the bare shapes under the same drift of the host; each ratio is the median over rounds of a
round's figure against the same round's 1-process figure.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.host_scaling --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
import redis.asyncio as aioredis

from benchmarks.common import emit
from benchmarks.drain_cores import cores_over_release, one_drain, process_cpu_seconds
from tests.redis_server import RedisServer

BATCH = 100
ITEM = "x" * 60  # about a leased task's envelope
CALIBRATION_ITERATIONS = 200_000

# Spins ARGV[1] iterations of Lua, then returns ARGV[2] copies of ARGV[3].
SPIN = """
local x = 0
for i = 1, tonumber(ARGV[1]) do
  x = x + i
end
local out = {}
for i = 1, tonumber(ARGV[2]) do
  out[i] = ARGV[3]
end
return out
"""


def spin_python(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time (the handlers of a batch).

    CPU time, not wall time: a process preempted mid-batch must still do all of its work,
    as handlers do, or contention for the cores would shorten the batch instead of
    delaying it.
    """
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


BODY = b'{"order": 12345, "payload": "xxxxxxxxxxxxxxxxxxxx", "tags": ["a", "b"]}'


def handle(raw: bytes, index: int) -> dict[str, Any]:
    """One unit of handler-like Python: decode a JSON body and build a few objects from it."""
    body = json.loads(raw)
    return {"id": f"t{index}", "order": body["order"], "tags": list(body["tags"]), "n": index}


def work_python(units: int) -> None:
    """``units`` of :func:`handle`, keeping what they build until the batch is done (as a
    worker holds a batch's deliveries): CPU time that also touches fresh memory, which a
    busy loop does not."""
    kept = [handle(BODY, i) for i in range(units)]
    kept.clear()


def units_per_us() -> float:
    """How many :func:`handle` units this process runs per µs of CPU, alone (median of 5)."""
    rates = []
    for _ in range(5):
        start = time.thread_time()
        work_python(20_000)
        rates.append(20_000 / ((time.thread_time() - start) * 1e6))
    return statistics.median(rates)


def calibrate(admin: redis.Redis, sha: str) -> float:
    """Lua loop iterations per µs inside this redis-server (median of 7 calls)."""
    rates = []
    for _ in range(7):
        admin.config_resetstat()
        admin.evalsha(sha, 0, CALIBRATION_ITERATIONS, 0, "")
        usec = float(admin.info("commandstats")["cmdstat_evalsha"]["usec"])
        rates.append(CALIBRATION_ITERATIONS / usec)
    return statistics.median(rates)


@dataclass(frozen=True)
class Load:
    """What one worker process does per batch of :data:`BATCH` tasks."""

    lua_iterations: int  # Redis time: iterations of the Lua spin, over the batch's calls
    python_us: float  # Python CPU time
    calls: int  # 1: one script call; 2: a lease call and an ack call, pipelined
    objects: bool  # Python work: JSON decoding and object building (else a busy loop)
    seconds: float  # how long the process runs


def consume(url: str, load: Load, release_at: float, results: Any) -> None:
    """One worker process: batches of ``load`` from ``release_at`` until its time is up.

    With 2 calls a batch, as delayq's worker sends them, the first is a batch of acks (200
    arguments in) and the second the lease (100 items back); each takes half the Redis
    time, and both travel in one write.
    """
    acks = ["x" * 12] * (2 * BATCH)
    units = round(load.python_us * units_per_us()) if load.objects else 0
    per_call = load.lua_iterations // load.calls

    async def run() -> None:
        client = aioredis.Redis.from_url(url)
        sha = await client.script_load(SPIN)
        await asyncio.sleep(max(0.0, release_at - time.time()))
        cpu_before, batches = process_cpu_seconds(), 0
        while time.time() < release_at + load.seconds:
            if load.calls == 1:
                await client.evalsha(sha, 0, per_call, BATCH, ITEM)
            else:
                pipe = client.pipeline(transaction=False)
                pipe.evalsha(sha, 0, per_call, 1, "1", *acks)
                pipe.evalsha(sha, 0, per_call, BATCH, ITEM)
                await pipe.execute()
            if load.objects:
                work_python(units)
            else:
                spin_python(load.python_us / 1e6)
            batches += 1
        results.put((batches * BATCH, time.time(), process_cpu_seconds() - cpu_before))
        await client.aclose()

    asyncio.run(run())


def measure(url: str, admin: redis.Redis, processes: int, load: Load) -> dict[str, float]:
    """``processes`` copies of :func:`consume` released together: tasks/s and cores used."""
    return cores_over_release(consume, url, load, admin, processes)


Measure = Callable[[int], dict[str, float]]
"""Runs one drain with the given number of processes: tasks/s and cores in use."""


def compare(
    contenders: dict[str, Measure], counts: list[int], rounds: int
) -> dict[str, dict[int, dict[str, float]]]:
    """Every contender at every process count, round after round (so the host's drift hits
    all alike); per contender and count the medians, and ``ratio``: the median over rounds
    of that round's rate against the same round's first count."""
    runs: dict[str, dict[int, list[dict[str, float]]]] = {
        name: {k: [] for k in counts} for name in contenders
    }
    for _ in range(rounds):
        for k in counts:
            for name, measure_one in contenders.items():
                runs[name][k].append(measure_one(k))
    summary: dict[str, dict[int, dict[str, float]]] = {}
    for name, by_count in runs.items():
        base = by_count[counts[0]]
        summary[name] = {
            k: {
                **{key: statistics.median(run[key] for run in measured) for key in measured[0]},
                "ratio": statistics.median(
                    run["rate"] / first["rate"] for run, first in zip(measured, base, strict=True)
                ),
            }
            for k, measured in by_count.items()
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one measurement")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument(
        "--shapes",
        default="900:1900,600:1900,450:1900",
        help="comma-separated S:P, µs of Redis script and of Python per batch of 100",
    )
    parser.add_argument(
        "--calls", type=int, choices=(1, 2), default=2,
        help="script calls per batch: 2 = an ack and a lease call pipelined, as delayq's worker",
    )  # fmt: skip
    parser.add_argument(
        "--python", choices=("objects", "spin"), default="objects",
        help="the Python work per batch: JSON decoding and object building, or a busy loop",
    )  # fmt: skip
    parser.add_argument(
        "--delayq", type=int, default=40_000, metavar="N",
        help="also drain N tasks with delayq workers in the same rounds (drain_cores); 0: no",
    )  # fmt: skip
    args = parser.parse_args()
    counts = [int(k) for k in args.processes.split(",")]
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    try:
        per_us = calibrate(admin, admin.script_load(SPIN))
        contenders: dict[str, Measure] = {}
        for shape in args.shapes.split(","):
            redis_us, python_us = (float(v) for v in shape.split(":"))
            load = Load(
                lua_iterations=round(redis_us * per_us), python_us=python_us,
                calls=args.calls, objects=args.python == "objects", seconds=args.seconds,
            )  # fmt: skip
            name = f"no library, S {redis_us:g} µs, P {python_us:g} µs (S/P {redis_us / python_us:.2f})"
            contenders[name] = partial(measure, server.url, admin, load=load)
        if args.delayq:
            contenders[f"delayq, {args.delayq:,} tasks"] = lambda k: one_drain(
                server.url, admin, k, args.delayq
            )
        summary = compare(contenders, counts, args.rounds)
    finally:
        admin.close()
        server.stop()
    print(
        f"Lua spin: {per_us:.1f} iterations per µs; batches of {BATCH}, {args.calls} call(s)"
        f" each, Python: {args.python}; medians of {args.rounds} rounds"
    )
    for name, by_count in summary.items():
        print(f"  {name}:")
        for k, med in by_count.items():
            print(
                f"    {k} process(es): {med['rate']:8,.0f}/s ({med['ratio']:.2f}x)"
                f"   workers {med['worker_cores']:.2f} cores   redis {med['redis_cores']:.2f}"
                f"   sum {med['worker_cores'] + med['redis_cores']:.2f}"
            )
    emit({"args": vars(args), "lua_iterations_per_us": per_us, "summary": summary})


if __name__ == "__main__":
    main()
