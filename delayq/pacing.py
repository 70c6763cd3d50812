"""The one pace for loops that retry Redis after a failure: a pause that doubles from
``first`` up to ``cap`` while failures repeat, and starts over after a success.

Doubling keeps a loop from hammering a Redis that is down, the cap bounds how long a
recovered Redis waits for the loop to notice.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RetryPacing:
    """How long a retrying loop pauses after each failure in a row.

    Args:
        first: the pause after the first failure, in seconds.
        cap: the longest pause.

    Attributes:
        failures: failures in a row so far (0 after a success).
    """

    first: float = 0.1
    cap: float = 1.0
    failures: int = field(default=0, init=False)

    def failed(self) -> float:
        """Count a failure; returns the pause before the next try (``first``, doubling to ``cap``)."""
        self.failures += 1
        return min(self.first * 2.0 ** min(self.failures - 1, 64), self.cap)

    def succeeded(self) -> None:
        """Count a success: the next failure pauses ``first`` again."""
        self.failures = 0
