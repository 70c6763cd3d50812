"""A topic's fleet-wide limits as ``@queue.topic`` takes them: ``rate_limit`` and ``max_running``.

Validated here, at the edge; enforced in Redis by ``reserve.lua`` (docs/controls.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from delayq.bounds import bounded_int
from delayq.errors import InvalidInputError

MAX_RATE = 1_000_000_000
"""Most tasks a rate limit may allow per window."""
MAX_RUNNING = 1_000_000
"""Largest ``max_running``."""

_RATE = re.compile(r"(\d+)/([smh])")
_WINDOW_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` task starts (leases) in any window of ``window_ms``, across every
    worker of the queue.

    Attributes:
        count: starts allowed per window.
        window_ms: the window: 1,000 (``"/s"``), 60,000 (``"/m"``) or 3,600,000 (``"/h"``).
    """

    count: int
    window_ms: int

    @property
    def text(self) -> str:
        """The limit as written: ``"100/s"``."""
        unit = next(u for u, ms in _WINDOW_MS.items() if ms == self.window_ms)
        return f"{self.count}/{unit}"

    @classmethod
    def parse(cls, value: object) -> RateLimit:
        """A rate limit from ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N a positive integer).

        Raises:
            InvalidInputError: anything else.
        """
        found = _RATE.fullmatch(value) if isinstance(value, str) else None
        count = int(found.group(1)) if found else 0
        if not found or not 1 <= count <= MAX_RATE:
            raise InvalidInputError(
                f"rate_limit must be 'N/s', 'N/m' or 'N/h' with N in [1, {MAX_RATE}], got {value!r}"
            )
        return cls(count, _WINDOW_MS[found.group(2)])


def check_max_running(value: object) -> int:
    """Return ``value`` if it is a valid ``max_running``, else raise :class:`InvalidInputError`."""
    return bounded_int(value, "max_running", 1, MAX_RUNNING)
