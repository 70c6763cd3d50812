"""The benchmark scenarios, each a function of (context, library) -> metrics.

Every scenario starts from empty Redis servers (``ctx.reset()``) and runs the
library's roles as separate processes (see ``benchmarks/harness.py``).  The
metric names returned here are the keys summarised in ``benchmarks/report.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.common import KEY_LATENESS, TASK_NAME_BACKLOG, cpu_seconds, percentile

if TYPE_CHECKING:
    from benchmarks.harness import Context

#: Worker concurrency (max in-flight tasks per worker process) for every library.
CONCURRENCY = 100
HOUR_MS = 3_600_000
#: Delay of the tasks in the cost scenario (they are all past due when the worker starts).
COST_DELAY_MS = 1_000
#: Pause between "all workers up" and the first lateness task, so workers are idle and polling.
SETTLE_S = 1.0
#: Scale: tasks due now added on top of the K delayed ones, and drained by one worker.  A
#: 1,000-task drain lasted 0.1-0.2 s, too short for a stable CPU reading on this host (the
#: same configuration gave 1M/10k CPU ratios from 1.0 to 1.7); 10,000 last about a second.
SCALE_PROBE = 10_000
#: Scale: a size is skipped for a library whose fill takes longer than this.  The estimate
#: from the small fill includes connecting, so it is only trusted up to 2x this.
SCALE_FILL_LIMIT_S = 60.0


@dataclass(frozen=True)
class Counts:
    """Sizes of one run (``FULL`` by default, ``QUICK`` with ``--quick``)."""

    enqueue: int  # scenario 1, per API
    drain: int  # scenario 2
    drain_workers: tuple[int, ...]  # scenario 2, worker processes
    lateness: int  # scenario 3, tasks
    window_s: float  # scenario 3, spread of due times
    backlog_tracked: int  # scenario 3b, tracked tasks (window_s spread)
    backlog: int  # scenario 3b, ready untracked tasks drained meanwhile
    memory: int  # scenario 4
    cost: int  # scenario 5
    scale: tuple[int, int]  # scenario 6, delayed tasks already waiting (small, large)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


FULL = Counts(
    enqueue=20_000,
    drain=20_000,
    drain_workers=(1, 2, 4),
    lateness=2_000,
    window_s=10.0,
    backlog_tracked=2_000,
    backlog=20_000,
    memory=100_000,
    cost=20_000,
    scale=(10_000, 1_000_000),
)
QUICK = Counts(
    enqueue=2_000,
    drain=2_000,
    drain_workers=(1,),
    lateness=300,
    window_s=3.0,
    backlog_tracked=300,
    backlog=5_000,
    memory=5_000,
    cost=2_000,
    scale=(10_000, 100_000),
)


def _timeout(tasks: int, floor_s: float = 120) -> float:
    """Generous limit for a role handling ``tasks`` tasks (assumes >= 50 tasks/s)."""
    return max(floor_s, tasks / 50)


# --------------------------------------------------------------------------- 1. enqueue


def enqueue(ctx: Context, lib: str) -> dict[str, Any]:
    """N delayed tasks (1 h) awaited one by one; and via the bulk API where there is one."""
    n = ctx.counts.enqueue
    ctx.reset()
    single = ctx.run(lib, "enqueue", _timeout(n), n=n, delay_ms=HOUR_MS)
    metrics: dict[str, Any] = {"enqueue_rate": single["rate"]}
    if ctx.peers[lib]["bulk_api"]:
        ctx.reset()
        bulk = ctx.run(lib, "enqueue-bulk", _timeout(n), n=n, delay_ms=HOUR_MS)
        metrics["bulk_rate"] = bulk["rate"]
        metrics["bulk_batch"] = bulk["batch"]
    return metrics


# --------------------------------------------------------------------------- 2. drain


def drain(ctx: Context, lib: str) -> dict[str, Any]:
    """N ready no-op tasks pre-enqueued, then 1 (2, 4) worker processes at concurrency 100.

    Worker processes start, import, then wait at a barrier; once all are up they
    are released together and hand control to the library.  Rate = N / (time of
    the completion that brought the shared counter to N - release time).  Also the
    CPU per task of the worker processes and of redis-server over that time.
    """
    n = ctx.counts.drain
    metrics: dict[str, Any] = {"drain_extra_runs": 0}
    for workers in ctx.counts.drain_workers:
        ctx.reset()
        fill = ctx.run(lib, "fill-ready", _timeout(n), n=n)
        with ctx.fleet(lib, n, workers=workers) as fleet:
            done = fleet.wait_done(_timeout(n))
        metrics[f"drain{workers}_rate"] = done["rate"]
        metrics[f"drain{workers}_seconds"] = done["seconds"]
        metrics[f"drain{workers}_startup_seconds"] = done["startup_seconds"]
        metrics[f"drain{workers}_worker_cpu_usec"] = done["worker_cpu_usec"]
        metrics[f"drain{workers}_redis_cpu_usec"] = done["redis_cpu_usec"]
        metrics["drain_extra_runs"] += done["extra_runs"]
        metrics["fill_method"] = fill["method"]
    return metrics


# --------------------------------------------------------------------------- 3. lateness


def lateness(ctx: Context, lib: str) -> dict[str, Any]:
    """M tracked tasks due at random times over D s, one idle worker: start - due."""
    n, window = ctx.counts.lateness, ctx.counts.window_s
    ctx.reset()
    with ctx.fleet(lib, n, sidecars=True) as fleet:
        time.sleep(SETTLE_S)
        ctx.run(lib, "schedule-lateness", _timeout(n), n=n, window=window, seed=ctx.round + 1)
        done = fleet.wait_done(timeout=window + 120)  # taskiq re-reads schedules every 60 s
    samples = [float(v) for v in ctx.meta.client.lrange(KEY_LATENESS, 0, -1)]
    return lateness_stats(samples) | {
        "lateness_extra_runs": done["extra_runs"],
        "samples": [round(v, 3) for v in samples],
    }


def lateness_stats(samples: list[float], prefix: str = "lateness") -> dict[str, Any]:
    """p50 / p99 / max in ms and the number of early (< 0 ms) firings."""
    return {
        f"{prefix}_n": len(samples),
        f"{prefix}_p50": percentile(samples, 50),
        f"{prefix}_p99": percentile(samples, 99),
        f"{prefix}_max": max(samples, default=math.nan),
        f"{prefix}_early": sum(1 for v in samples if v < 0),
    }


def backlog(ctx: Context, lib: str) -> dict[str, Any]:
    """Lateness as above while the same worker drains a backlog of ready tasks.

    B ready untracked tasks of a second task name (``backlog``) are pre-enqueued;
    one worker (plus sidecars) is released and starts draining them, and the M
    tracked tasks due at random times over D s are enqueued right away.  Both
    task names go to the one queue / broker the worker consumes (what a user of
    the library does); delayq registers them as two topics of one queue.
    """
    n, extra, window = ctx.counts.backlog_tracked, ctx.counts.backlog, ctx.counts.window_s
    ctx.reset()
    ctx.run(lib, "fill-ready", _timeout(extra), n=extra, task=TASK_NAME_BACKLOG)
    with ctx.fleet(lib, n + extra, sidecars=True) as fleet:
        ctx.run(lib, "schedule-lateness", _timeout(n), n=n, window=window, seed=ctx.round + 1)
        done = fleet.wait_done(timeout=window + 120 + _timeout(extra))
    samples = [float(v) for v in ctx.meta.client.lrange(KEY_LATENESS, 0, -1)]
    return lateness_stats(samples, "backlate") | {
        "backlog_extra_runs": done["extra_runs"],
        "backlog_seconds": done["seconds"],
        "samples": [round(v, 3) for v in samples],
    }


# --------------------------------------------------------------------------- 4. memory


def memory(ctx: Context, lib: str) -> dict[str, Any]:
    """K tasks delayed by 1 h (20-byte payload): ``used_memory`` delta / K after FLUSHALL."""
    k = ctx.counts.memory
    ctx.reset()
    before = ctx.data.client.info("memory")["used_memory"]
    ctx.run(lib, "fill-delayed", _timeout(k), n=k, delay_ms=HOUR_MS)
    after = ctx.data.client.info("memory")["used_memory"]
    return {"memory_per_task": (after - before) / k, "used_memory_delta": after - before}


# --------------------------------------------------------------------------- 5. redis cost


def cost(ctx: Context, lib: str) -> dict[str, Any]:
    """Redis commands and CPU per task over enqueue (1 s delay, one by one) + drain of N tasks.

    The worker (and sidecars) start once every task is past due, so the run
    measures the delayed-task life cycle without idle polling.  Bookkeeping
    goes to the meta server, so every counted command is the library's.  For a
    library with a bulk API the life cycle is measured again with the tasks
    sent through it (1,000 per call): the ``*_bulk`` metrics.
    """
    metrics = _lifecycle_cost(ctx, lib, "enqueue")
    if ctx.peers[lib]["bulk_api"]:
        bulk = _lifecycle_cost(ctx, lib, "fill-delayed")
        metrics |= {
            "cmds_per_task_bulk": bulk["cmds_per_task"],
            "cpu_usec_per_task_bulk": bulk["cpu_usec_per_task"],
            "cmd_usec_per_task_bulk": bulk["cmd_usec_per_task"],
            "cost_bulk_extra_runs": bulk["cost_extra_runs"],
            "commands_bulk": bulk["commands"],
        }
    return metrics


def _lifecycle_cost(ctx: Context, lib: str, send_role: str) -> dict[str, Any]:
    """Send N tasks due in 1 s with ``send_role``, wait until due, drain them; count Redis."""
    n = ctx.counts.cost
    ctx.reset()
    ctx.data.client.config_resetstat()
    cpu_before = _redis_cpu_s(ctx)
    ctx.run(lib, send_role, _timeout(n), n=n, delay_ms=COST_DELAY_MS)
    time.sleep(COST_DELAY_MS / 1000)
    with ctx.fleet(lib, n, sidecars=True) as fleet:
        done = fleet.wait_done(_timeout(n))
    stats = ctx.data.client.info("commandstats")
    cpu_seconds = _redis_cpu_s(ctx) - cpu_before
    calls = {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items()}
    usec = sum(s["usec"] for s in stats.values())
    return {
        "cmds_per_task": sum(calls.values()) / n,
        "cmd_usec_per_task": usec / n,
        "cpu_usec_per_task": cpu_seconds * 1e6 / n,
        "drain_due_rate": done["rate"],
        "cost_extra_runs": done["extra_runs"],
        "commands": dict(sorted(calls.items(), key=lambda item: -item[1])),
    }


def _redis_cpu_s(ctx: Context) -> float:
    return cpu_seconds(ctx.data.client.info("cpu"))


# --------------------------------------------------------------------------- 6. scale


def scale(ctx: Context, lib: str) -> dict[str, Any]:
    """Promotion + reservation cost with K = 10k and 1M tasks delayed by 1 h already waiting.

    Fill K delayed tasks (bulk API, else 64 concurrent enqueues), add 10,000
    tasks due in 1 s on top, wait until they are due, then release one worker
    (plus sidecars) and time the drain of those 10,000 (release .. last
    completion), with redis-server user+sys CPU per task over that drain.  A
    size is skipped when its fill would take over 120 s at the rate measured for
    the smaller size, or does not finish within 120 s (2 x SCALE_FILL_LIMIT_S:
    the estimate is rough).  ``scale_ratio`` = large / small drain time.
    """
    from benchmarks.harness import BenchError  # runtime import: harness imports this module

    limit = 2 * SCALE_FILL_LIMIT_S
    metrics: dict[str, Any] = {}
    fill_rate = math.nan
    for label, k in zip(("small", "large"), ctx.counts.scale, strict=True):
        estimate = k / fill_rate if fill_rate > 0 else 0.0
        if estimate > limit:
            metrics["scale_skipped"] = (
                f"{k:,}: fill would take ~{estimate:.0f} s at {fill_rate:,.0f}/s (> {limit:.0f} s)"
            )
            break
        ctx.reset()
        try:
            fill = ctx.run(lib, "fill-delayed", limit, n=k)
        except BenchError:
            if label == "small":
                raise
            metrics["scale_skipped"] = f"{k:,}: fill did not finish in {limit:.0f} s"
            break
        fill_rate = k / fill["seconds"]
        ctx.run(lib, "fill-delayed", _timeout(SCALE_PROBE), n=SCALE_PROBE, delay_ms=COST_DELAY_MS)
        time.sleep(COST_DELAY_MS / 1000)
        cpu_before = _redis_cpu_s(ctx)
        with ctx.fleet(lib, SCALE_PROBE, sidecars=True) as fleet:
            done = fleet.wait_done(_timeout(SCALE_PROBE))
        metrics[f"scale_{label}_ms"] = done["seconds"] * 1000
        metrics[f"scale_{label}_cpu_usec"] = (_redis_cpu_s(ctx) - cpu_before) * 1e6 / SCALE_PROBE
        metrics[f"scale_{label}_fill_rate"] = fill_rate
        metrics["scale_extra_runs"] = metrics.get("scale_extra_runs", 0) + done["extra_runs"]
        metrics["fill_method"] = fill["method"]
    if "scale_large_ms" in metrics:
        metrics["scale_ratio"] = metrics["scale_large_ms"] / metrics["scale_small_ms"]
        metrics["scale_cpu_ratio"] = (
            metrics["scale_large_cpu_usec"] / metrics["scale_small_cpu_usec"]
        )
    return metrics


# --------------------------------------------------------------------------- 7. observe


OBSERVE_KEY = "delayq_observed"


def observe(ctx: Context, lib: str | None) -> dict[str, Any]:
    """delayq's worker CPU per task with metrics, history and sampled tracing, beside a
    plain drain, and its own CPU per recorded consumer span over the SDK's (dev
    interpreter, one process: :mod:`benchmarks.observe`)."""
    ctx.reset()
    return ctx.runner.run_module("benchmarks.observe", 600, n=ctx.counts.drain)


@dataclass(frozen=True)
class Scenario:
    run: Callable[[Context, Any], dict[str, Any]]
    once: bool = False  # True: once per round, not per library
    default: bool = True  # False: only run when named in --scenarios
    key: str = ""  # where a once-per-round scenario's results are stored


SCENARIOS: dict[str, Scenario] = {
    "enqueue": Scenario(enqueue),
    "drain": Scenario(drain),
    "lateness": Scenario(lateness),
    "backlog": Scenario(backlog),
    "memory": Scenario(memory),
    "cost": Scenario(cost),
    "scale": Scenario(scale, default=False),  # fills 1M tasks per library: minutes
    # what metrics, history and tracing cost a drain (benchmarks/observe.py)
    "observe": Scenario(observe, once=True, default=False, key=OBSERVE_KEY),
}
