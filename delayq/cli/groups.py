"""``delayq groups``: a grouped topic's groups with the most ready tasks."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from delayq.cli.app import queue_named

if TYPE_CHECKING:
    import argparse

    from delayq.queue import Queue


async def groups(queue: Queue, args: argparse.Namespace) -> int:
    """``delayq groups``: ``Queue.groups`` as a table or (``--json``) a list of objects."""
    found = await queue.groups(args.topic, limit=args.limit)
    if args.json:
        print(json.dumps([g.model_dump() for g in found], indent=2))
        return 0
    if not found:
        print(
            f"topic {args.topic!r} of {queue_named(queue, args)} has no groups "
            "(no grouped task waits or runs)",
            file=sys.stderr,
        )
        return 0
    print(f"{'group':30} {'ready':>9} {'delayed':>9} {'running':>9}  limited")
    for g in found:
        print(f"{g.group:30} {g.ready:>9} {g.delayed:>9} {g.running:>9}  "
              f"{'yes' if g.limited else 'no'}")  # fmt: skip
    return 0


def groups_options(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``delayq groups``."""
    parser.add_argument("topic")
    parser.add_argument(
        "--limit", type=int, default=20, help="most groups shown, most ready first (1..1000)"
    )
    parser.add_argument("--json", action="store_true", help="a JSON list of GroupStats")
