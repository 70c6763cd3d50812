"""Scenario 6: what bare redis-py asyncio does, as a reference ceiling, and what Redis costs.

* sequential: ``await EVALSHA`` of a trivial script, one at a time — the best any
  library can do for "one awaited round trip per task".  Measured twice: on one
  dedicated connection (``single_connection_client=True``: no pool at all), and
  through a ``BlockingConnectionPool`` with the settings ``delayq.Queue.from_url``
  uses (``max_connections=100``, ``timeout=10``, one retry), which is what any
  concurrency-safe client pays per call to borrow and return a connection;
* the same on one connection without ``socket_timeout``: redis-py 8 sets 5 s by default
  and times each write with ``asyncio.wait_for``, which runs the write as a Task of its own
  on Python 3.11;
* the same on delayq's script lane (:mod:`delayq.redis.lane`: redis-py's client, calls of
  one event-loop turn pipelined), as opened by ``delayq.redis.clients.open_clients``: the
  floor of a one-by-one send on delayq's own path, beside redis-py's;
* delayq's own ``queue.send_delayed`` as the enqueue scenario calls it (1 h delay, the
  20-byte payload, the topic registered so the body is validated), in the same slices as
  the bare loops: the enqueue target's ratio without the host's drift between the
  enqueue scenario and this one; and the same with ``socket_timeout=None`` (what redis-py's
  per-write timer costs);
* sequential ``EVALSHA`` of ``return 1`` carrying ``send.lua``'s twelve keys and
  arguments, on one connection: what passing a task's arguments costs by itself (the
  asyncio client packs each argument in Python);
* sequential ``EVALSHA`` of delayq's own ``send.lua`` with arguments built beforehand,
  on one connection: a send without delayq's Python, i.e. how much of the gap to the
  trivial script is the script's work in Redis;
* pipelined: ``LPUSH`` of the 20-byte payload, and ``EVALSHA`` of the trivial
  script, in non-transactional pipelines of 1,000 — roughly what a bulk enqueue
  can approach.

The eight sequential loops run in turn, a fifth of each at a time (see
:data:`SEQUENTIAL_SLICES`), so that they can be compared with each other.
For each, the redis-server process's user+sys CPU (``INFO cpu``) per request is
reported too: the floor of Redis CPU per request on this machine, whatever the
script does.  A task life cycle needs at least one request to send it, so the
sequential figure bounds the Redis CPU per task of any one-request-per-send API.

Run by the harness with the dev interpreter: ``python -m benchmarks.ceiling``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from benchmarks.common import PAYLOAD, cpu_seconds, emit, rate, stopwatch
from delayq import Queue
from delayq.redis.clients import open_clients
from delayq.redis.keys import TopicKeys
from delayq.redis.scripts import lua_source, waiting_keys

if TYPE_CHECKING:
    from delayq.redis.lane import ScriptLane

PIPELINE_BATCH = 1000
TRIVIAL_SCRIPT = "return 1"
#: The sequential loops run in this many slices, in turn, so that the host's drift (this
#: 2-core machine's speed varies by tens of percent within minutes) hits each of them alike.
SEQUENTIAL_SLICES = 5
#: Task ids for the loops that store tasks: fresh across slices, so no send is a duplicate.
_task_numbers = itertools.count()
#: The body every stored task carries (the 20-byte payload, as in the scenarios).
TASK_BODY = json.dumps({"payload": PAYLOAD, "due": 0}).encode()


def fresh_task_ids(n: int) -> list[str]:
    """``n`` task ids not used before in this process, 12 characters like generated ones."""
    return [f"{next(_task_numbers):012d}" for _ in range(n)]


async def evalsha_sequential(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of ``return 1``."""
    for _ in range(n):
        await client.evalsha(sha, 0)


