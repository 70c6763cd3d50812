"""Keeping a periodic topic's next tick scheduled, from every worker that consumes it.

A periodic topic's ticks are ordinary tasks, each stored by tick.lua, which refuses any
tick not later than the last one ever scheduled.  Every worker runs one :class:`Keeper`
per periodic topic: it sleeps until the chain's last scheduled tick is due (a delta of
Redis's clock), then schedules the one after it.  All keepers wake at about the same
moment and try the same tick; one call stores it, the others are refused.  So a tick is
scheduled a whole period before it is due and fires like any task, a keeper that dies
(its worker killed) costs nothing while another runs, and no tick is ever scheduled
twice, not even after it ran and was acked.

At start a keeper *claims* the chain: one left by a schedule with another fingerprint
(the code changed) is replaced, its waiting tick deleted.  After that it only *advances*
it, and stands aside if a worker with yet another schedule claimed it since, until no live
worker runs that schedule any more (:mod:`delayq.worker.takeover`): then it claims the
chain back, with a WARNING naming both schedules.

Ticks are *missed* when no worker was there when they fell due (none ran, or Redis was
down).  That includes the tick stored a period ahead: a keeper's first look at a due tick
(tick_look.lua) comes when it falls due if any worker of the schedule runs, so a first
look more than :data:`ON_TIME_MS` late marks it missed.  ``catch_up`` decides what runs
then (:func:`delayq.ticks.after_last`): ``"latest"`` the most recent missed tick,
``"all"`` every one (at most :data:`MAX_CATCH_UP`), ``"none"`` none; a missed tick left
out is dropped from the schedule in the same script that stores the next one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from delayq.cancellation import first_of, raise_if_cancelling
from delayq.errors import DelayqError, RedisUnavailableError
from delayq.pacing import RetryPacing
from delayq.ticks import MAX_CATCH_UP, after_last, tick_id

if TYPE_CHECKING:
    import asyncio

    from delayq.pacing import Outage
    from delayq.redis.keys import TopicKeys
    from delayq.redis.scripts import Scripts, TickMode
    from delayq.ticks import PeriodicOptions
    from delayq.worker.takeover import Takeover

log = logging.getLogger("delayq.worker")

RECHECK = 10.0
"""Longest sleep of a keeper: bounds how long a chain that lost its state (a Redis without
persistence restarted) or was claimed by another schedule goes unnoticed."""
TICK_BODY = b"null"
ON_TIME_MS = 5_000
"""How late a keeper's first look at a due tick may come and the tick still count as late
rather than missed: a live worker's keeper wakes when the tick falls due, give or take its
event loop's lag and a round trip to Redis."""


