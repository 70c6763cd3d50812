"""The no-library consumer: delayq's shape of work with no library, the drain's yardstick.

The drain scenario's 2-process target asks one Redis and two worker processes to share
this host's cores, and how far a second process can add depends on the shape of the work
(how long Redis and the worker's Python each spend on a batch) as much as on any library.
This consumer does that shape and nothing else.  Each worker process loops: an ack call
and a lease call to a Lua script that spins :data:`LUA_ITERATIONS` iterations inside Redis
(half each), pipelined in one write as delayq's worker sends them, the lease returning 100
strings of an envelope's size; then :data:`PYTHON_UNITS` units of Python work on the batch
(JSON decoding and object building, which touch fresh memory as handlers do); then it
records the batch's 100 completions like every peer's handler.

The amounts are fixed, not timed, so that a slow hour slows this consumer and delayq
alike.  They make delayq's worker's shape: ``host_scaling`` (at aa9bda3) first found it at
900 µs inside Redis and 1,900 µs of Python per batch of 100 (2026-11-25 10:06 UTC: one
bare process then drained as fast as one delayq worker, 30,675 against 32,410/s, with the
same split of cores); the amounts here were set on 2026-11-25 ~15:55 UTC so that in the
drain scenario one process of each spends about the same CPU per task (3 rounds: delayq
22-26 µs in its process and 13-14 µs in Redis, this consumer 19-23 and 13).  The drain
scenario reports the CPU per task of both in every run, so a drift of delayq's shape away
from this one shows.  Only the drain scenario runs it.  A process stops at the first batch
boundary after the target, so its completions beyond the target (``drain_extra_runs``) are
not re-runs.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from benchmarks.common import Peer, Task, record, run_cli

BATCH = 100
LUA_ITERATIONS = 216_000
"""Redis's work per batch of :data:`BATCH` (~1.1 ms here), split between the ack and the lease."""
PYTHON_UNITS = 470
"""The worker's Python work per batch (~1.4 ms here): :func:`handle` calls."""
ITEM = "x" * 60  # about a leased task's envelope
ACKS = ["x" * 12] * (2 * BATCH)  # an ack call's arguments: ids and tokens
BODY = b'{"order": 12345, "payload": "xxxxxxxxxxxxxxxxxxxx", "tags": ["a", "b"]}'

# Spins ARGV[1] iterations of Lua, then returns ARGV[2] copies of ARGV[3].
SPIN = """
local x = 0
for i = 1, tonumber(ARGV[1]) do
  x = x + i
end
local out = {}
for i = 1, tonumber(ARGV[2]) do
  out[i] = ARGV[3]
end
return out
"""


def handle(raw: bytes, index: int) -> dict[str, Any]:
    """One unit of handler-like Python: decode a JSON body and build a few objects from it."""
    body = json.loads(raw)
    return {"id": f"t{index}", "order": body["order"], "tags": list(body["tags"]), "n": index}


def work_python(units: int) -> None:
    """``units`` of :func:`handle`, kept until the batch is done (as a worker holds a
    batch's deliveries)."""
    kept = [handle(BODY, i) for i in range(units)]
    kept.clear()


class BarePeer(Peer):
    name = "bare"
    distributions = ("redis",)
    delayed_api = "none: a reference consumer of delayq's shape of work, no library"
    bulk_api = "none: the batches are synthetic (fill-ready stores nothing)"
    scenarios = ("drain",)
    reference = True

    def settings(self) -> dict[str, Any]:
        return {"batch": BATCH, "lua_iterations": LUA_ITERATIONS, "python_units": PYTHON_UNITS}

    async def enqueue(self, task: Task) -> None:
        """Nothing to store: the worker makes up its batches."""

    async def enqueue_bulk(self, tasks: Any) -> None:
        """Nothing to store: the worker makes up its batches."""

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            sha = await client.script_load(SPIN)
            while not stop.is_set():
                pipe = client.pipeline(transaction=False)
                pipe.evalsha(sha, 0, LUA_ITERATIONS // 2, 1, "1", *ACKS)
                pipe.evalsha(sha, 0, LUA_ITERATIONS // 2, BATCH, ITEM)
                await pipe.execute()
                work_python(PYTHON_UNITS)
                for _ in range(BATCH):
                    await record(0)
        finally:
            await client.aclose()


if __name__ == "__main__":
    run_cli(BarePeer())
