"""A total-queue checker in the spirit of Jepsen's: did every sent task come out, once, on time?

Inputs:

* the producer's record: ids it tried to send (``sent``), ids whose ``send*`` returned
  (``returned``), and optionally for each id the earliest moment it may run
  (``not_before``: the producer's real clock before the call + the delay);
* the delivery log written by the handlers (:func:`read_log`), one line per event::

      task_id,delivery_time,due[,attempt,pid,event]

  ``delivery_time`` is the real wall clock when the handler started (``CLOCK_REALTIME``,
  the clock Redis reads on this host), ``due`` the due time delayq gave the handler, both
  in Unix seconds.  ``event`` is ``done`` when the handler returned (the default for
  three-column lines), ``start`` when it began, or ``fail:<reason>``.

Outcome (:class:`Report`): a task is *handled* once a handler returned for it; *lost* if its
send returned and it was never handled; *duplicated* if handled more than once (allowed:
delivery is at-least-once); *early* if any delivery started before its due time or before
the producer's ``not_before``.  Sends that raised may or may not have been applied: such a
task is neither required nor forbidden (Jepsen's "indeterminate").
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Delivery", "Report", "assert_no_loss", "check", "publish_figures", "read_log"]

EARLY_SLACK = 0.002
"""Seconds of tolerance when comparing a delivery with a due time: Redis TIME is read in
whole milliseconds (rounded down) and the log prints microseconds."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One line of the delivery log."""

    task_id: str
    at: float
    due: float
    attempt: int = 0
    pid: int = 0
    event: str = "done"

    @classmethod
    def parse(cls, line: str) -> Delivery:
        """Parse ``task_id,delivery_time,due[,attempt,pid,event]``."""
        parts = line.rstrip("\n").split(",")
        if len(parts) < 3:
            raise ValueError(f"not a delivery log line: {line!r}")
        extra = parts[3:] + ["0", "0", "done"][len(parts) - 3 :]
        return cls(parts[0], float(parts[1]), float(parts[2]), int(extra[0]), int(extra[1]),
                   extra[2])  # fmt: skip

    def line(self) -> str:
        """The log line for this delivery."""
        return (
            f"{self.task_id},{self.at:.6f},{self.due:.6f},{self.attempt},{self.pid},{self.event}\n"
        )


def read_log(where: Path | str) -> list[Delivery]:
    """Read a delivery log file, or every ``*.log`` file in a directory (one per process)."""
    path = Path(where)
    files = sorted(path.glob("*.log")) if path.is_dir() else [path]
    deliveries = []
    for file in files:
        # What follows the last newline is dropped: a read(2) racing a writer's write(2) can
        # see part of a line (the kernel does not make a write atomic against readers), and a
        # line cut short by SIGKILL was never a completed record.
        *lines, _partial = file.read_text().split("\n")
        deliveries.extend(Delivery.parse(line) for line in lines if line.strip())
    return deliveries


