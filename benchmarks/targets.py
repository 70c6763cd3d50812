"""delayq's performance targets, judged on one run's figures.

This host is two shared cores whose speed drifts by up to 1.6x between hours, so the
targets that depend on the host's speed are stated against a yardstick measured in the
same run, as the median over rounds of each round's ratio (a round's two figures are
minutes apart at most; the rounds, an hour): the 2-process drain against a consumer with
no library doing delayq's shape of work (``benchmarks/peers/bare.py``).  The others compare
delayq with its peers in the same run, or are absolute (lateness, in milliseconds).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

DRAIN_SCALING = 0.95
"""delayq's 2-process / 1-process drain ratio, as a fraction of the bare consumer's."""


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run


def judge(results: dict[str, Any]) -> list[Verdict]:
    """Every target that this run's scenarios measure."""
    summary = results["summary"]
    delayq = summary.get("delayq", {})
    if not delayq:
        return []
    peers = {
        lib: summary.get(lib, {})
        for lib, facts in results["peers"].items()
        if lib != "delayq" and not facts.get("reference")
    }
    checks: list[Callable[[], Verdict | None]] = [
        lambda: _versus_peers(delayq, peers, "drain1_rate", 4, "drain, 1 process"),
        lambda: _drain_scaling(results),
        lambda: _versus_peers(delayq, peers, "bulk_rate", 3, "bulk send"),
        lambda: _at_least(delayq, "bulk_rate", 50_000, "bulk send ≥ 50,000 tasks/s", "{:,.0f}/s"),
        lambda: _lateness(delayq),
        lambda: _at_most(delayq, "backlate_p99", 50, "lateness while draining: p99 ≤ 50 ms"),
        lambda: _memory(delayq, peers),
        lambda: _scale(delayq),
    ]
    return [verdict for check in checks if (verdict := check()) is not None]


def as_dicts(verdicts: list[Verdict]) -> list[dict[str, Any]]:
    return [asdict(v) for v in verdicts]


def text(verdicts: list[Verdict]) -> str:
    """The targets as printed under the tables."""
    if not verdicts:
        return ""
    marks = {True: "met", False: "NOT MET", None: "-"}
    lines = ["delayq's targets in this run:"]
    lines += [f"  [{marks[v.met]:>7}] {v.target}: {v.measured}" for v in verdicts]
    return "\n".join(lines)


def _versus_peers(
    delayq: dict[str, Any], peers: dict[str, dict[str, Any]], key: str, times: float, what: str
) -> Verdict | None:
    mine = delayq.get(key)
    theirs = {lib: entry[key] for lib, entry in peers.items() if entry.get(key)}
    if not mine or not theirs:
        return None
    best = max(theirs, key=lambda lib: theirs[lib])
    ratio = mine / theirs[best]
    return Verdict(
        f"{what} ≥ {times:g}x the fastest peer",
        f"{mine:,.0f} vs {best} {theirs[best]:,.0f}/s = {ratio:.1f}x",
        ratio >= times,
    )


Figure = tuple[str, str, Callable[[dict[str, Any]], float | None]]
"""Where a round's figure is: (scenario, library, how to read it)."""


def _scaling(outcome: dict[str, Any]) -> float | None:
    """One round's drain with 2 processes over the same round's with 1."""
    one, two = outcome.get("drain1_rate"), outcome.get("drain2_rate")
    return two / one if one and two else None


def _paired(results: dict[str, Any], mine: Figure, yardstick: Figure) -> list[float]:
    """Round by round, ``mine`` over ``yardstick`` (rounds where either failed are left out)."""
    raw = results["raw"]
    outcomes = [raw.get(scenario, {}).get(who, []) for scenario, who, _ in (mine, yardstick)]
    ratios = []
    for a, b in zip(*outcomes, strict=False):
        x, y = mine[2](a), yardstick[2](b)
        if x and y:
            ratios.append(x / y)
    return ratios


def _rounds(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x (rounds {', '.join(f'{r:.2f}' for r in ratios)})"


def _drain_scaling(results: dict[str, Any]) -> Verdict | None:
    """delayq's 2/1 ratio against the bare consumer's, paired round by round."""
    quotients = _paired(results, ("drain", "delayq", _scaling), ("drain", "bare", _scaling))
    if not quotients:
        return None
    mine = [r for r in map(_scaling, results["raw"]["drain"]["delayq"]) if r]
    bare = [r for r in map(_scaling, results["raw"]["drain"]["bare"]) if r]
    return Verdict(
        f"drain, 2 processes / 1 ≥ {DRAIN_SCALING:g}x the no-library consumer's ratio",
        f"delayq {statistics.median(mine):.2f}x, no library {statistics.median(bare):.2f}x:"
        f" {_rounds(quotients)}",
        statistics.median(quotients) >= DRAIN_SCALING,
    )


def _at_least(
    delayq: dict[str, Any], key: str, bound: float, what: str, form: str
) -> Verdict | None:
    value = delayq.get(key)
    if value is None:
        return None
    return Verdict(what, form.format(value), value >= bound)


def _at_most(delayq: dict[str, Any], key: str, bound: float, what: str) -> Verdict | None:
    value = delayq.get(key)
    if value is None:
        return None
    return Verdict(what, f"{value:.1f} ms", value <= bound)


def _lateness(delayq: dict[str, Any]) -> Verdict | None:
    p99, peak, early = (delayq.get(f"lateness_{k}") for k in ("p99", "max", "early"))
    if p99 is None or peak is None or early is None:
        return None
    return Verdict(
        "lateness, idle worker: p99 ≤ 5 ms, max ≤ 20 ms, none early",
        f"p99 {p99:.1f} ms, max {peak:.1f} ms, {early:.0f} early",
        p99 <= 5 and peak <= 20 and early == 0,
    )


def _memory(delayq: dict[str, Any], peers: dict[str, dict[str, Any]]) -> Verdict | None:
    mine = delayq.get("memory_per_task")
    theirs = {lib: e["memory_per_task"] for lib, e in peers.items() if e.get("memory_per_task")}
    if not mine or not theirs:
        return None
    lean = min(theirs, key=lambda lib: theirs[lib])
    return Verdict(
        "memory ≤ 0.5x the leanest peer",
        f"{mine:.0f} vs {lean} {theirs[lean]:.0f} bytes a task = {mine / theirs[lean]:.2f}x",
        mine / theirs[lean] <= 0.5,
    )


def _scale(delayq: dict[str, Any]) -> Verdict | None:
    time_ratio, cpu_ratio = delayq.get("scale_ratio"), delayq.get("scale_cpu_ratio")
    if time_ratio is None or cpu_ratio is None:
        return None
    return Verdict(
        "scale: draining among 1M waiting tasks ≤ 1.5x among 10k",
        f"drain time {time_ratio:.2f}x, Redis CPU {cpu_ratio:.2f}x",
        time_ratio <= 1.5 and cpu_ratio <= 1.5,
    )
