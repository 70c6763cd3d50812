"""When a periodic topic ticks: a cron expression in a time zone, or a fixed interval.

Tick times are Unix milliseconds and depend on nothing but the schedule, so every worker
computes the same ticks: an interval ticks at the multiples of its length since the Unix
epoch, a cron expression at the times it matches in its time zone.  Cron expressions are
parsed and evaluated by `cronsim <https://pypi.org/project/cronsim/>`_, which follows
Debian's cron, including its daylight-saving rules: a job at a specific time (or with a
granularity over an hour) that falls in the hour skipped when clocks go forward runs right
after the jump, and one in the hour repeated when clocks go back runs once; jobs that run
more often follow the real clock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from delayq.duration import to_millis
from delayq.errors import InvalidInputError, InvalidScheduleError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from delayq.duration import Duration

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_MODES: tuple[CatchUp, ...] = ("latest", "all", "none")
MAX_CATCH_UP = 1000
"""Most missed ticks ``catch_up="all"`` runs; older ones are skipped (and logged)."""
_SECOND = timedelta(seconds=1)
DST_SLACK_MS = 3 * 3600 * 1000
"""More than any daylight-saving shift: how far before cronsim's reverse answer to look."""


def tick_id(tick_ms: int) -> str:
    """The task id of the tick at ``tick_ms``: its time in ISO 8601, UTC, to the ms."""
    moment = datetime.fromtimestamp(tick_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{tick_ms % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic topic's ticks.  Build one with :func:`schedule`.

    Attributes:
        description: ``"every 30s"`` or ``"cron */5 * * * * (Europe/Berlin)"``.
        fingerprint: identifies the tick times; a changed schedule has another one.
    """

    every_ms: int | None
    cron: str | None
    tz: str
    description: str
    fingerprint: str

    def next_after(self, ms: int) -> int:
        """The first tick strictly after ``ms``."""
        if self.every_ms is not None:
            return (ms // self.every_ms + 1) * self.every_ms
        for tick in self._cron_ticks(ms, reverse=False):
            if tick > ms:
                return tick
        raise AssertionError("unreachable: _cron_ticks ends only after a later tick")

    def ticks_back(self, ms: int, most: int) -> list[int]:
        """Up to ``most`` ticks at or before ``ms``, latest first."""
        if self.every_ms is not None:
            last = ms // self.every_ms * self.every_ms
            return [last - i * self.every_ms for i in range(most) if last - i * self.every_ms >= 0]
        # cronsim's reverse iteration only says where to start: around a DST change it
        # can disagree with forward iteration, so the ticks come from forward iteration,
        # the one next_after uses, from a little before the earliest reverse tick.
        back = []
        for tick in self._cron_ticks(ms + 1000, reverse=True):
            back.append(tick)
            if len(back) > most:
                break
        start = (min(back) if back else ms) - DST_SLACK_MS
        found: list[int] = []
        tick = self.next_after(start)
        while tick <= ms:
            found.append(tick)
            tick = self.next_after(tick)
        return found[::-1][:most]

    def _cron_ticks(self, ms: int, *, reverse: bool) -> Iterator[int]:
        from cronsim import CronSim  # imported when a cron schedule is used

        assert self.cron is not None
        start = datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(self.tz))
        if reverse:
            start += _SECOND  # cronsim starts strictly before its start, to the second
        try:
            for moment in CronSim(self.cron, start, reverse=reverse):
                yield round(moment.timestamp() * 1000)
        except StopIteration:  # pragma: no cover - cronsim looks 50 years ahead
            return


@dataclass(frozen=True, slots=True)
class PeriodicOptions:
    """What makes a topic periodic (:meth:`~delayq.Queue.periodic`): its schedule and what
    to do with missed ticks.

    Each tick runs once across every worker that consumes the topic: a tick is a task whose
    id is its time (``2026-11-25T03:00:00.000Z``), scheduled by one atomic script that
    refuses any tick not later than the last one ever scheduled.  It fires like any task
    (Redis's clock; ``task.due_at`` is the tick's time) and is retried and dead-lettered
    like one.

    Attributes:
        schedule: when it ticks (``cron``, ``every`` and ``tz`` of :meth:`~delayq.Queue.periodic`).
        catch_up: ticks that fell due while no worker ran, the one stored ahead included:
            ``"latest"`` runs the most recent one, ``"all"`` runs them all, oldest first (at
            most :data:`MAX_CATCH_UP`), ``"none"`` skips them (see :func:`after_last`).
    """

    schedule: Schedule
    catch_up: CatchUp = "latest"


def after_last(
    periodic: PeriodicOptions, last: int, now: int, last_missed: bool
) -> tuple[int, bool]:
    """The tick a chain schedules after its ``last`` tick at ``now``, per ``catch_up``; and
    whether ``last`` itself is to be dropped (unrun) first.

    ``last_missed`` says that ``last``, stored a period ahead, fell due while no worker ran
    (tick_look.lua): it is then one of the missed ticks.  ``"none"`` drops it; ``"latest"``
    drops it unless it is the most recent missed tick, which runs once; ``"all"`` keeps it,
    first of the missed ticks (at most :data:`MAX_CATCH_UP` of the newest run).  A ``last``
    that fell due while a worker ran is late, not missed: it runs whatever ``catch_up`` says.
    """
    plan = periodic.schedule
    following = plan.next_after(last)
    if following > now and not last_missed:
        return following, False  # nothing missed: the usual case
    if periodic.catch_up == "none":
        return plan.next_after(now), last_missed
    if periodic.catch_up == "latest":
        latest = plan.ticks_back(now, 1)[0]
        return (latest, last_missed) if latest > last else (following, False)
    missed = [tick for tick in plan.ticks_back(now, MAX_CATCH_UP + 1) if tick > last]
    if len(missed) > MAX_CATCH_UP:
        return missed[MAX_CATCH_UP - 1], last_missed  # the oldest of the newest MAX_CATCH_UP
    return following, False


def schedule(*, cron: str | None, every: Duration | None, tz: str | None) -> Schedule:
    """Validate a periodic topic's schedule: exactly one of ``cron`` and ``every``.

    Raises:
        InvalidScheduleError: a bad expression, interval or time zone (nothing is
            registered).
    """
    if (cron is None) == (every is None):
        raise InvalidScheduleError("a periodic topic takes exactly one of cron= or every=")
    if every is not None:
        if tz is not None:
            raise InvalidScheduleError("tz= applies to cron= schedules, not every=")
        try:
            every_ms = to_millis(every, name="every", allow_zero=False)
        except InvalidInputError as exc:
            raise InvalidScheduleError(str(exc)) from exc
        text = f"every {_seconds_text(every_ms)}"
        return Schedule(every_ms, None, "UTC", text, _fingerprint(f"every {every_ms}"))
    assert cron is not None
    zone = _zone(tz or "UTC")
    expression = _cron(cron, zone)
    text = f"cron {expression} ({zone})"
    return Schedule(None, expression, zone, text, _fingerprint(f"cron {expression} {zone}"))


def check_catch_up(value: object) -> CatchUp:
    """Return ``value`` if it is a catch-up mode, else raise :class:`InvalidScheduleError`."""
    for mode in CATCH_UP_MODES:
        if value == mode:
            return mode
    raise InvalidScheduleError(f"catch_up must be one of {CATCH_UP_MODES}, got {value!r}")


def _zone(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidScheduleError(f"tz must be an IANA time zone name, got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidScheduleError(f"unknown time zone {name!r}") from exc
    return name


def _cron(expression: object, zone: str) -> str:
    from cronsim import CronSim, CronSimError

    if not isinstance(expression, str):
        raise InvalidScheduleError(f"cron must be a str, got {type(expression).__name__}")
    normalized = " ".join(expression.split())
    try:
        # Parsing happens in the constructor; one step finds an expression that never matches.
        next(CronSim(normalized, datetime(2000, 1, 1, tzinfo=ZoneInfo(zone))))
    except (CronSimError, StopIteration) as exc:
        raise InvalidScheduleError(f"bad cron expression {expression!r}: {exc}") from exc
    return normalized


def _seconds_text(ms: int) -> str:
    return f"{ms / 1000:g}s"


def _fingerprint(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]
