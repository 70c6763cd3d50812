"""Benchmark orchestrator: ``scripts/bench`` runs ``python -m benchmarks.harness``.

Runs under the project's dev interpreter with the standard library and
redis-py only.  It starts two private ``redis-server`` processes on free
loopback ports — *data* (the library under test has it to itself) and *meta*
(completion counters and lateness samples) — then runs every selected
scenario for every selected library, interleaved (round 1: A B C…, round 2:
B C… A, …), each role in its own process with the library's own virtualenv
interpreter.  Runners talk back through one JSON line on stdout (see
``benchmarks.common.emit``).

Results: tables on stdout, everything (per-round raw values, medians,
versions, settings, methods) in ``benchmarks/results/<timestamp>.json``, and a
chart in ``docs/benchmarks/chart.png`` drawn by ``benchmarks/plot.py`` in the
``plot`` virtualenv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from benchmarks import report, scenarios
from benchmarks.common import (
    KEY_COUNT,
    KEY_DONE_AT,
    KEY_GO,
    KEY_LATENESS,
    KEY_READY,
    cpu_seconds,
    parse_result,
)
from benchmarks.peers import DEV_GROUP, PEERS, RUNNABLE
from delayq.testing import PrivateRedis

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
VENVS_DIR = BENCH_DIR / ".venvs"
RESULTS_DIR = BENCH_DIR / "results"
CHART_PATH = ROOT / "docs" / "benchmarks" / "chart.png"
PLOT_GROUP = "plot"
#: A fleet that made some completions and then none for this long has stalled: it is failed
#: then rather than at its timeout.  Over twice taskiq's 60 s schedule re-read, the longest
#: pause a peer takes by design.
STALL_S = 150.0
DEFAULT_SCENARIOS = [name for name, s in scenarios.SCENARIOS.items() if s.default]


class BenchError(RuntimeError):
    """A scenario could not complete for one library (reported, the run goes on)."""


# --------------------------------------------------------------------------- redis servers


@dataclass
class Server:
    """One of the run's private redis-servers (:class:`delayq.testing.PrivateRedis`, no
    persistence) and a client of it."""

    process: PrivateRedis
    client: redis.Redis

    @classmethod
    def start(cls) -> Server:
        process = PrivateRedis(extra_args=["--loglevel", "warning"]).start()
        return cls(process, process.client(decode_responses=True))

    @property
    def url(self) -> str:
        return self.process.url

    def reset(self) -> None:
        """Empty the server: keys, cached scripts and functions."""
        self.client.flushall()
        self.client.script_flush()
        self.client.execute_command("FUNCTION", "FLUSH")

    def close(self) -> None:
        self.client.close()
        self.process.close()


# --------------------------------------------------------------------------- runner processes


def interpreter(lib: str) -> Path:
    """The Python that runs ``lib``'s adapter: its group's venv, or the dev interpreter."""
    group = RUNNABLE[lib]
    return Path(sys.executable) if group == DEV_GROUP else VENVS_DIR / group / "bin" / "python"


def flags(options: dict[str, Any]) -> list[str]:
    """``{"delay_ms": 5}`` -> ``["--delay-ms", "5"]``."""
    return [
        part
        for key, value in options.items()
        for part in (f"--{key.replace('_', '-')}", str(value))
    ]


@dataclass
class Proc:
    """A runner process with its stdout/stderr in files (no pipe can fill up)."""

    label: str
    popen: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path

    def result(self) -> dict[str, Any]:
        try:
            return parse_result(self.out_path.read_text())
        except ValueError:
            raise BenchError(f"{self.label}: exit {self.popen.returncode}\n{self.tail()}") from None

    def tail(self, lines: int = 15) -> str:
        text = self.err_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) + f"\n(full log: {self.err_path})"

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


@dataclass
class Runner:
    """Launches peer roles (``python -m benchmarks.peers.<lib> ROLE ...``)."""

    data: Server
    meta: Server
    log_dir: Path
    _seq: int = 0
    live: list[Proc] = field(default_factory=list)

    def spawn(self, lib: str, role: str, **options: Any) -> Proc:
        """Start one role of ``lib``'s adapter in the background."""
        argv = [str(interpreter(lib)), "-m", f"benchmarks.peers.{lib}", role]
        argv += ["--redis-url", self.data.url, "--meta-url", self.meta.url, *flags(options)]
        return self.launch(f"{lib}-{role}", argv)

    def run(self, lib: str, role: str, timeout: float, **options: Any) -> dict[str, Any]:
        """Run one role of ``lib``'s adapter to completion and return its JSON result."""
        return self.finish(self.spawn(lib, role, **options), timeout)

    def run_module(self, module: str, timeout: float, **options: Any) -> dict[str, Any]:
        """Run ``python -m module`` with the harness's own interpreter."""
        argv = [sys.executable, "-m", module, "--redis-url", self.data.url, *flags(options)]
        return self.finish(self.launch(module.rsplit(".", 1)[-1], argv), timeout)

    def launch(self, name: str, argv: list[str]) -> Proc:
        self._seq += 1
        label = f"{self._seq:04d}-{name}"
        out_path, err_path = self.log_dir / f"{label}.out", self.log_dir / f"{label}.err"
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        with out_path.open("wb") as out, err_path.open("wb") as err:
            popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)
        proc = Proc(label, popen, out_path, err_path)
        self.live.append(proc)
        return proc

    def finish(self, proc: Proc, timeout: float) -> dict[str, Any]:
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise BenchError(
                f"{proc.label}: no result after {timeout:.0f}s\n{proc.tail()}"
            ) from None
        return proc.result()

    def kill_all(self) -> None:
        for proc in self.live:
            proc.kill()
        self.live.clear()


