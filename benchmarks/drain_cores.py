"""How many cores a drain uses: delayq worker processes and redis-server, per wall second.

The drain scenario reports rates; this tool says what bounds them on a small host.  Each
round fills one topic with ``--n`` ready no-op tasks (``send_many``) and releases ``K``
worker processes (concurrency 100 each) on it together; each counts its own completions
and its own CPU (``getrusage``), and redis-server's CPU is read from ``INFO cpu`` around
the drain.  Reported per K: tasks/s over release .. last completion, and the cores the
workers and Redis used over that time (a worker's CPU includes a quiet tail of up to
``QUIET_S`` after its last task, which adds next to nothing).

A sum near 1.00 core for one process means the worker and Redis take turns rather than
overlap; a sum well under the host's cores for K processes means the drain is not
CPU-bound.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.drain_cores --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import statistics
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from benchmarks.common import cpu_seconds, emit
from tests.redis_server import RedisServer

if TYPE_CHECKING:
    from delayq import Queue

QUIET_S = 0.3
"""A worker process stops once no task completed for this long."""
START_DELAY_S = 2.0
"""Every process is started and connected before the common release time."""


def process_cpu_seconds() -> float:
    """This process's user + sys CPU time so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def drain_until_quiet(queue: Queue, release_at: float) -> tuple[int, float, float]:
    """Register a counting no-op handler for ``noop`` on ``queue``, run a worker
    (concurrency 100) from ``release_at`` until no task completed for ``QUIET_S``, and stop
    it.  Returns the tasks completed, the wall time of the last completion, and this
    process's CPU from the release until the drain went quiet."""
    from delayq import Worker

    done, last = 0, 0.0

    @queue.topic("noop")
    async def noop(body: dict[str, Any]) -> None:
        nonlocal done, last
        done += 1
        last = time.time()

    worker = Worker(queue, concurrency=100)
    await asyncio.sleep(max(0.0, release_at - time.time()))
    cpu_before = process_cpu_seconds()
    running = asyncio.create_task(worker.run(handle_signals=False))
    seen = -1
    while done != seen or done == 0:
        seen = done
        await asyncio.sleep(QUIET_S)
    cpu = process_cpu_seconds() - cpu_before
    worker.stop()
    await running
    return done, last, cpu


def drain(url: str, name: str, release_at: float, results: Any) -> None:
    """One worker process: drain until quiet, then report (count, last completion, CPU)."""
    from delayq import Queue

    async def run() -> None:
        queue = Queue.from_url(url, name=name)
        report = await drain_until_quiet(queue, release_at)
        await queue.close()
        results.put(report)

    asyncio.run(run())


async def fill(url: str, name: str, n: int) -> None:
    from delayq import Queue

    async with Queue.from_url(url, name=name) as queue:
        await queue.send_many("noop", [{"i": i} for i in range(n)], batch_size=1000)


def release_together(
    target: Callable[..., None],
    url: str,
    arg: Any,
    processes: int,
    at_release: Callable[[], object] = lambda: None,
) -> tuple[float, list[Any]]:
    """Start ``processes`` copies of ``target(url, arg, release_at, results)`` (``arg``: a
    topic's queue name, say, or any picklable value), which begin together at
    ``release_at``; ``at_release()`` runs then in this process.  Returns ``release_at``
    (wall clock) and what each process put on ``results``."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    release_at = time.time() + START_DELAY_S
    workers = [
        context.Process(target=target, args=(url, arg, release_at, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(max(0.0, release_at - time.time()))
    at_release()
    reports = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    return release_at, reports


def interleaved(
    counts: list[int], rounds: int, measure: Callable[[int], dict[str, float]]
) -> tuple[dict[int, list[dict[str, float]]], dict[int, dict[str, float]]]:
    """``measure(k)`` for every process count, round after round (so the host's drift hits
    each count alike); returns every run and the per-count medians."""
    runs: dict[int, list[dict[str, float]]] = {k: [] for k in counts}
    for _ in range(rounds):
        for k in counts:
            runs[k].append(measure(k))
    summary = {
        k: {key: statistics.median(run[key] for run in measured) for key in measured[0]}
        for k, measured in runs.items()
    }
    return runs, summary


def cores_over_release(
    target: Callable[..., None], url: str, arg: Any, admin: redis.Redis, processes: int
) -> dict[str, float]:
    """:func:`release_together`, where each process reports (tasks done, wall time of its
    last, its CPU seconds): the tasks, tasks/s from the release to the last report's time,
    and the cores the processes and redis-server used over that time."""
    redis_at_release: list[float] = []
    release_at, reports = release_together(
        target, url, arg, processes, lambda: redis_at_release.append(cpu_seconds(admin.info("cpu")))
    )
    redis_used = cpu_seconds(admin.info("cpu")) - redis_at_release[0]
    drained = sum(report[0] for report in reports)
    wall = max(report[1] for report in reports) - release_at
    return {
        "drained": drained,
        "rate": drained / wall,
        "worker_cores": sum(report[2] for report in reports) / wall,
        "redis_cores": redis_used / wall,
    }


def one_drain(url: str, admin: redis.Redis, processes: int, n: int) -> dict[str, float]:
    """Fill a new queue's ``noop`` topic with ``n`` ready tasks and drain it with
    ``processes`` worker processes (see :func:`cores_over_release`)."""
    name = f"cores-{uuid.uuid4().hex[:8]}"
    asyncio.run(fill(url, name, n))
    return cores_over_release(drain, url, name, admin, processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n", type=int, default=40_000, help="tasks drained per run")
    parser.add_argument("--processes", default="1,2,4")
    args = parser.parse_args()
    counts = [int(k) for k in args.processes.split(",")]
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    try:
        runs, summary = interleaved(
            counts, args.rounds, lambda k: one_drain(server.url, admin, k, args.n)
        )
    finally:
        admin.close()
        server.stop()
    print(f"drain of {args.n} ready tasks, medians of {args.rounds} rounds:")
    for k, med in summary.items():
        print(
            f"  {k} process(es): {med['rate']:8,.0f}/s   workers {med['worker_cores']:.2f} cores"
            f"   redis {med['redis_cores']:.2f}   sum {med['worker_cores'] + med['redis_cores']:.2f}"
            f"   per task: workers {1e6 * med['worker_cores'] / med['rate']:.1f} us,"
            f" redis {1e6 * med['redis_cores'] / med['rate']:.1f} us"
        )
    emit({"rounds": args.rounds, "n": args.n, "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
