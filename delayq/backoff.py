"""Retry delays: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from delayq.duration import Duration, to_seconds
from delayq.errors import InvalidDurationError


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``initial * factor ** (attempt - 1)``, capped at ``max``, then
    spread by ``±jitter`` (a fraction) so that tasks failing together do not retry together.

    Args:
        initial: delay after the first failed attempt, in seconds or a timedelta.
        factor: growth per further attempt (>= 1).
        max: upper bound of the delay before jitter.
        jitter: fraction in [0, 1]; 0.1 spreads each delay over ±10 %.
    """

    initial: Duration = 1.0
    factor: float = 2.0
    max: Duration = 300.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        to_seconds(self.initial, name="Backoff.initial")
        to_seconds(self.max, name="Backoff.max")
        if not isinstance(self.factor, (int, float)) or not self.factor >= 1:
            raise InvalidDurationError(f"Backoff.factor must be >= 1, got {self.factor!r}")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise InvalidDurationError(f"Backoff.jitter must be within [0, 1], got {self.jitter!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        initial = to_seconds(self.initial, name="Backoff.initial")
        cap = to_seconds(self.max, name="Backoff.max")
        # Cap the exponent first so a large attempt count cannot overflow the float.
        base = min(cap, initial * self.factor ** min(max(attempt - 1, 0), 64))
        spread = base * self.jitter
        return max(0.0, base + random.uniform(-spread, spread))