class Keeper:
    """Keeps one periodic topic's next tick scheduled (see the module docstring).

    Args:
        scripts: runs tick.lua and tick_state.lua.
        keys: the topic's keys.
        periodic: its schedule and catch-up mode.
        wake: set on a wake-up of the topic (a tick was stored, or someone moved time).
        stopping: set when the worker stops.
        outage: the worker's, told whether each look at the chain reached Redis.
        takeover: judges when a chain another schedule claimed is abandoned (None: never).
    """

    def __init__(
        self,
        scripts: Scripts,
        keys: TopicKeys,
        periodic: PeriodicOptions,
        wake: asyncio.Event,
        stopping: asyncio.Event,
        outage: Outage,
        takeover: Takeover | None = None,
    ) -> None:
        self._scripts = scripts
        self._outage = outage
        self._keys = keys
        self._periodic = periodic
        self._wake = wake
        self._stopping = stopping
        self._mode: TickMode = "claim"
        self._warned_superseded = False
        self._takeover = takeover

    async def run(self) -> None:
        """Schedule ticks until the worker stops."""
        pacing = RetryPacing()
        while not self._stopping.is_set():
            raise_if_cancelling()
            self._wake.clear()
            try:
                pause = await self.step()
            except DelayqError as exc:
                pause = pacing.failed()
                if isinstance(exc, RedisUnavailableError):
                    self._outage.failed(f"periodic {self._keys.topic!r}'s next tick", exc)
                else:
                    log.warning(
                        "periodic %r: scheduling its next tick failed (%s); retrying in %.2fs",
                        self._keys.topic, exc, pause,
                    )  # fmt: skip
            else:
                pacing.succeeded()
                self._outage.reachable()
            if pause > 0:
                await self._sleep(pause)

    async def first_look(self) -> None:
        """Step once before the worker leases anything, so that a stored tick that was missed
        is dropped (when ``catch_up`` skips it) before this worker could lease it.  A failure
        is only logged: :meth:`run` retries."""
        try:
            await self.step()
        except DelayqError as exc:
            log.warning("periodic %r: its first look failed (%s)", self._keys.topic, exc)

    async def step(self) -> float:
        """Look at the chain once and schedule a tick if one is due; returns how long to
        sleep before looking again (0: at once)."""
        schedule = self._periodic.schedule
        looked = await self._scripts.tick_look(self._keys, schedule.fingerprint, ON_TIME_MS)
        now, owner, last, missed = looked
        mine = owner == schedule.fingerprint
        if mine and last > now:
            return min((last - now) / 1000, RECHECK)  # the next tick is already scheduled
        if owner is not None and not mine and self._mode == "advance":
            if not await self._take_over(owner):
                return self._superseded()
            mine = 0 <= last <= now  # missed ticks of the abandoned chain follow catch_up
        tick, drop = self.choose(last if mine and last >= 0 else None, now, missed)
        dropped = last
        status, now, last = await self._scripts.tick(
            self._keys, mode=self._mode, fingerprint=schedule.fingerprint, tick_ms=tick,
            task_id=tick_id(tick), body=TICK_BODY, drop_missed=drop,
        )  # fmt: skip
        if status == 1 and drop:
            log.info("periodic %r: tick %s was missed (no worker ran when it fell due); "
                     "catch_up=%r skips it", self._keys.topic, tick_id(dropped),
                     self._periodic.catch_up)  # fmt: skip
        if status == 1:
            if self._mode == "claim":
                log.info("periodic %r: %s, next tick %s", self._keys.topic,
                         schedule.description, tick_id(tick))  # fmt: skip
            self._mode = "advance"
            return 0 if tick <= now else min((tick - now) / 1000, RECHECK)
        if status == -1:
            return self._superseded()
        return 0  # another keeper scheduled it first: read the chain again

    def choose(self, last: int | None, now: int, missed: bool = False) -> tuple[int, bool]:
        """The tick to schedule after the chain's ``last`` (None: a new chain), at ``now``,
        and whether to drop ``last`` first (it was ``missed``; see the module docstring)."""
        schedule = self._periodic.schedule
        if last is None:
            return schedule.next_after(now), False
        tick, drop = after_last(self._periodic, last, now, missed)
        if self._periodic.catch_up == "all" and tick > schedule.next_after(last):
            log.warning(
                "periodic %r: more than %d ticks were missed; catching up from %s",
                self._keys.topic, MAX_CATCH_UP, tick_id(tick),
            )  # fmt: skip
        return tick, drop

    async def _take_over(self, owner: str) -> bool:
        """Whether to claim the chain of schedule ``owner`` now (no live worker runs it)."""
        if self._takeover is None:
            return False
        abandoned = await self._takeover.abandoned(owner)
        if abandoned is None:
            return False
        log.warning(
            "periodic %r: no live worker runs its schedule %s any more; this worker takes its"
            " ticks over with its own schedule %s",
            self._keys.topic, abandoned, self._periodic.schedule.description,
        )  # fmt: skip
        self._mode = "claim"
        self._warned_superseded = False
        return True

    def _superseded(self) -> float:
        """Stand aside (warned once); returns how long before looking again."""
        if not self._warned_superseded:
            self._warned_superseded = True
            log.warning(
                "periodic %r: a worker with another schedule took over its ticks; this worker"
                " runs them but no longer schedules them",
                self._keys.topic,
            )
        return RECHECK if self._takeover is None else min(RECHECK, self._takeover.recheck)

    async def _sleep(self, seconds: float) -> None:
        await first_of(self._wake, self._stopping, within=seconds)
