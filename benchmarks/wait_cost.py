"""What a microsecond inside Redis costs a client that awaits each call.

The ceiling scenario compares a one-by-one send with a bare ``EVALSHA return 1``, and
:mod:`benchmarks.send_parts` prices ``send.lua`` inside Redis.  This script links the two:
how much round-trip time each microsecond that Redis spends in a script adds for an
asyncio client that awaits every call, as a producer does.

Three loops on the script lane ``Queue.from_url`` opens (:mod:`delayq.redis.lane`, the
connection a send uses), taking turns round by round on one private ``redis-server``:

* ``EVALSHA`` of ``return 1``;
* ``EVALSHA`` of a script that only runs an empty Lua loop, sized at the start to take
  about as long inside Redis as ``send.lua`` does: Redis busy for as long, and nothing
  else different (no keys, no writes, no reply to speak of);
* ``EVALSHA`` of ``send.lua`` (fresh ids into a fresh topic each round, 1 h delays,
  20-byte bodies, as the enqueue scenario).

For each: wall µs per call, and µs inside ``EVALSHA`` from ``INFO commandstats`` (read on
a second connection).  ``wall per inside µs`` is, per round, the extra wall time over
``return 1`` divided by the extra time inside Redis; 1.0 would mean the round trip only
adds what Redis spends.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.wait_cost --rounds 8
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from benchmarks.ceiling import TASK_BODY
from benchmarks.common import emit
from delayq.redis.connection import open_clients
from delayq.redis.keys import TopicKeys
from delayq.redis.scripts import lua_source, send_keys
from tests.redis_server import RedisServer

HOUR_MS = 3_600_000
SPIN_SCRIPT = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1"
#: Loop iterations of the spin script timed to size it.
PROBE_ITERATIONS = 1000


def inside_usec(admin: redis.Redis) -> float:
    """Mean µs inside ``EVALSHA`` since the last ``CONFIG RESETSTAT``."""
    return float(admin.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


async def measure(rounds: int, calls: int) -> dict[str, Any]:
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    pooled, lane = open_clients(server.url)
    assert lane is not None
    numbers = itertools.count()
    send_source = lua_source("send")
    try:
        trivial = await pooled.script_load("return 1")
        spin = await pooled.script_load(SPIN_SCRIPT)
        send = await pooled.script_load(send_source)

        def send_call(topic: str) -> Callable[[], Awaitable[Any]]:
            keys = TopicKeys.build("wait", topic)
            waiting = send_keys(keys)
            return lambda: lane.evalsha(
                send, send_source, waiting,
                (f"{next(numbers):012d}", "d", HOUR_MS, 0, 0, TASK_BODY, 5000, keys.wake, "keep"),
            )  # fmt: skip

        async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
            admin.config_resetstat()
            started = time.perf_counter()
            for _ in range(calls):
                await call()
            return (time.perf_counter() - started) / calls * 1e6, inside_usec(admin)

        # Size the spin: send.lua's time inside Redis over the spin's per iteration.
        _, send_inside = await timed(send_call("sizing"))
        _, probe_inside = await timed(
            lambda: lane.evalsha(spin, SPIN_SCRIPT, (), (PROBE_ITERATIONS,))
        )
        iterations = round(PROBE_ITERATIONS * send_inside / probe_inside)

        loops: dict[str, Callable[[int], Callable[[], Awaitable[Any]]]] = {
            "return 1": lambda _: lambda: lane.evalsha(trivial, "return 1", (), ()),
            "spin": lambda _: lambda: lane.evalsha(spin, SPIN_SCRIPT, (), (iterations,)),
            "send.lua": lambda round_no: send_call(f"r{round_no}"),
        }
        wall: dict[str, list[float]] = {name: [] for name in loops}
        inside: dict[str, list[float]] = {name: [] for name in loops}
        for round_no in range(rounds):
            for name, make in loops.items():
                seconds, usec = await timed(make(round_no))
                wall[name].append(seconds)
                inside[name].append(usec)
        per_inside = {
            name: [
                (wall[name][r] - wall["return 1"][r]) / (inside[name][r] - inside["return 1"][r])
                for r in range(rounds)
            ]
            for name in ("spin", "send.lua")
        }
        return {
            "rounds": rounds,
            "calls": calls,
            "spin_iterations": iterations,
            "wall_usec_median": {name: statistics.median(v) for name, v in wall.items()},
            "wall_usec_min": {name: min(v) for name, v in wall.items()},
            "inside_usec_median": {name: statistics.median(v) for name, v in inside.items()},
            "wall_per_inside_usec_median": {
                name: statistics.median(v) for name, v in per_inside.items()
            },
            "wall_usec": wall,
            "inside_usec": inside,
        }
    finally:
        await lane.aclose()
        await pooled.aclose()
        admin.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=4000, help="calls per loop and round")
    args = parser.parse_args()
    result = asyncio.run(measure(args.rounds, args.calls))
    print(f"us per awaited call over {args.rounds} rounds of {args.calls} calls:")
    print(f"  {'':<12}{'wall med':>10}{'wall min':>10}{'inside med':>12}{'wall per inside us':>20}")
    for name, wall in result["wall_usec_median"].items():
        ratio = result["wall_per_inside_usec_median"].get(name)
        print(
            f"  {name:<12}{wall:10.1f}{result['wall_usec_min'][name]:10.1f}"
            f"{result['inside_usec_median'][name]:12.1f}"
            + (f"{ratio:20.2f}" if ratio is not None else "")
        )
    emit(result)


if __name__ == "__main__":
    main()