class Fleet:
    """The worker processes (plus sidecars) of one library for one measurement.

    The processes start, import, report ready and wait for :meth:`release`, so
    they all begin serving at the same moment.  Workers stop by themselves once
    the shared completion counter reaches ``target``; the one that reaches it
    stores the time (``KEY_DONE_AT``).
    """

    def __init__(
        self, runner: Runner, lib: str, target: int, workers: int, sidecars: Sequence[str]
    ):
        self.runner, self.lib, self.target = runner, lib, target
        self.workers = [
            runner.spawn(lib, "worker", n=target, concurrency=scenarios.CONCURRENCY)
            for _ in range(workers)
        ]
        self.sidecars = [runner.spawn(lib, "sidecar", n=target, name=name) for name in sidecars]
        self.redis_cpu_at_release = 0.0

    @property
    def procs(self) -> list[Proc]:
        return self.workers + self.sidecars

    def release(self, timeout: float = 60.0) -> None:
        """Wait until every process is up (imports done), then let them all start serving."""
        meta = self.runner.meta.client
        self._poll(lambda: int(meta.get(KEY_READY) or 0) >= len(self.procs), timeout, "start")
        self.redis_cpu_at_release = self._redis_cpu()
        meta.set(KEY_GO, repr(time.time()))

    def wait_done(self, timeout: float) -> dict[str, Any]:
        """Block until ``target`` completions; return timings from the workers."""
        meta = self.runner.meta.client
        self._poll(lambda: meta.exists(KEY_DONE_AT), timeout, "finish", stall_s=STALL_S)
        redis_cpu = self._redis_cpu() - self.redis_cpu_at_release
        done_at = float(meta.get(KEY_DONE_AT))
        results = []
        for proc in self.procs:
            try:
                proc.popen.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise BenchError(
                    f"{proc.label} did not exit after the target\n{proc.tail()}"
                ) from None
            results.append(proc.result())
        workers = results[: len(self.workers)]
        started_at = min(r["started_at"] for r in workers)
        seconds = done_at - started_at
        firsts = [r["first_at"] for r in workers if r["first_at"]]
        return {
            "workers": len(self.workers),
            "seconds": seconds,
            # Release .. first completion: the library's start-up inside the measured time.
            "startup_seconds": min(firsts) - started_at if firsts else None,
            "rate": self.target / seconds,
            # Only `target` tasks exist, so completions beyond it are re-runs.
            "extra_runs": self.completions() - self.target,
            # CPU per task from the release to the target (Redis: read as the poll saw it).
            "worker_cpu_usec": sum(r["cpu_seconds"] for r in workers) * 1e6 / self.target,
            "redis_cpu_usec": redis_cpu * 1e6 / self.target,
            "processes": results,
        }

    def _redis_cpu(self) -> float:
        return cpu_seconds(self.runner.data.client.info("cpu"))

    def _poll(
        self, condition: Any, timeout: float, what: str, stall_s: float | None = None
    ) -> None:
        """Wait for ``condition``; fail after ``timeout``, or after ``stall_s`` without a new
        completion once some were made (a run stuck short of its target fails early)."""
        deadline = time.monotonic() + timeout
        seen, seen_at = 0, time.monotonic()
        while not condition():
            if stall_s is not None:
                done = self.completions()
                if done != seen:
                    seen, seen_at = done, time.monotonic()
                elif done > 0 and time.monotonic() - seen_at > stall_s:
                    raise BenchError(
                        f"{self.lib}: workers stalled, no completion for {stall_s:.0f}s"
                        f" ({self.progress()})"
                    )
            exited = [proc for proc in self.procs if proc.popen.poll() is not None]
            if exited and not condition():  # re-check: it may have finished in between
                raise BenchError(f"{exited[0].label} exited early\n{exited[0].tail()}")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{self.lib}: workers did not {what} in {timeout:.0f}s ({self.progress()})"
                )
            time.sleep(0.05)

    def completions(self) -> int:
        """Task executions recorded so far (plain and tracked)."""
        meta = self.runner.meta.client
        return int(meta.get(KEY_COUNT) or 0) + int(meta.llen(KEY_LATENESS))

    def progress(self) -> str:
        return f"{self.completions()}/{self.target} tasks completed"

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()


