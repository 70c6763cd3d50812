"""Draw ``docs/benchmarks/chart.png`` from a results JSON.

Runs in the ``benchmarks/.venvs/plot`` virtualenv (matplotlib is kept out of the
dev environment); the harness calls it at the end of a run, or by hand::

    benchmarks/.venvs/plot/bin/python -m benchmarks.plot RESULTS.json docs/benchmarks/chart.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

#: Lateness values at or below this (including early firings) are drawn here on the log axis.
LATENESS_FLOOR_MS = 0.1
THROUGHPUT = [
    ("enqueue_rate", "enqueue\n(one by one)"),
    ("bulk_rate", "enqueue\n(bulk API)"),
    ("drain1_rate", "drain\n1 worker"),
    ("drain2_rate", "drain\n2 workers"),
    ("drain4_rate", "drain\n4 workers"),
    ("drain_due_rate", "drain of\ndue delayed"),
]


def lateness_samples(results: dict[str, Any], lib: str) -> list[float]:
    """All lateness samples of ``lib``, pooled over rounds."""
    rounds = results["raw"].get("lateness", {}).get(lib, [])
    return [v for r in rounds if "samples" in r for v in r["samples"]]


def plot_lateness(
    ax: Any, results: dict[str, Any], libs: list[str], colors: dict[str, Any]
) -> None:
    """Empirical CDF of start - due per library, log-scale milliseconds."""
    summary = results["summary"]
    for lib in libs:
        raw = lateness_samples(results, lib)
        if not raw:
            continue
        samples = sorted(max(v, LATENESS_FLOOR_MS) for v in raw)
        ys = [(i + 1) / len(samples) for i in range(len(samples))]
        stats = summary.get(lib, {})
        label = f"{lib}  p50 {stats.get('lateness_p50', 0):,.0f} / p99 {stats.get('lateness_p99', 0):,.0f} ms"
        early = sum(1 for v in raw if v < 0)
        label += f", {early} early" if early else ""
        ax.step(samples, ys, where="post", color=colors[lib], label=label, linewidth=1.8)
    counts = results["meta"]["counts"]
    ax.set_title(
        f"Lateness: {counts['lateness']:,} tasks due over {counts['window_s']:g} s, idle worker"
    )
    ax.set_xlabel(
        f"handler start - due time (ms, log scale; <= {LATENESS_FLOOR_MS} ms drawn at it)"
    )
    ax.set_ylabel("fraction of tasks")
    ax.set_xscale("log")
    _finish(ax, legend_at="lower right")


def plot_throughput(
    ax: Any, results: dict[str, Any], libs: list[str], colors: dict[str, Any]
) -> None:
    """Grouped bars (log scale): tasks/s per scenario and library, median over rounds."""
    summary = results["summary"]
    metrics = [(k, t) for k, t in THROUGHPUT if any(k in summary.get(lib, {}) for lib in libs)]
    width = 0.8 / max(len(libs), 1)
    highest = 0.0
    for i, lib in enumerate(libs):
        bars = [
            (m + (i - (len(libs) - 1) / 2) * width, summary[lib][key])
            for m, (key, _) in enumerate(metrics)
            if key in summary.get(lib, {})
        ]
        if not bars:
            continue
        xs, values = zip(*bars, strict=True)
        highest = max(highest, *values)
        drawn = ax.bar(xs, values, width, color=colors[lib], label=lib)
        ax.bar_label(
            drawn, labels=[f"{v:,.0f}" for v in values], fontsize=6, rotation=90, padding=2
        )
    ax.set_xticks(range(len(metrics)), [t for _, t in metrics], fontsize=8)
    ax.set_yscale("log")
    if highest:
        lowest = min(v for lib in libs for k, _ in metrics if (v := summary.get(lib, {}).get(k)))
        ax.set_ylim(lowest / 3, highest * 4)  # room for the value labels
    counts = results["meta"]["counts"]
    ax.set_ylabel("tasks / s (median, log scale)")
    ax.set_title(f"Throughput: {counts['enqueue']:,} tasks, worker concurrency 100")
    _finish(ax, legend_at="upper right")


def _finish(ax: Any, legend_at: str) -> None:
    """Grid and legend — or a note when the scenario did not run."""
    if not ax.get_legend_handles_labels()[0]:
        ax.text(0.5, 0.5, "not measured in this run", ha="center", transform=ax.transAxes)
        return
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc=legend_at)


def draw(results: dict[str, Any], out: Path) -> None:
    peers = results["peers"]
    libs = [
        lib
        for lib in results["meta"]["libs"]
        if lib in results["summary"] and not peers[lib].get("reference")  # libraries only
    ]
    palette = plt.get_cmap("tab10")
    colors = {lib: palette(i % 10) for i, lib in enumerate(libs)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5))
    plot_lateness(left, results, libs, colors)
    plot_throughput(right, results, libs, colors)
    meta = results["meta"]
    mode = "quick" if meta["quick"] else "full"
    fig.suptitle(
        f"Delayed tasks on Redis {meta['redis_server']}: {mode} run, median of {meta['rounds']} "
        f"round(s), {meta['cpus']} CPUs, {meta['started_at'][:10]}",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    results_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    draw(json.loads(results_path.read_text()), out)


if __name__ == "__main__":
    main()