def append(log: Path | str, delivery: Delivery) -> None:
    """Append one line with a single ``write(2)`` (O_APPEND), so that a process killed at
    any moment leaves whole lines and concurrent writers do not interleave."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, delivery.line().encode())
    finally:
        os.close(fd)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Report:
    """The checker's verdict for one scenario."""

    scenario: str
    sent: int
    send_returned: int
    handled: int
    lost: list[str]
    duplicated: int
    early: list[str]
    unexpected: list[str]
    deliveries: int
    lateness_p50_ms: float
    lateness_p99_ms: float
    lateness_max_ms: float
    extra: dict[str, Any] = field(default_factory=dict)

    def table(self) -> str:
        """A two-column text table, for the test's output and the soak."""
        rows = [
            ("scenario", self.scenario),
            ("sent", self.sent),
            ("send-returned", self.send_returned),
            ("handled", self.handled),
            ("lost", len(self.lost)),
            ("duplicated", self.duplicated),
            ("early", len(self.early)),
            ("unexpected", len(self.unexpected)),
            ("deliveries", self.deliveries),
            ("lateness p50 ms", f"{self.lateness_p50_ms:.1f}"),
            ("lateness p99 ms", f"{self.lateness_p99_ms:.1f}"),
            ("lateness max ms", f"{self.lateness_max_ms:.1f}"),
            *((key, _fmt(value)) for key, value in self.extra.items()),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)

    def summary(self) -> dict[str, Any]:
        """The figures as plain JSON-able values (lists replaced by their lengths)."""
        data = asdict(self)
        for key in ("lost", "early", "unexpected"):
            data[key] = len(data[key])
        extra = data.pop("extra")
        return {**data, **extra}

    def publish(self, record_property: Callable[[str, object], None] | None = None) -> None:
        """Print the table, record each figure as a pytest property, and append the figures
        to ``$DELAYQ_FAULT_FIGURES`` (JSON lines) when set, for docs/guarantees-figures.md."""
        print(f"\n{self.table()}")
        summary = self.summary()
        if record_property is not None:
            for key, value in summary.items():
                record_property(key, value)
        publish_figures(summary)


def publish_figures(figures: dict[str, Any]) -> None:
    """Append ``figures`` as one JSON line to ``$DELAYQ_FAULT_FIGURES`` when it is set
    (tests/faults/figures.py renders them for docs/guarantees-figures.md)."""
    target = os.environ.get("DELAYQ_FAULT_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(figures, default=str) + "\n")


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def check(
    scenario: str,
    *,
    sent: Iterable[str],
    returned: Iterable[str],
    deliveries: Iterable[Delivery],
    not_before: Mapping[str, float] | None = None,
    lateness_from: float | None = None,
) -> Report:
    """Compare what was sent with what the handlers saw.

    Args:
        scenario: a name for the report.
        sent: every id the producer tried to send (whether or not the call returned).
        returned: the ids whose send returned; each must be handled.
        deliveries: the delivery log.
        not_before: per id, the earliest real time a delivery may start (producer-side
            bound), checked in addition to the due time the handler was given.
        lateness_from: only deliveries due at or after this time count for lateness
            (e.g. the start of the fault), when given.
    """
    sent_ids, returned_ids = set(sent), set(returned)
    not_before = not_before or {}
    events = list(deliveries)
    # A delivery may log a "start" and a "done"/"fail" line with the same start time: count
    # each delivery once for early/lateness, keyed by (id, start time, process).
    unique = {(d.task_id, d.at, d.pid): d for d in events}.values()
    done = Counter(d.task_id for d in events if d.event == "done")
    early = sorted(
        {
            d.task_id
            for d in unique
            if d.at + EARLY_SLACK < max(d.due, not_before.get(d.task_id, -math.inf))
        }
    )
    handled = set(done) & sent_ids
    lateness = [
        (d.at - d.due) * 1000 for d in unique if lateness_from is None or d.due >= lateness_from
    ]
    return Report(
        scenario=scenario,
        sent=len(sent_ids),
        send_returned=len(returned_ids),
        handled=len(handled),
        lost=sorted(returned_ids - set(done)),
        duplicated=sum(1 for task_id, n in done.items() if n > 1 and task_id in sent_ids),
        early=early,
        unexpected=sorted(set(done) - sent_ids),
        deliveries=sum(done.values()),
        lateness_p50_ms=_percentile(lateness, 0.50),
        lateness_p99_ms=_percentile(lateness, 0.99),
        lateness_max_ms=max(lateness, default=math.nan),
    )


def assert_no_loss(report: Report, *, allow_duplicates: bool = True) -> None:
    """Fail unless nothing returned-as-sent was lost and nothing ran early."""
    assert not report.lost, f"{len(report.lost)} lost, e.g. {report.lost[:5]}\n{report.table()}"
    assert not report.early, f"{len(report.early)} early, e.g. {report.early[:5]}\n{report.table()}"
    if not allow_duplicates:
        assert report.duplicated == 0, report.table()