@dataclass
class Context:
    """What a scenario function gets: the servers, the runner, the counts and peer facts."""

    runner: Runner
    counts: scenarios.Counts
    peers: dict[str, dict[str, Any]]
    round: int = 0

    @property
    def data(self) -> Server:
        return self.runner.data

    @property
    def meta(self) -> Server:
        return self.runner.meta

    def reset(self) -> None:
        """Fresh state for the next measurement: no processes, empty servers."""
        self.runner.kill_all()
        self.data.reset()
        self.meta.reset()

    def run(self, lib: str, role: str, timeout: float = 600, **options: Any) -> dict[str, Any]:
        return self.runner.run(lib, role, timeout, **options)

    @contextlib.contextmanager
    def fleet(
        self, lib: str, target: int, workers: int = 1, sidecars: bool = False
    ) -> Iterator[Fleet]:
        """Start workers (and, if asked, the library's sidecars) together; kill leftovers on exit."""
        names = self.peers[lib]["sidecars"] if sidecars else []
        fleet = Fleet(self.runner, lib, target, workers, names)
        try:
            fleet.release()
            yield fleet
        finally:
            fleet.kill()


# --------------------------------------------------------------------------- main loop


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="small counts, 1 round (< 1 min/library)"
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 3, or 1 with --quick)")
    parser.add_argument(
        "--only",
        help=f"comma-separated libraries (default: {','.join(PEERS)}; "
        f"also: {','.join(RUNNABLE.keys() - PEERS.keys())})",
    )
    parser.add_argument(
        "--scenarios",
        help=f"comma-separated scenarios (default: {','.join(DEFAULT_SCENARIOS)}; also: scale, observe)",
    )
    parser.add_argument("--no-chart", action="store_true", help="skip the chart")
    parser.add_argument(
        "--chart",
        type=Path,
        help="where to write the chart (default: docs/benchmarks/chart.png for a full run of "
        "every library and the default scenarios, else beside the results JSON)",
    )
    parser.add_argument(
        "--list-venvs", action="store_true", help="print the virtualenv groups this run needs, exit"
    )
    args = parser.parse_args(argv)
    args.libs = _pick(args.only, list(RUNNABLE), "library", list(PEERS))
    args.scenarios = _pick(args.scenarios, list(scenarios.SCENARIOS), "scenario", DEFAULT_SCENARIOS)
    if not args.only and all(scenarios.SCENARIOS[name].once for name in args.scenarios):
        # Only once-per-round scenarios (observe): no library's runner is needed,
        # nor a chart of the libraries.
        args.libs, args.no_chart = [], True
    args.rounds = args.rounds or (1 if args.quick else 3)
    return args


