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

    A group's tasks share one shard of a sharded topic (its shard follows the group), so
    the topic's top groups are among the shards' own: each shard returns its top
    ``limit``, and the merge keeps the first ``limit`` (a group found on two shards, which
    routing never does, would have its counts summed).
    """
    shards = await shard_map.every(topic)
    bounded_int(limit, "limit", 1, MAX_GROUPS)
    visit = MAX_GROUPS_VISITED
    replies = await asyncio.gather(
        *(scripts.groups(keys, limit=limit, visit=visit) for keys in shards)
    )
    merged: dict[str, tuple[int, int, int, bool]] = {}
    for _, part in replies:
        for name, ready, delayed, running, limited in part:
            r, d, n, lim = merged.get(name, (0, 0, 0, False))
            merged[name] = (r + ready, d + delayed, n + running, lim or limited)
    if not all(complete for complete, _ in replies):
        _log.warning(
            "topic %r has more than %d groups on a shard: Queue.groups counted the first %d "
            "visited (ready to lease first, then at their cap, then waiting, then running)",
            shards[0].topic, visit, visit,
        )  # fmt: skip
    rows = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))[:limit]
    return [
        GroupStats(group=name, ready=ready, delayed=delayed, running=running, limited=limited)
        for name, (ready, delayed, running, limited) in rows
    ]
