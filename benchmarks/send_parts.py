"""What each part of ``send.lua`` costs inside Redis, against the compact-layout floor.

The ceiling scenario shows how close a one-by-one send comes to a bare ``EVALSHA
return 1``, and how close the smallest store into delayq's compact layout
(:data:`benchmarks.ceiling.COMPACT_SEND_SCRIPT`) comes.  This script says where the
difference between that floor and ``send.lua`` goes: it runs ``send.lua`` as shipped,
and copies of it with one part taken out, on one private ``redis-server``, and reads
the time inside ``EVALSHA`` per call from ``INFO commandstats`` (not the round trip,
which is the same for all).  The variants take turns, round by round, so that the
host's drift hits them alike, and the minimum over rounds is reported beside the median
(a slowed-down host only ever adds time); each round sends fresh ids into a fresh topic (1 h
delays, 20-byte bodies, as the enqueue scenario).

A variant with a part taken out is not a correct send; it only prices the part.  Each
copy is made by replacing an exact line of ``send.lua``: when that line changes, this
script stops with the line it could not find.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.send_parts --rounds 10
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks.ceiling import COMPACT_SEND_SCRIPT, TASK_BODY
from benchmarks.common import emit
from delayq.redis.keys import TopicKeys
from delayq.redis.scripts import lua_source, send_keys
from tests.redis_server import RedisServer

HOUR_MS = 3_600_000
#: The part each variant takes out: (the exact text in send.lua, what replaces it).
PARTS: dict[str, tuple[str, str]] = {
    "bucket count read (GET)": (
        "local bad = load_buckets(prefix)",
        "bucket_count, level = BUCKETS_MIN, BUCKETS_MIN\nlocal bad = nil",
    ),
    "server clock (TIME)": ("local now = now_ms()", "local now = tonumber(ARGV[10])"),
    "idempotency read (HGET)": ("local header = read_header(prefix, id)", "local header = nil"),
    "split check (HLEN)": (
        "local split = not header and bucket_full(prefix, id, body)",
        "local split = false",
    ),
    # What the floor does instead: the last slot by bound, a new one when it is full.
    "schedule_add + wake check -> floor's slot insert": (
        "wake_if_earliest(schedule_add(prefix, wheel, { due, id }), channel, due)",
        "local n = redis.call('ZRANGE', wheel, due, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1)[1]\n"
        "if not n or redis.call('ZCARD', slot_key(prefix, n)) >= SLOT_MAX then\n"
        "  n = new_slot(prefix, wheel, due)\n"
        "end\n"
        "redis.call('ZADD', slot_key(prefix, n), due, id)",
    ),
}


def without(source: str, part: str) -> str:
    """``source`` with the text of ``part`` replaced (see :data:`PARTS`)."""
    old, new = PARTS[part]
    if source.count(old) != 1:
        raise SystemExit(f"send.lua changed: {old!r} is not there once; update PARTS")
    return source.replace(old, new)


def variants() -> dict[str, str]:
    """Script name -> Lua source: send.lua, one copy per part, the floor with and without
    the helpers send.lua inlines (defining them is a cost every call pays)."""
    send = lua_source("send")
    helpers = lua_source("_envelope") + lua_source("_layout")
    return {
        "send.lua": send,
        **{f"send.lua without {part}": without(send, part) for part in PARTS},
        "compact floor": COMPACT_SEND_SCRIPT,
        "compact floor + send.lua's helper definitions": helpers + COMPACT_SEND_SCRIPT,
    }


def caller(name: str, client: redis.Redis, sha: str, topic: str) -> Callable[[str], Any]:
    """A function sending one task id through the variant ``name`` on its own topic."""
    if name.startswith("compact"):
        prefix = f"parts:{{{topic}}}:"
        return lambda task_id: client.evalsha(
            sha, 2, prefix, prefix + "wheel", task_id, _now_ms() + HOUR_MS, TASK_BODY
        )
    keys = TopicKeys.build("parts", topic)
    waiting = send_keys(keys)
    return lambda task_id: client.evalsha(
        sha, len(waiting), *waiting, task_id, "d", HOUR_MS, 0, 0, TASK_BODY, 5000, keys.wake,
        "keep", _now_ms(),
    )  # fmt: skip


def _now_ms() -> int:
    return int(time.time() * 1000)


def measure(rounds: int, calls: int) -> dict[str, Any]:
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    numbers = itertools.count()
    try:
        scripts = variants()
        shas = {name: client.script_load(source) for name, source in scripts.items()}
        usec: dict[str, list[float]] = {name: [] for name in scripts}
        for round_no in range(rounds):
            for number, name in enumerate(scripts):
                send = caller(name, client, shas[name], f"t{round_no}.{number}")
                ids = [f"{next(numbers):012d}" for _ in range(calls)]
                client.config_resetstat()
                for task_id in ids:
                    send(task_id)
                usec[name].append(client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
        return {
            "rounds": rounds,
            "calls": calls,
            "usec_per_call_min": {name: min(v) for name, v in usec.items()},
            "usec_per_call_median": {name: statistics.median(v) for name, v in usec.items()},
            "usec_per_call": usec,
        }
    finally:
        client.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3000, help="sends per variant and round")
    args = parser.parse_args()
    result = measure(args.rounds, args.calls)
    lowest, medians = result["usec_per_call_min"], result["usec_per_call_median"]
    print(f"us inside EVALSHA per send over {args.rounds} rounds of {args.calls} calls:")
    print(f"  {'':<58}{'min':>7}{'saves':>7}{'median':>8}{'saves':>7}")
    for name in lowest:
        row = f"  {name:<58}{lowest[name]:7.1f}"
        if name.startswith("send.lua without"):
            row += f"{lowest['send.lua'] - lowest[name]:7.1f}"
        else:
            row += " " * 7
        row += f"{medians[name]:8.1f}"
        if name.startswith("send.lua without"):
            row += f"{medians['send.lua'] - medians[name]:7.1f}"
        print(row)
    emit(result)


if __name__ == "__main__":
    main()
