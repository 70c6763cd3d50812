"""Where a drain's round trips go: every ``reserve.lua`` call of K worker processes, timed.

``drain_cores`` shows that two worker processes use ~1.5 of the host's 2 cores.  This tool
says where the rest goes.  Each round fills one topic with ``--n`` ready no-op tasks and
releases K worker processes (concurrency 100 each) on it together, as ``drain_cores``
does; each process wraps its queue's ``Scripts.reserve_reporting`` to record, per call:

* **send → script start**: wall clock at the call, to Redis's ``TIME`` read at the start
  of ``reserve.lua`` (the reply carries it; both clocks are this host's).  It holds the
  queue in Redis, including the ack call that the worker sends just before (acks travel
  ahead of the next reserve), and the wait for a core;
* **script start → back**: from there until the awaiting fetch loop resumes: the script,
  the reply, and the wait of the worker for a core to read it;
* **Python**: from one call's return to the next call, the handlers of the batch.

Across processes it also reports how often two workers' replies came back together
(within 50 µs of each other) and how much of the wall time every worker was waiting for
Redis at once.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.drain_trace --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import statistics
import time
import uuid
from typing import Any

from benchmarks.common import emit
from benchmarks.drain_cores import drain_until_quiet, fill, interleaved, release_together
from tests.redis_server import RedisServer

TOGETHER_S = 50e-6
"""Two replies that come back this close to each other count as coming back together."""

Call = tuple[float, float, float, float]
"""One reserve call: (monotonic at the call, at its return, wall at the call, Redis's TIME
at the script's start), in seconds."""


def drain(url: str, name: str, release_at: float, results: Any) -> None:
    """One worker process: drain until quiet, then report its reserve calls that leased."""
    from delayq import Queue

    async def run() -> None:
        queue = Queue.from_url(url, name=name)
        calls: list[Call] = []
        reserve = queue.scripts.reserve_reporting

        async def timed(*args: Any, **kwargs: Any) -> Any:
            sent, wall = time.monotonic(), time.time()
            found = await reserve(*args, **kwargs)
            if found.items:
                calls.append((sent, time.monotonic(), wall, found.now_us / 1e6))
            return found

        queue.scripts.reserve_reporting = timed  # type: ignore[method-assign]
        await drain_until_quiet(queue, release_at)
        await queue.close()
        results.put(calls)

    asyncio.run(run())


def percentiles(values: list[float]) -> tuple[float, float]:
    """p50 and p90 of ``values``, in ms."""
    ordered = sorted(values)
    return 1000 * statistics.median(ordered), 1000 * ordered[int(0.9 * (len(ordered) - 1))]


def together(mine: list[Call], others: list[list[Call]]) -> float:
    """Fraction of ``mine`` whose reply came back within TOGETHER_S of another worker's."""
    returns = sorted(call[1] for calls in others for call in calls)
    if not returns or not mine:
        return 0.0
    close = 0
    for call in mine:
        at = bisect.bisect_left(returns, call[1])
        near = [returns[k] for k in (at - 1, at) if 0 <= k < len(returns)]
        close += min(abs(t - call[1]) for t in near) <= TOGETHER_S
    return close / len(mine)


def all_waiting(workers: list[list[Call]]) -> float:
    """Seconds during which every worker had a reserve call in flight."""
    events = sorted(
        (t, step)
        for calls in workers
        for call in calls
        for t, step in ((call[0], 1), (call[1], -1))
    )
    waiting, since, total = 0, 0.0, 0.0
    for t, step in events:
        if waiting == len(workers):
            total += t - since
        waiting += step
        since = t
    return total


def one_round(url: str, processes: int, n: int) -> dict[str, float]:
    name = f"trace-{uuid.uuid4().hex[:8]}"
    asyncio.run(fill(url, name, n))
    _, traces = release_together(drain, url, name, processes)
    calls = [call for trace in traces for call in trace]
    span = max(call[1] for call in calls) - min(call[0] for call in calls)
    python = [
        later[0] - earlier[1] for trace in traces for earlier, later in itertools.pairwise(trace)
    ]
    queued = percentiles([call[3] - call[2] for call in calls])
    back = percentiles([call[1] - call[0] - (call[3] - call[2]) for call in calls])
    trip = percentiles([call[1] - call[0] for call in calls])
    shares = [together(trace, traces[:k] + traces[k + 1 :]) for k, trace in enumerate(traces)]
    return {
        "round_trip_p50_ms": trip[0],
        "round_trip_p90_ms": trip[1],
        "to_script_p50_ms": queued[0],
        "to_script_p90_ms": queued[1],
        "script_to_back_p50_ms": back[0],
        "script_to_back_p90_ms": back[1],
        "python_p50_ms": percentiles(python)[0],
        "replies_together": statistics.mean(shares),
        "all_waiting_share": all_waiting(traces) / span if processes > 1 else 0.0,
        "rate": n / span,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n", type=int, default=40_000, help="tasks drained per run")
    parser.add_argument("--processes", default="1,2")
    args = parser.parse_args()
    counts = [int(k) for k in args.processes.split(",")]
    server = RedisServer().start()
    try:
        runs, summary = interleaved(counts, args.rounds, lambda k: one_round(server.url, k, args.n))
    finally:
        server.stop()
    print(f"reserve calls of a drain of {args.n} ready tasks, medians of {args.rounds} rounds:")
    for k, med in summary.items():
        print(
            f"  {k} process(es): {med['rate']:8,.0f}/s"
            f"   round trip p50 / p90 {med['round_trip_p50_ms']:.2f} / "
            f"{med['round_trip_p90_ms']:.2f} ms, of it: to script {med['to_script_p50_ms']:.2f} / "
            f"{med['to_script_p90_ms']:.2f}, script to back {med['script_to_back_p50_ms']:.2f} / "
            f"{med['script_to_back_p90_ms']:.2f};   Python p50 {med['python_p50_ms']:.2f} ms;"
            f"   replies together {100 * med['replies_together']:.0f}%;"
            f"   all waiting {100 * med['all_waiting_share']:.0f}% of the time"
        )
    emit({"rounds": args.rounds, "n": args.n, "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
