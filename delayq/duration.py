"""Durations at the API edge: seconds as int/float, or a timedelta, turned into milliseconds."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from delayq.errors import InvalidDurationError

Duration = int | float | timedelta
"""Seconds as an int or float (sub-second values work), or a ``timedelta``."""

MAX_SECONDS = 100 * 365 * 86_400
"""Longest duration accepted (100 years).  Without a bound, a due time past the year 9999
would be stored and then break every reader that turns it into a ``datetime``."""

MAX_EPOCH_MILLIS = 253_370_764_800_000
"""``at`` must be before 9999-01-01 UTC, for the same reason."""


def to_seconds(value: Duration, *, name: str, allow_zero: bool = True) -> float:
    """Validate ``value`` and return it in seconds.

    Raises:
        InvalidDurationError: negative, NaN/infinite, over :data:`MAX_SECONDS`, zero when not
            allowed, or not a number.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidDurationError(
            f"{name} must be seconds (int/float) or a timedelta, got {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidDurationError(
            f"{name} must be a finite, non-negative duration, got {_shown(value)}"
        )
    if seconds > MAX_SECONDS:
        raise InvalidDurationError(f"{name} must be at most 100 years, got {_shown(value)}")
    if seconds == 0 and not allow_zero:
        raise InvalidDurationError(f"{name} must be greater than zero")
    return seconds


def _shown(value: Duration) -> str:
    """``value`` for an error message: a timedelta in seconds, since its repr shows a negative
    one as ``timedelta(days=-1, seconds=86395)`` for -5 s."""
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g} s"
    return repr(value)


def to_millis(value: Duration, *, name: str, allow_zero: bool = True) -> int:
    """Validate ``value`` and return whole milliseconds (rounded up, so a delay is never shortened)."""
    millis = math.ceil(to_seconds(value, name=name, allow_zero=allow_zero) * 1000)
    if millis == 0 and not allow_zero:
        millis = 1
    return millis


def to_epoch_millis(at: datetime, *, name: str = "at") -> int:
    """Return an aware datetime as Unix milliseconds.

    Raises:
        InvalidDurationError: ``at`` is naive (its zone would be a guess), not a datetime, or
            not before the year 9999.
    """
    if not isinstance(at, datetime):
        raise InvalidDurationError(f"{name} must be a datetime, got {at!r}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise InvalidDurationError(f"{name} must be timezone-aware, got naive {at!r}")
    millis = math.ceil(at.timestamp() * 1000)
    if millis >= MAX_EPOCH_MILLIS:
        raise InvalidDurationError(f"{name} must be before 9999-01-01 UTC, got {at!r}")
    return millis
