"""What the scripts report, as typed records (``delayq.redis.scripts`` builds them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one reserve.lua call did.

    Attributes:
        now_us: Redis's time in microseconds.
        next_ms: the earliest due time or lease deadline still pending, -1 if none.
        items: the leased tasks, (id, envelope with the new attempt count and token).
        skipped: (id, reason) of entries it could not lease: ``"missing"`` (the envelope
            is absent, the entry was dropped) or ``"corrupt"`` (unreadable, dead-lettered).
        reclaimed: (id, dead) of the expired leases it reclaimed: due again, or (``dead``)
            dead-lettered because the task had no attempts left.
    """

    now_us: int
    next_ms: int
    items: list[tuple[str, bytes]]
    skipped: list[tuple[str, str]]
    reclaimed: list[tuple[str, bool]]


@dataclass(frozen=True, slots=True)
class Found:
    """What get.lua found for an id.

    Attributes:
        state: ``"delayed"``, ``"ready"``, ``"reserved"`` or ``"dead"``.
        raw: the envelope.
        error: the last error, if any.
        now_ms: Redis's time.
        score_ms: the due time, lease deadline or time of death, matching the state.
        paused: whether the task's topic is paused.
    """

    state: str
    raw: bytes
    error: str | None
    now_ms: int
    score_ms: int
    paused: bool


@dataclass(frozen=True, slots=True)
class Counts:
    """What stats.lua counted for a topic, and the topic's controls as stored."""

    delayed: int
    ready: int
    reserved: int
    dead: int
    paused: bool
    rate_limit: str | None
    max_running: int | None
    now_ms: int = 0
    """Redis's time when counted (the topic's clock)."""
    oldest_ready_ms: int = -1
    """The due time of the earliest ready task, -1 when none is ready."""
