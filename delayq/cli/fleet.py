"""The commands about who is consuming: ``delayq workers`` and ``delayq periodic``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from delayq.cli.app import queue_named
from delayq.fleet import schedules_run
from delayq.redis.registry import schedule_field
from delayq.task import from_millis
from delayq.ticks import tick_id

if TYPE_CHECKING:
    import argparse
    from datetime import datetime

    from delayq.queue import Queue
    from delayq.ticks import PeriodicOptions


def _ago(then: datetime, now: datetime) -> str:
    return f"{max((now - then).total_seconds(), 0.0):.1f}s ago"


async def workers(queue: Queue, args: argparse.Namespace) -> int:
    """``delayq workers``: the live workers, as a table or (``--json``) a list of objects."""
    live = await queue.workers()
    if args.json:
        print(json.dumps([w.model_dump(mode="json") for w in live], indent=2))
        return 0
    if not live:
        print(f"{queue_named(queue, args)} has no live worker", file=sys.stderr)
        return 0
    now = max(w.last_seen for w in live)
    print(f"{'host':20} {'pid':>7} {'kind':6} {'running':>11} {'last seen':>10}  topics")
    for w in live:
        busy = f"{w.running}/{w.concurrency}"
        print(f"{w.host:20} {w.pid:>7} {w.kind:6} {busy:>11} {_ago(w.last_seen, now):>10}  "
              f"{','.join(w.topics)}")  # fmt: skip
    return 0


@dataclass(frozen=True, slots=True)
class _Chain:
    schedule: str
    catch_up: str
    chain_schedule: str | None
    next_tick: datetime | None
    live: bool


async def _chain(queue: Queue, name: str, options: PeriodicOptions, run: set[str]) -> _Chain:
    """Where ``name``'s chain stands, and whether a live worker runs its schedule (``run``:
    the schedules live workers run)."""
    now, owner, last = await queue.scripts.tick_state(queue.keys(name))
    field = schedule_field(name, owner or options.schedule.fingerprint)
    _, _, (seen,) = await queue.registry.consumers((), (field,))
    return _Chain(
        schedule=options.schedule.description, catch_up=options.catch_up,
        chain_schedule=(seen.description or "unknown") if owner else None,
        next_tick=from_millis(last) if owner and last > now else None,
        live=field in run,
    )  # fmt: skip


async def periodic(queue: Queue, args: argparse.Namespace) -> int:
    """``delayq periodic``: each periodic topic's schedule, its chain's next tick, and
    whether a live worker runs the chain's schedule."""
    run = await schedules_run(queue.registry)
    chains = {
        name: await _chain(queue, name, topic.options.periodic, run)
        for name, topic in queue.topics.items()
        if topic.options.periodic is not None
    }
    if args.json:
        listed = {
            name: {
                "schedule": c.schedule, "catch_up": c.catch_up,
                "chain_schedule": c.chain_schedule,
                "next_tick": c.next_tick.isoformat() if c.next_tick else None, "live": c.live,
            }
            for name, c in chains.items()
        }  # fmt: skip
        print(json.dumps(listed, indent=2))
        return 0
    print(f"{'topic':24} {'schedule':32} {'catch_up':8} {'next tick':26} live  chain's schedule")
    for name, c in chains.items():
        when = tick_id(round(c.next_tick.timestamp() * 1000)) if c.next_tick else "-"
        print(f"{name:24} {c.schedule:32} {c.catch_up:8} {when:26} "
              f"{'yes' if c.live else 'no':5} {c.chain_schedule or '-'}")  # fmt: skip
    return 0
