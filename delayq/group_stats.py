"""Seeing a grouped topic's groups: how many tasks each holds ready, delayed and running,
and whether its cap or rate limit holds it back now (``Queue.groups``).

One read-only script per shard (``groups.lua``) visits the groups the topic indexes (those
that may lease now, those at their cap, those waiting for a due time or a rate window, and
those only running) and counts each with a few O(log n) reads, so a call costs
O(groups · log n) in Redis, however many tasks the groups hold.  A shard visits at most
:data:`MAX_GROUPS_VISITED` groups a call, so that no call blocks Redis for long.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from delayq.bounds import bounded_int

if TYPE_CHECKING:
    from delayq.redis.scripts import Scripts
    from delayq.shards import ShardMap

MAX_GROUPS = 1000
"""Most groups one :func:`groups` call returns."""
MAX_GROUPS_VISITED = 2_000
"""Most groups one shard's script visits a call (ready to lease first, then at their cap,
then waiting, soonest first, then only running); the groups past it are not counted."""

_log = logging.getLogger("delayq")


class GroupStats(BaseModel):
    """One group of a grouped topic, as :meth:`delayq.Queue.groups` counts it."""

    model_config = ConfigDict(frozen=True)

    group: str
    ready: int
    """Tasks due and waiting to be leased (held back or not by the group's limits)."""
    delayed: int
    """Tasks not due yet."""
    running: int
    """The group's tasks leased now."""
    limited: bool
    """True when the group is at its ``max_running_per_group`` cap or has used up its
    ``rate_limit_per_group`` window now: its ready tasks wait for a lease to end or the
    window to move on."""


async def groups(
    scripts: Scripts, shard_map: ShardMap, topic: str, *, limit: int
) -> list[GroupStats]:
    """The ``limit`` groups of ``topic`` with the most ready tasks (see ``Queue.groups``).

    A group's tasks spread over a sharded topic's shards (a task's shard follows its id), so
    a shard's top groups are not the topic's: each shard first returns every group it
    visits with its ready count, the sums rank them, then each shard counts the top ones.
    """
    shards = await shard_map.every(topic)
    bounded_int(limit, "limit", 1, MAX_GROUPS)
    visit = MAX_GROUPS_VISITED
    if len(shards) == 1:
        complete, rows = await scripts.groups(shards[0], limit=limit, visit=visit)
    else:
        ranks = await asyncio.gather(*(scripts.group_readiness(k, visit=visit) for k in shards))
        complete = all(done for done, _ in ranks)
        totals: dict[str, int] = {}
        for _, counted in ranks:
            for name, count in counted.items():
                totals[name] = totals.get(name, 0) + count
        top = sorted(totals, key=lambda name: (-totals[name], name))[:limit]
        parts = await asyncio.gather(
            *(scripts.groups(k, limit=limit, visit=visit, names=top) for k in shards)
        ) if top else []  # fmt: skip
        merged = {name: (0, 0, 0, False) for name in top}
        for _, part in parts:
            for name, ready, delayed, running, limited in part:
                r, d, n, lim = merged[name]
                merged[name] = (r + ready, d + delayed, n + running, lim or limited)
        rows = [(name, *counts) for name, counts in merged.items()]
    if not complete:
        _log.warning(
            "topic %r has more than %d groups on a shard: Queue.groups counted the first %d "
            "visited (ready to lease first, then at their cap, then waiting, then running)",
            shards[0].topic, visit, visit,
        )  # fmt: skip
    rows.sort(key=lambda row: (-row[1], row[0]))
    return [
        GroupStats(group=name, ready=ready, delayed=delayed, running=running, limited=limited)
        for name, ready, delayed, running, limited in rows
    ]
