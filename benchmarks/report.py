"""Turn raw per-round results into medians, text tables and the results JSON."""

from __future__ import annotations

import inspect
import json
import math
import statistics
from pathlib import Path
from typing import Any

from benchmarks import scenarios, targets

#: (metric key, column title, format) for the throughput table.
THROUGHPUT_COLUMNS = [
    ("enqueue_rate", "enqueue/s", "rate"),
    ("bulk_rate", "bulk/s", "rate"),
    ("drain1_rate", "drain x1/s", "rate"),
    ("drain2_rate", "drain x2/s", "rate"),
    ("drain4_rate", "drain x4/s", "rate"),
    ("drain_due_rate", "due-drain/s", "rate"),
]
#: Same for the lateness table: idle worker, then while draining a backlog.
LATENESS_COLUMNS = [
    ("lateness_p50", "idle p50 ms", "ms"),
    ("lateness_p99", "p99 ms", "ms"),
    ("lateness_max", "max ms", "ms"),
    ("lateness_early", "early", "int"),
    ("backlate_p50", "backlog p50 ms", "ms"),
    ("backlate_p99", "p99 ms", "ms"),
    ("backlate_max", "max ms", "ms"),
    ("backlate_early", "early", "int"),
    ("backlog_seconds", "backlog s", "dec"),
]
#: Same for the memory / Redis cost table.
COST_COLUMNS = [
    ("memory_per_task", "bytes/task", "int"),
    ("cmds_per_task", "cmds/task", "dec"),
    ("cmd_usec_per_task", "cmd us/task", "dec"),
    ("cpu_usec_per_task", "cpu us/task", "dec"),
    ("cmds_per_task_bulk", "bulk: cmds/task", "dec"),
    ("cpu_usec_per_task_bulk", "cpu us/task", "dec"),
    ("extra_runs_total", "re-runs", "int"),
]
#: Same for the drain's CPU per task, worker processes and redis-server.
DRAIN_CPU_COLUMNS = [
    ("drain1_worker_cpu_usec", "x1: workers us/task", "dec"),
    ("drain1_redis_cpu_usec", "redis", "dec"),
    ("drain2_worker_cpu_usec", "x2: workers", "dec"),
    ("drain2_redis_cpu_usec", "redis", "dec"),
    ("drain4_worker_cpu_usec", "x4: workers", "dec"),
    ("drain4_redis_cpu_usec", "redis", "dec"),
]
#: Same for the scale table (only printed when the scale scenario ran).
SCALE_COLUMNS = [
    ("scale_small_ms", "small: drain ms", "ms"),
    ("scale_large_ms", "large: drain ms", "ms"),
    ("scale_ratio", "ratio", "dec"),
    ("scale_small_cpu_usec", "small cpu us/task", "dec"),
    ("scale_large_cpu_usec", "large cpu us/task", "dec"),
    ("scale_cpu_ratio", "cpu ratio", "dec"),
    ("scale_small_fill_rate", "fill small/s", "rate"),
    ("scale_large_fill_rate", "fill large/s", "rate"),
]
#: Printed under the tables.
LEGEND = """\
Columns:
  enqueue/s     N tasks delayed by 1 h, each call awaited before the next
  bulk/s        the same through the library's bulk API, 1,000 tasks per call
  drain xK/s    N ready no-op tasks pre-enqueued, K worker processes released together:
                N / (release .. the completion that brought the shared counter to N);
                bare = no library, delayq's shape of work (benchmarks/peers/bare.py)
  drain CPU     the worker processes' and redis-server's CPU over that time, per task
  due-drain/s   the same for N delayed tasks that are all past due (cost scenario), sidecars included
  idle          handler start - due time over M tasks due at random times, idle worker;
                early = firings before the due time
  backlog       the same while the worker drains B ready tasks of another task name
                (same queue); backlog s = release .. last of the B + M completions
  bytes/task    Redis used_memory delta / K for K tasks delayed by 1 h (after FLUSHALL)
  cmds/task     INFO commandstats calls / N over enqueue (1 s delay) + drain of N tasks
  cmd us/task   INFO commandstats usec / N (time inside commands); cpu us/task: redis-server
                user+sys CPU / N (includes networking)
  bulk:         cmds/task and cpu us/task again with the N tasks sent through the bulk API
  re-runs       executions beyond the number of tasks, all scenarios and rounds together
  scale         (--scenarios scale) K small / large tasks delayed by 1 h waiting, 10,000 more
                due: one worker's drain time of the 10,000 (release .. last completion) and
                redis-server CPU per task over it; ratio = large / small"""

#: Non-metric keys in a scenario's result.
NOT_METRICS = {
    "samples",
    "commands",
    "commands_bulk",
    "fill_method",
    "bulk_batch",
    "lateness_n",
    "backlate_n",
    "scale_skipped",
}