async def evalsha_lane_sequential(lane: ScriptLane, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of ``return 1`` on delayq's script lane."""
    for _ in range(n):
        await lane.evalsha(sha, TRIVIAL_SCRIPT, (), ())


async def delayq_send_sequential(queue: Queue, sha: str, n: int) -> None:
    """``n`` awaited ``send_delayed`` calls on a :func:`delayq_queue` (``sha`` unused)."""
    body = {"payload": PAYLOAD, "due": 0}
    for _ in range(n):
        await queue.send_delayed("noop", body, delay=3600)


def delayq_queue(url: str, **options: Any) -> Queue:
    """A queue opened as the benchmark's delayq adapter opens it (``options`` added), with
    a ``noop`` topic."""
    queue = Queue.from_url(url, name="ceiling", **options)

    @queue.topic("noop")
    async def noop(body: dict[str, Any]) -> None:
        """Never run: the tasks wait an hour."""

    return queue


async def evalsha_pipelined(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` EVALSHA calls of ``return 1`` in pipelines of :data:`PIPELINE_BATCH`."""
    for start in range(0, n, PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, n - start)):
            pipe.evalsha(sha, 0)
        await pipe.execute()


def send_lua_arguments(task_id: str) -> tuple[Any, ...]:
    """numkeys, KEYS and ARGV of a ``send.lua`` call that stores ``task_id`` (1 h delay)."""
    topic = TopicKeys.build("ceiling", "t")
    keys = waiting_keys(topic)
    return (len(keys), *keys, task_id, "d", 3_600_000, 0, 0, TASK_BODY, 5000, topic.wake)


async def evalsha_send_arguments(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of ``return 1`` with ``send.lua``'s arguments."""
    for task_id in fresh_task_ids(n):
        await client.evalsha(sha, *send_lua_arguments(task_id))


async def send_lua_sequential(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` awaited EVALSHA calls of delayq's ``send.lua``, arguments built beforehand.

    What a ``send_delayed`` costs without delayq's Python: the Redis side of its script
    and the redis-py client, nothing else.
    """
    for task_id in fresh_task_ids(n):
        await client.evalsha(sha, *send_lua_arguments(task_id))


async def lpush_pipelined(client: aioredis.Redis, sha: str, n: int) -> None:
    """``n`` LPUSHes sent in pipelines of :data:`PIPELINE_BATCH`."""
    for start in range(0, n, PIPELINE_BATCH):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(PIPELINE_BATCH, n - start)):
            pipe.lpush("ceiling:list", PAYLOAD)
        await pipe.execute()


def pooled_client(url: str) -> aioredis.Redis:
    """A client on the pool ``delayq.Queue.from_url`` builds (same redis-py class and settings)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        retry=Retry(NoBackoff(), 1),
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        max_connections=100,
        timeout=10.0,
    )
    return aioredis.Redis.from_pool(pool)


async def redis_cpu_seconds(client: aioredis.Redis) -> float:
    """redis-server's user + sys CPU time so far."""
    return cpu_seconds(await client.info("cpu"))


Workload = Callable[[Any, str, int], Awaitable[None]]
"""A loop: (its client, a redis-py client or delayq's script lane; a script sha; calls)."""


async def timed(
    client: Any, probe: aioredis.Redis, work: Workload, sha: str, n: int
) -> tuple[float, float]:
    """(seconds, redis-server CPU seconds) for ``work`` on ``client``.

    ``probe`` reads the CPU counters on a connection of its own (two requests, not counted).
    """
    cpu_before = await redis_cpu_seconds(probe)
    with stopwatch() as timer:
        await work(client, sha, n)
    return timer["seconds"], await redis_cpu_seconds(probe) - cpu_before


async def interleaved(
    probe: aioredis.Redis,
    loops: dict[str, tuple[Any, Workload, str]],
    n: int,
    slices: int,
) -> dict[str, float]:
    """``{name}_rate`` and ``{name}_cpu_usec`` (per request) for each loop, run ``n`` times in
    ``slices`` slices taken in turn."""
    spent = {name: [0.0, 0.0] for name in loops}
    for _ in range(slices):
        for name, (client, work, sha) in loops.items():
            seconds, cpu = await timed(client, probe, work, sha, n // slices)
            spent[name][0] += seconds
            spent[name][1] += cpu
    done = n // slices * slices
    metrics: dict[str, float] = {}
    for name, (seconds, cpu) in spent.items():
        metrics[f"{name}_rate"] = rate(done, seconds)
        metrics[f"{name}_cpu_usec"] = cpu * 1e6 / done
    return metrics


async def measure(url: str, n_seq: int, n_pipe: int) -> dict[str, Any]:
    single = aioredis.Redis.from_url(url, single_connection_client=True)
    # redis-py 8 sets socket_timeout=5 by default and times each write with
    # asyncio.wait_for, a Task per command on Python 3.11; delayq's connections arm that
    # timer only for a write that has to wait.  This client shows redis-py without it.
    untimed = aioredis.Redis.from_url(url, single_connection_client=True, socket_timeout=None)
    pooled = pooled_client(url)
    lane_pool, lane = open_clients(url)
    queue = delayq_queue(url)
    untimed_queue = delayq_queue(url, socket_timeout=None)
    probe = aioredis.Redis.from_url(url, single_connection_client=True)
    try:
        sha = await single.script_load(TRIVIAL_SCRIPT)
        send_sha = await single.script_load(lua_source("send"))
        await pooled.ping()  # connect outside the timed loop, as single does on script_load
        await untimed.ping()
        assert lane is not None
        await lane.evalsha(sha, TRIVIAL_SCRIPT, (), ())  # connect outside the timed loop
        await delayq_send_sequential(queue, sha, 1)
        await delayq_send_sequential(untimed_queue, sha, 1)
        sequential = {
            "evalsha_seq": (single, evalsha_sequential, sha),
            "evalsha_untimed_seq": (untimed, evalsha_sequential, sha),
            "evalsha_lane_seq": (lane, evalsha_lane_sequential, sha),
            "delayq_send_seq": (queue, delayq_send_sequential, sha),
            "delayq_send_untimed_seq": (untimed_queue, delayq_send_sequential, sha),
            "evalsha_args_seq": (single, evalsha_send_arguments, sha),
            "send_lua_seq": (single, send_lua_sequential, send_sha),
            "evalsha_pooled": (pooled, evalsha_sequential, sha),
        }
        pipelined = {
            "lpush_pipe": (single, lpush_pipelined, sha),
            "evalsha_pipe": (single, evalsha_pipelined, sha),
        }
        metrics = await interleaved(probe, sequential, n_seq, SEQUENTIAL_SLICES)
        metrics |= await interleaved(probe, pipelined, n_pipe, 1)  # one after the other
    finally:
        for client in (single, untimed, pooled, probe, lane_pool):
            await client.aclose()
        if lane is not None:
            await lane.aclose()
        await queue.close()
        await untimed_queue.close()
    return metrics | {
        "n_seq": n_seq,
        "n_pipe": n_pipe,
        "sequential_slices": SEQUENTIAL_SLICES,
        "pipeline_batch": PIPELINE_BATCH,
        "redis_py": redis.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ceiling")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--n-seq", type=int, default=50_000)
    parser.add_argument("--n-pipe", type=int, default=500_000)
    args = parser.parse_args()
    emit(asyncio.run(measure(args.redis_url, args.n_seq, args.n_pipe)))


if __name__ == "__main__":
    main()
