"""Render the figures the fault scenarios recorded as the markdown table of
docs/guarantees-figures.md::

    DELAYQ_FAULT_FIGURES=/tmp/figures.jsonl .venv/bin/python -m pytest tests/faults
    .venv/bin/python -m tests.faults.figures /tmp/figures.jsonl
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

RECOVERY_KEYS = ("recovery_s", "resume_s")
LATENESS_KEYS = ("spike_lateness_p99_ms", "lateness_p99_ms")
SHOWN = {"scenario", "send_returned", "tasks", "sent", "lost", "duplicated", "early", "handled",
         "deliveries", "unexpected", "lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms",
         *RECOVERY_KEYS, *LATENESS_KEYS}  # fmt: skip


def _first(row: dict[str, Any], keys: tuple[str, ...], unit: str, digits: int) -> str:
    for key in keys:
        value = row.get(key)
        if isinstance(value, int | float) and not math.isnan(value):
            return f"{value:.{digits}f} {unit}"
    return "-"


def _notes(row: dict[str, Any]) -> str:
    def fmt(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3g}"
        if isinstance(value, dict):
            return ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
        return str(value)

    return "; ".join(f"{k.replace('_', ' ')}: {fmt(v)}" for k, v in row.items() if k not in SHOWN)


def render(rows: list[dict[str, Any]]) -> str:
    """The markdown table, one line per scenario."""
    lines = [
        "| scenario | tasks | lost | duplicated | early | recovery | p99 lateness | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['scenario']} | {row.get('send_returned', row.get('tasks', '-'))} "
            f"| {row.get('lost', '-')} "
            f"| {row.get('duplicated', '-')} | {row.get('early', '-')} "
            f"| {_first(row, RECOVERY_KEYS, 's', 2)} | {_first(row, LATENESS_KEYS, 'ms', 0)} "
            f"| {_notes(row)} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Print the table for the JSON-lines file named on the command line."""
    with open(sys.argv[1], encoding="utf-8") as source:
        rows = [json.loads(line) for line in source if line.strip()]
    print(render(rows))


if __name__ == "__main__":
    main()
