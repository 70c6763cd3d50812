"""Redis's cost of a task's life cycle in batches, phase by phase, against a floor.

The cost scenario measures redis-server CPU per task while a worker drains (bulk sends,
then one worker process at concurrency 100), so the worker's own CPU on the shared cores
is in the figure too.  This script measures the three phases one after the other on one
private ``redis-server``, with nothing else running: N tasks sent in calls of 1,000, then
leased in calls of 100, then acked in calls of 100, each call awaited before the next.
For each phase: µs inside ``EVALSHA`` per task (``INFO commandstats``) and redis-server
user+sys CPU per task (``INFO cpu``, networking included).

Two implementations take turns, round by round:

* ``delayq``: ``send_many.lua``, ``reserve.lua`` and ``ack.lua`` through
  ``Queue.scripts``, as a worker calls them;
* ``floor``: three scripts that do only what a leased life cycle cannot skip, on the
  plainest layout (one HASH of bodies, one ZSET schedule, one ZSET of leases): send =
  ``HSET`` the bodies and ``ZADD`` the ids, two commands a batch; lease = read the due ids,
  remove them, ``ZADD`` their lease deadlines, ``HMGET`` their bodies; ack = ``ZREM`` the
  leases and ``HDEL`` the bodies.  No lease tokens, attempt counts, idempotency,
  dead letters, per-task headers or compact encoding.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.lifecycle_cost --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aioredis

from benchmarks.ceiling import TASK_BODY
from benchmarks.common import cpu_seconds, emit
from delayq import Queue
from delayq.redis.scripts import lua_source
from tests.redis_server import RedisServer

SEND_BATCH = 1000
LEASE_BATCH = 100
LEASE_MS = 60_000
PHASES = ("send", "lease", "ack")

FLOOR_SEND = """
local hset, zadd = {}, {}
for i = 1, #ARGV, 3 do
  hset[#hset + 1] = ARGV[i]
  hset[#hset + 1] = ARGV[i + 2]
  zadd[#zadd + 1] = ARGV[i + 1]
  zadd[#zadd + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(hset))
redis.call('ZADD', KEYS[2], unpack(zadd))
return #hset / 2
"""
FLOOR_LEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000
local ids = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
if #ids == 0 then
  return {}
end
redis.call('ZREM', KEYS[2], unpack(ids))
local leases = {}
for _, id in ipairs(ids) do
  leases[#leases + 1] = now + tonumber(ARGV[2])
  leases[#leases + 1] = id
end
redis.call('ZADD', KEYS[3], unpack(leases))
local bodies = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = bodies[i]
end
return out
"""
FLOOR_ACK = """
redis.call('ZREM', KEYS[3], unpack(ARGV))
return redis.call('HDEL', KEYS[1], unpack(ARGV))
"""

# The same, with each body in a small HASH picked by its id's hash, as delayq keeps them (the
# layout its memory figure needs): one command per task per phase instead of one per batch.
COMPACT_SEND = """
local zadd = {}
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  redis.call('HSET', KEYS[1] .. string.sub(redis.sha1hex(id), 1, 3), id, ARGV[i + 2])
  zadd[#zadd + 1] = ARGV[i + 1]
  zadd[#zadd + 1] = id
end
redis.call('ZADD', KEYS[2], unpack(zadd))
return #zadd / 2
"""
COMPACT_LEASE = FLOOR_LEASE.replace(
    "local bodies = redis.call('HMGET', KEYS[1], unpack(ids))",
    "local bodies = {}\n"
    "for i, id in ipairs(ids) do\n"
    "  bodies[i] = redis.call('HGET', KEYS[1] .. string.sub(redis.sha1hex(id), 1, 3), id)\n"
    "end",
)
COMPACT_ACK = """
redis.call('ZREM', KEYS[3], unpack(ARGV))
for _, id in ipairs(ARGV) do
  redis.call('HDEL', KEYS[1] .. string.sub(redis.sha1hex(id), 1, 3), id)
end
return #ARGV
"""
IMPLEMENTATIONS = ("delayq", "floor", "compact floor")

#: One phase: awaits its calls over ``n`` tasks (ids ``t<n>``) and returns the leases or
#: acks the next phase needs.
Phase = Callable[[Any], Awaitable[Any]]


def _ids(n: int) -> list[str]:
    return [f"{i:012d}" for i in range(n)]


def delayq_phases(queue: Queue, n: int) -> tuple[Phase, Phase, Phase]:
    keys = queue.keys("cost")

    async def send(_: Any) -> None:
        bodies = [{"payload": "x" * 20, "due": 0}] * n
        await queue.send_many("cost", bodies, task_ids=_ids(n), batch_size=SEND_BATCH)

    async def lease(_: Any) -> list[list[tuple[str, str]]]:
        batches = []
        while True:
            _, _, items = await queue.scripts.reserve(
                keys, limit=LEASE_BATCH, reclaim=LEASE_BATCH, ttr_ms=LEASE_MS, max_attempts=5
            )
            if not items:
                return batches
            batches.append([(task_id, raw.split(b",")[1].decode()) for task_id, raw in items])

    async def ack(batches: list[list[tuple[str, str]]]) -> None:
        for batch in batches:
            await queue.scripts.ack(keys, batch)

    return send, lease, ack


def floor_phases(client: aioredis.Redis, shas: dict[str, str], n: int) -> tuple[Phase, ...]:
    """The phases of a floor; ``shas`` holds its three scripts (the compact floor's KEYS[1]
    is a prefix: its scripts add the bucket)."""
    keys = ("floor:{t}:bodies", "floor:{t}:schedule", "floor:{t}:leases")

    async def send(_: Any) -> None:
        ids = _ids(n)
        # Due now: the lease phase finds every task due, as the delayq phases do.
        for start in range(0, n, SEND_BATCH):
            fields: list[Any] = []
            for task_id in ids[start : start + SEND_BATCH]:
                fields += (task_id, 0, TASK_BODY)
            await client.evalsha(shas["send"], 3, *keys, *fields)

    async def lease(_: Any) -> list[list[str]]:
        batches = []
        while True:
            got = await client.evalsha(shas["lease"], 3, *keys, LEASE_BATCH, LEASE_MS)
            if not got:
                return batches
            batches.append([got[i] for i in range(0, len(got), 2)])

    async def ack(batches: list[list[str]]) -> None:
        for batch in batches:
            await client.evalsha(shas["ack"], 3, *keys, *batch)

    return send, lease, ack


def counters(admin: redis.Redis) -> tuple[float, float]:
    """(µs inside EVALSHA so far, redis-server user+sys CPU seconds so far)."""
    stats = admin.info("commandstats").get("cmdstat_evalsha", {"usec": 0})
    return float(stats["usec"]), cpu_seconds(admin.info("cpu"))


async def run_phases(admin: redis.Redis, phases: tuple[Phase, ...], n: int) -> dict[str, Any]:
    """Run the phases in order; per phase µs inside EVALSHA and CPU µs, per task."""
    measured: dict[str, Any] = {}
    handed: Any = None
    for name, phase in zip(PHASES, phases, strict=True):
        inside_before, cpu_before = counters(admin)
        handed = await phase(handed)
        inside_after, cpu_after = counters(admin)
        measured[f"{name}_inside_usec"] = (inside_after - inside_before) / n
        measured[f"{name}_cpu_usec"] = (cpu_after - cpu_before) * 1e6 / n
    measured["total_inside_usec"] = sum(measured[f"{p}_inside_usec"] for p in PHASES)
    measured["total_cpu_usec"] = sum(measured[f"{p}_cpu_usec"] for p in PHASES)
    return measured


async def measure(rounds: int, n: int) -> dict[str, Any]:
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    queue = Queue.from_url(server.url)
    client = aioredis.Redis.from_url(server.url, single_connection_client=True)
    try:
        floors = {
            "floor": (FLOOR_SEND, FLOOR_LEASE, FLOOR_ACK),
            "compact floor": (COMPACT_SEND, COMPACT_LEASE, COMPACT_ACK),
        }
        shas = {
            name: {
                phase: await client.script_load(source)
                for phase, source in zip(("send", "lease", "ack"), sources, strict=True)
            }
            for name, sources in floors.items()
        }
        for name in ("send_many", "reserve", "ack"):  # loaded before the timed phases
            await client.script_load(lua_source(name))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in IMPLEMENTATIONS}
        for round_no in range(rounds):
            shift = round_no % len(IMPLEMENTATIONS)  # each goes first in turn
            for name in IMPLEMENTATIONS[shift:] + IMPLEMENTATIONS[:shift]:
                admin.flushall()
                phases = (
                    delayq_phases(queue, n)
                    if name == "delayq"
                    else floor_phases(client, shas[name], n)
                )
                runs[name].append(await run_phases(admin, phases, n))
        summary = {
            name: {
                metric: {
                    "min": min(run[metric] for run in measured),
                    "median": statistics.median(run[metric] for run in measured),
                }
                for metric in measured[0]
            }
            for name, measured in runs.items()
        }
        return {"rounds": rounds, "tasks": n, "summary": summary, "runs": runs}
    finally:
        await client.aclose()
        await queue.close()
        admin.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=20_000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.rounds, args.tasks))
    print(f"us per task over {args.rounds} rounds of {args.tasks} tasks (median, min):")
    header = "".join(f"{p:>18}" for p in (*PHASES, "total"))
    print(f"  {'':<26}{header}")
    for name, metrics in result["summary"].items():
        for kind in ("inside", "cpu"):
            cells = "".join(
                f"{metrics[f'{p}_{kind}_usec']['median']:>10.1f} ({metrics[f'{p}_{kind}_usec']['min']:4.1f})"
                for p in (*PHASES, "total")
            )
            print(f"  {name + ' ' + kind:<26}{cells}")
    emit(result)


if __name__ == "__main__":
    main()