def _pick(
    option: str | None, known: list[str], what: str, default: list[str] | None = None
) -> list[str]:
    if not option:
        return known if default is None else default
    chosen = [item.strip() for item in option.split(",") if item.strip()]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what}(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def venv_groups(args: argparse.Namespace) -> list[str]:
    """Virtualenv groups needed by this run (``scripts/bench`` creates them)."""
    groups = dict.fromkeys(RUNNABLE[lib] for lib in args.libs if RUNNABLE[lib] != DEV_GROUP)
    if not args.no_chart:
        groups[PLOT_GROUP] = None
    return list(groups)


def order(libs: list[str], round_index: int) -> list[str]:
    """Rotate the library order every round so nobody always goes first."""
    shift = round_index % len(libs)
    return libs[shift:] + libs[:shift]


def run_rounds(ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    """All rounds x scenarios x libraries; returns raw per-round results."""
    raw: dict[str, Any] = {name: {} for name in args.scenarios}
    for round_index in range(args.rounds):
        ctx.round = round_index
        for name in args.scenarios:
            scenario = scenarios.SCENARIOS[name]
            targets = [None] if scenario.once else order(args.libs, round_index)
            for lib in targets:
                if lib is not None and name not in (ctx.peers[lib]["scenarios"] or [name]):
                    continue
                key = lib or scenario.key
                label = f"[round {round_index + 1}/{args.rounds}] {name:<8} {key:<10}"
                print(label, end=" ", flush=True)
                started = time.monotonic()
                try:
                    outcome = scenario.run(ctx, lib)
                    print(f"ok  {report.brief(outcome)} ({time.monotonic() - started:.1f}s)")
                except BenchError as exc:
                    outcome = {"error": str(exc)}
                    print(f"FAILED ({time.monotonic() - started:.1f}s)\n{exc}")
                finally:
                    ctx.runner.kill_all()
                raw[name].setdefault(key, []).append(outcome)
    return raw


def describe_peers(runner: Runner, libs: list[str]) -> dict[str, dict[str, Any]]:
    """Versions, APIs and defaults of every selected library (also checks its venv works)."""
    missing = [str(interpreter(lib)) for lib in libs if not interpreter(lib).exists()]
    if missing:
        raise SystemExit(f"missing interpreter(s) {', '.join(missing)}: run scripts/bench")
    return {lib: runner.run(lib, "describe", timeout=120) for lib in libs}


def default_chart_path(args: argparse.Namespace, results_path: Path) -> Path:
    """The published chart only for a full run of every library and the default scenarios:
    a quick or partial run (``--quick``, ``--only``, ``--scenarios``) must not replace it."""
    complete = not args.quick and args.libs == list(PEERS) and args.scenarios == DEFAULT_SCENARIOS
    return CHART_PATH if complete else results_path.with_suffix(".png")


def draw_chart(results_path: Path, chart_path: Path) -> None:
    python = VENVS_DIR / PLOT_GROUP / "bin" / "python"
    if not python.exists():
        print(f"chart skipped: {python} missing (scripts/bench creates it)")
        return
    chart_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(python), "-m", "benchmarks.plot", str(results_path), str(chart_path)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    subprocess.run(argv, cwd=ROOT, env=env, check=True)
    print(f"chart:   {chart_path.relative_to(ROOT)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_venvs:
        for group in venv_groups(args):  # nothing at all when none is needed
            print(group)
        return 0
    counts = scenarios.QUICK if args.quick else scenarios.FULL
    log_dir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))
    data = Server.start()
    meta = Server.start()
    runner = Runner(data, meta, log_dir)
    started_at = datetime.now(UTC)
    try:
        print(f"redis:   data {data.url}  meta {meta.url}  (logs: {log_dir})")
        peers = describe_peers(runner, args.libs)
        for lib, facts in peers.items():
            print(
                f"peer:    {lib} {facts['version']} (redis-py {facts['redis_py']}): {facts['delayed_api']}"
            )
        ctx = Context(runner, counts, peers)
        raw = run_rounds(ctx, args)
        redis_version = data.client.info("server")["redis_version"]
    finally:
        runner.kill_all()
        data.close()
        meta.close()
    results = report.build(
        raw=raw,
        peers=peers,
        meta={
            "started_at": started_at.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(),
            "quick": args.quick,
            "rounds": args.rounds,
            "libs": args.libs,
            "scenarios": args.scenarios,
            "counts": counts.as_dict(),
            "redis_server": redis_version,
            "harness_python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
    )
    print()
    print(report.tables(results))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results_path = RESULTS_DIR / f"{started_at.strftime('%Y%m%dT%H%M%SZ')}.json"
    report.write(results, results_path)
    print(f"\nresults: {results_path.relative_to(ROOT)}")
    if not args.no_chart:
        draw_chart(results_path, args.chart or default_chart_path(args, results_path))
    if report.has_errors(results):
        print(f"some measurements failed; runner logs kept in {log_dir}")
        return 1
    shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
