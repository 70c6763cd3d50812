"""The one pace for loops that retry Redis after a failure: a pause that doubles from
``first`` up to ``cap`` while failures repeat, and starts over after a success.  And what
those loops say about it: one :class:`Outage` per process, shared by its loops.

Doubling keeps a loop from hammering a Redis that is down, the cap bounds how long a
recovered Redis waits for the loop to notice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable


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


OUTAGE_REMINDER = 60.0
"""Seconds between the lines an :class:`Outage` logs while Redis stays unreachable."""


class Outage:
    """Whether Redis is reachable, as every loop of one process sees it, told in few lines.

    Each loop reports the end of each Redis call: :meth:`failed` when Redis could not be
    reached, :meth:`reachable` when a call got an answer.  The first failure logs one
    WARNING; while the outage lasts, at most one more line per :data:`OUTAGE_REMINDER`
    seconds (the other failures at DEBUG); the first answer after it one INFO line with how
    long Redis was unreachable.  Shared by a worker's loops, so N topics do not make N
    lines a second.

    Args:
        log: the logger to tell.
        remind_every: seconds between lines during an outage (default
            :data:`OUTAGE_REMINDER`, read when a failure is reported).
        clock: a monotonic clock in seconds.
    """

    def __init__(
        self,
        log: logging.Logger,
        *,
        remind_every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._remind_every = remind_every
        self._clock = clock
        self._since: float | None = None  # when the outage began (None: Redis is reachable)
        self._told = 0.0  # when the last line about it was logged
        self._failures = 0  # failed calls since it began

    @property
    def down(self) -> bool:
        """Whether the last report was a failure."""
        return self._since is not None

    def failed(self, what: str, exc: BaseException) -> None:
        """``what`` (a call to Redis, e.g. ``"reserve on 'mail'"``) could not reach Redis."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = self._told = now
            self._log.warning(
                "Redis is unreachable: %s failed (%s); retrying until it is back", what, exc
            )
            return
        every = OUTAGE_REMINDER if self._remind_every is None else self._remind_every
        if now - self._told >= every:
            self._told = now
            self._log.warning(
                "Redis still unreachable after %.0fs (%d failed calls; the last: %s: %s)",
                now - self._since, self._failures, what, exc,
            )  # fmt: skip
        else:
            self._log.debug("%s failed during the Redis outage: %s", what, exc)

    def reachable(self) -> None:
        """A call got Redis's answer: ends the outage, if there was one."""
        if self._since is None:
            return
        lasted, self._since, self._failures = self._clock() - self._since, None, 0
        self._log.info("Redis is reachable again, after %.1fs unreachable", lasted)