def build(raw: dict[str, Any], peers: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The results document: run facts, methods, peers, medians and raw rounds."""
    results = {
        "meta": meta,
        "methods": {name: inspect.getdoc(s.run) for name, s in scenarios.SCENARIOS.items()},
        "peers": peers,
        "summary": summarize(raw),
        "raw": raw,
    }
    results["targets"] = targets.as_dicts(targets.judge(results))
    return results


def summarize(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Median over rounds of every numeric metric, per library; errors listed."""
    summary: dict[str, dict[str, Any]] = {}
    for results_by_lib in raw.values():
        for lib, rounds in results_by_lib.items():
            entry = summary.setdefault(lib, {})
            ok = [r for r in rounds if "error" not in r]
            entry.setdefault("errors", []).extend(r["error"] for r in rounds if "error" in r)
            for key in sorted({k for r in ok for k in r} - NOT_METRICS):
                values = [r[key] for r in ok if _is_number(r.get(key))]
                if values:
                    entry[key] = statistics.median(values)
            # Executions beyond the number of tasks (at-least-once re-runs): a total, not a median.
            reruns = sum(v for r in ok for k, v in r.items() if k.endswith("_extra_runs"))
            entry["extra_runs_total"] = entry.get("extra_runs_total", 0) + reruns
    return summary


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def has_errors(results: dict[str, Any]) -> bool:
    return any(entry["errors"] for entry in results["summary"].values())


def write(results: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(results, indent=1, sort_keys=False, default=str) + "\n")


# --------------------------------------------------------------------------- text


def fmt(value: Any, kind: str) -> str:
    """One table cell."""
    if not _is_number(value):
        return "-"
    if kind == "rate":
        return f"{value:,.0f}"
    if kind == "ms":
        return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    if kind == "int":
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def table(title: str, rows: list[list[str]], header: list[str]) -> str:
    """A plain aligned text table (first column left-aligned, the rest right-aligned)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    rule = "-" * len(line(header))
    return "\n".join([title, rule, line(header), rule, *map(line, rows), rule])


def _rows(results: dict[str, Any], columns: list[tuple[str, str, str]]) -> list[list[str]]:
    rows = []
    metrics = {key for key, _, _ in columns} - {"extra_runs_total"}  # always present
    for lib in results["meta"]["libs"]:
        entry = results["summary"].get(lib, {})
        if not metrics & entry.keys() and not entry.get("errors"):
            continue  # e.g. the no-library consumer, which only drains
        peer = results["peers"][lib]
        version = "(no library)" if peer.get("reference") else peer["version"]
        cells = [fmt(entry.get(key), kind) for key, _, kind in columns]
        rows.append([f"{lib} {version}", *cells] + (["ERR"] if entry.get("errors") else []))
    return rows


def tables(results: dict[str, Any]) -> str:
    """The report printed at the end of a run."""
    meta = results["meta"]
    rounds = f"median of {meta['rounds']} round(s)" + (", --quick" if meta["quick"] else "")
    parts = []
    small, large = meta["counts"]["scale"]
    for title, columns in (
        (f"Throughput, tasks/s ({rounds})", THROUGHPUT_COLUMNS),
        (f"Lateness ({rounds})", LATENESS_COLUMNS),
        (f"Drain, CPU per task in µs ({rounds})", DRAIN_CPU_COLUMNS),
        (f"Memory, Redis cost per task ({rounds})", COST_COLUMNS),
        (f"Scale: small = {small:,}, large = {large:,} delayed tasks ({rounds})", SCALE_COLUMNS),
    ):
        metrics = {key for key, _, _ in columns} - {"extra_runs_total"}  # always present
        if not any(key in entry for entry in results["summary"].values() for key in metrics):
            continue
        header = ["library", *(title for _, title, _ in columns)]
        rows = _rows(results, columns)
        if any(len(row) > len(header) for row in rows):
            header.append("")
            rows = [row + [""] * (len(header) - len(row)) for row in rows]
        parts.append(table(title, rows, header))
    judged = targets.text([targets.Verdict(**v) for v in results.get("targets", [])])
    if judged:
        parts.append(judged)
    skipped = _skipped(results)
    if skipped:
        parts.append(skipped)
    parts.append(LEGEND)
    parts.append(_apis(results))
    errors = _errors(results)
    if errors:
        parts.append(errors)
    return "\n\n".join(parts)


def _apis(results: dict[str, Any]) -> str:
    lines = [
        "Delayed-work API and library defaults in effect"
        f" (worker concurrency is {scenarios.CONCURRENCY} for every library):"
    ]
    for lib in results["meta"]["libs"]:
        peer = results["peers"][lib]
        lines.append(f"  {lib}: {peer['delayed_api']}")
        if peer["bulk_api"]:
            lines.append(f"  {' ' * len(lib)}  bulk: {peer['bulk_api']}")
        settings = ", ".join(f"{k}={v}" for k, v in peer["settings"].items())
        lines.append(f"  {' ' * len(lib)}  {settings}")
    return "\n".join(lines)


def _skipped(results: dict[str, Any]) -> str:
    lines = [
        f"  {lib} round {i + 1}: {r['scale_skipped']}"
        for lib, rounds in results["raw"].get("scale", {}).items()
        for i, r in enumerate(rounds)
        if "scale_skipped" in r
    ]
    return "Scale sizes skipped:\n" + "\n".join(lines) if lines else ""


def _errors(results: dict[str, Any]) -> str:
    lines = []
    for lib, entry in results["summary"].items():
        lines += [f"  {lib}: {error.splitlines()[0]}" for error in entry["errors"]]
    return "Errors:\n" + "\n".join(lines) if lines else ""


def brief(outcome: dict[str, Any]) -> str:
    """A one-line digest of one scenario result, for the progress output."""
    parts = []
    for key, value in outcome.items():
        if key in NOT_METRICS or not _is_number(value) or key.endswith("_seconds"):
            continue
        parts.append(f"{key}={value:,.1f}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)
