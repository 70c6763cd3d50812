"""Issue 22's performance targets on a private Redis Cluster: ``scripts/bench --scenarios cluster``.

One round (``python -m benchmarks.cluster``, run by the harness's ``cluster`` scenario)
starts a 3-master + 3-replica cluster (``tests/redis_cluster.py``) and a plain redis-server
with one replica, configured like a cluster master but without ``--cluster-enabled``, so
that both sides feed a replica.  Then, one worker (``Worker``, concurrency 100) in this
process and Redis's own CPU (INFO cpu ``used_cpu_user + used_cpu_sys``) read per node:

- **lifecycle**: ``--n`` tasks sent one by one (``send_delayed``, due in 0.2 s), then
  leased and acked by the worker; each node's CPU over the whole of it, over the tasks it
  stored, and "net": less the node's idle CPU per second (read at the start) times the
  run's length.  Run on the cluster's 12-shard topic (per master), on the plain node's
  single-shard topic (the reference: run before and after the cluster's, averaged) and, to
  take the two apart, on the plain node's 12-shard topic and the cluster's single-shard
  topic (its one master).  Keys per master (``DBSIZE``) are read once every task is
  stored; ``INFO commandstats`` per node gives the commands per task.  Then the same with
  bulk sends (``send_many``, 4x the tasks) on the plain node's single-shard and 12-shard
  topics and the cluster's 12-shard topic.
- **lateness**: with the worker idle, ``--lateness`` tasks due at random times over
  ``--window`` s are sent one by one from a second thread (each stamped with its due time
  just before its send, as the lateness scenario's producer does); start - due in ms.  On
  the cluster's 12-shard topic, the cluster's single-shard topic and the plain node's.
- **floor**: ``benchmarks/cluster_floor.py``: bare ``EVALSHA`` calls (``return 1``, and
  delayq's ``send.lua``) on the plain node, on one master and on the three masters in turn.

This host has 2 cores for 6 cluster nodes, the plain node, its replica and the worker: the
masters cannot run side by side, so the bench shows per node what each master costs for
its share of the work, not a wall-clock speed-up; and since the masters take turns on the
same cores, each one's caches go cold between its requests, which the floor measures.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import redis
import redis.asyncio

from benchmarks import cluster_floor
from benchmarks.common import cpu_seconds, emit, now_ms_floor, percentile
from delayq import Queue, Worker
from tests.redis_cluster import RedisCluster
from tests.redis_server import PRIMARY_ARGS, RedisServer, replica_of

SHARDS = 12
SHARDED = "hot"
SINGLE = "flat"
#: Lifecycle tasks are due this long after their send (all due when the worker starts).
SEND_DELAY_S = 0.2
#: Pause between the worker's start and the first lateness task (the worker is idle then).
SETTLE_S = 1.0
CONCURRENCY = 100
#: How long a worker may take to stop once every task ran (its grace is 1 s).
STOP_S = 30.0
BULK_TIMES = 4
#: Redis's default ``cluster-node-timeout``; the fault tests' 1000 ms (fast failovers) makes
#: every master ping its peers more often, which costs CPU that a production cluster's would not.
NODE_TIMEOUT_MS = 15_000


@dataclass
class Tally:
    """What the handler saw: distinct tasks run, runs beyond them, and lateness (ms) of the
    tasks carrying a due time."""

    target: int = 0
    seen: set[int] = field(default_factory=set)
    extra_runs: int = 0
    stuck_stops: list[list[str]] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def hit(self, body: dict[str, Any]) -> None:
        if body["n"] in self.seen:
            self.extra_runs += 1  # at least once: a second run is counted, not awaited
            return
        self.seen.add(body["n"])
        if body["due"]:
            self.samples.append(time.time() * 1000 - body["due"])
        if len(self.seen) >= self.target:
            self.done.set()


@dataclass
class Setup:
    """A Redis to measure on: its URL, whether it is a cluster, and its master nodes."""

    label: str
    url: str
    cluster: bool
    masters: list[RedisServer]
    lane: bool = True
    """False: a ``Queue`` on a client of its own, so redis-py's pool runs the scripts, as on
    a cluster (``from_url`` gives one Redis the script lane)."""
    idle: list[float] = field(default_factory=list)
    """Each master's CPU seconds per second while nobody sends (see :func:`idle_rates`)."""

    def queue(self, name: str, tally: Tally) -> Queue:
        """A queue on this Redis with the sharded and the single-shard topic registered."""
        if self.lane or self.cluster:
            queue = Queue.from_url(self.url, name=name, cluster=self.cluster)
        else:
            queue = Queue(redis.asyncio.Redis.from_url(self.url), name=name)

        async def handle(body: dict[str, Any]) -> None:
            tally.hit(body)

        queue.topic(SHARDED, shards=SHARDS)(handle)
        queue.topic(SINGLE)(handle)
        return queue

    async def close(self, queue: Queue) -> None:
        await queue.close()
        if not (self.lane or self.cluster):  # a client passed in is ours to close
            await queue.redis.aclose()

    def flush(self) -> None:
        for master in self.masters:
            with master.client() as client:
                client.flushall()
                client.config_resetstat()

    def cpu(self) -> list[float]:
        out = []
        for master in self.masters:
            with master.client() as client:
                out.append(cpu_seconds(client.info("cpu")))
        return out


def idle_rates(setups: list[Setup], seconds: float = cluster_floor.IDLE_S) -> None:
    """Every master's CPU per second with no client work, read side by side."""
    before = [setup.cpu() for setup in setups]
    time.sleep(seconds)
    for setup, cpu0 in zip(setups, before, strict=True):
        setup.idle = [(b - a) / seconds for a, b in zip(cpu0, setup.cpu(), strict=True)]


def _tasks_stored(client: redis.Redis) -> int:
    """Tasks delayed or ready on one node: the ``scheduled`` count of every topic's meta."""
    return sum(
        int(client.hget(key, "scheduled") or 0)
        for key in client.scan_iter(match="delayq:*:meta", count=1000)
    )


def _commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}


async def _serve(queue: Queue, tally: Tally, timeout: float) -> None:
    """Run a worker on ``queue`` until ``tally`` reaches its target, then stop it."""
    worker = Worker(queue, concurrency=CONCURRENCY, grace=1.0)
    job = asyncio.ensure_future(worker.run(handle_signals=False))
    try:
        await asyncio.wait_for(tally.done.wait(), timeout)
    except TimeoutError:
        missing = tally.target - len(tally.seen)
        raise TimeoutError(
            f"{missing} of {tally.target} tasks not run in {timeout:.0f} s"
        ) from None
    finally:
        worker.stop()
        done, _ = await asyncio.wait({job}, timeout=STOP_S)
        if not done:
            # Every task ran, but the worker did not stop: a finding about delayq, not a
            # failed measurement.  Where its tasks wait is kept for the report.
            tally.stuck_stops.append(_waiting_tasks(job))
            job.cancel()
            await asyncio.wait({job}, timeout=STOP_S)
        elif not job.cancelled() and job.exception() is not None:
            raise job.exception()  # type: ignore[misc]


def _waiting_tasks(job: asyncio.Future[Any]) -> list[str]:
    """Each pending task's chain of awaits (file:line function, outermost first), with how
    many tasks wait there."""
    where: dict[str, int] = {}
    for task in asyncio.all_tasks():
        if task is asyncio.current_task():
            continue
        chain: list[str] = []
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is None:
                break
            chain.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        key = " > ".join(chain)
        where[key] = where.get(key, 0) + 1
    return [f"{n}x {key}" for key, n in sorted(where.items(), key=lambda kv: -kv[1])]


async def lifecycle(setup: Setup, topic: str, n: int, bulk: bool = False) -> dict[str, Any]:
    """Send ``n`` tasks one by one (``bulk``: with ``send_many``), lease and ack them; per
    master: tasks, keys, CPU."""
    setup.flush()
    tally = Tally(target=n)
    queue = setup.queue(f"c{uuid.uuid4().hex[:8]}", tally)
    try:
        cpu0, started = setup.cpu(), time.monotonic()
        if bulk:  # one script call per shard and batch
            bodies = [{"due": 0, "n": i} for i in range(n)]
            await queue.send_many(topic, bodies, delay=SEND_DELAY_S)
        for i in range(0 if bulk else n):
            await queue.send_delayed(topic, {"due": 0, "n": i}, SEND_DELAY_S)
        sent = setup.cpu()
        tasks, keys = [], []
        for master in setup.masters:
            with master.client() as client:
                tasks.append(_tasks_stored(client))
                keys.append(int(client.dbsize()))
        await asyncio.sleep(SEND_DELAY_S)
        await _serve(queue, tally, timeout=60 + n / 100)
        spent = [after - before for before, after in zip(cpu0, setup.cpu(), strict=True)]
        seconds = time.monotonic() - started
    finally:
        await setup.close(queue)
    commands, inside = [], []
    for master, stored in zip(setup.masters, tasks, strict=True):
        with master.client() as client:
            calls = _commands(client)
            stats = client.info("commandstats")
        inside.append(sum(int(x["usec"]) for x in stats.values()) / stored if stored else None)
        commands.append({k: round(v / stored, 2) for k, v in calls.items()} if stored else {})
    # What each node burns per second anyway (cron, replication, the cluster bus), over the
    # run's length: here the masters take turns on 2 cores, so each idles through the others'
    # share of the run, which parallel masters would not.
    net = [s - idle * seconds for s, idle in zip(spent, setup.idle, strict=True)]
    return {
        "seconds": seconds,
        "extra_runs": tally.extra_runs,
        "stuck_stops": tally.stuck_stops,
        "tasks": tasks,
        "keys": keys,
        "cpu_ms": [s * 1000 for s in spent],
        "usec": [_per_task(s, t) for s, t in zip(spent, tasks, strict=True)],
        "net_usec": [_per_task(s, t) for s, t in zip(net, tasks, strict=True)],
        "commands_per_task": commands,
        "send_usec": [_per_task(b - a, t) for a, b, t in zip(cpu0, sent, tasks, strict=True)],
        "in_commands_usec": inside,
    }


def _per_task(cpu_s: float, tasks: int) -> float | None:
    return cpu_s * 1e6 / tasks if tasks else None


async def lateness(setup: Setup, topic: str, n: int, window_s: float, seed: int) -> Tally:
    """Start - due (ms) of ``n`` tasks due at random over ``window_s``, one idle worker."""
    setup.flush()
    tally = Tally(target=n)
    name = f"l{uuid.uuid4().hex[:8]}"
    queue = setup.queue(name, tally)

    async def produce() -> None:
        rng, window_ms = random.Random(seed), round(window_s * 1000)
        producer = setup.queue(name, Tally())
        try:
            for i in range(n):
                delay_ms = rng.randint(1, window_ms)
                due = now_ms_floor() + delay_ms
                await producer.send_delayed(topic, {"due": due, "n": i}, delay_ms / 1000)
        finally:
            await setup.close(producer)

    try:
        serving = asyncio.ensure_future(_serve(queue, tally, timeout=window_s + 60))
        await asyncio.sleep(SETTLE_S)
        # Its own thread and event loop, as the lateness scenario's producer is its own
        # process: the sends do not hold up the worker's loop.
        await asyncio.to_thread(asyncio.run, produce())
        await serving
    finally:
        await setup.close(queue)
    return tally


def _spread(values: list[float]) -> float:
    """The largest distance from the mean, as a fraction of the mean."""
    mean = statistics.fmean(values)
    return max(abs(v - mean) for v in values) / mean if mean else float("inf")


def _late(prefix: str, samples: list[float]) -> dict[str, float]:
    return {
        f"{prefix}_p50": percentile(samples, 50),
        f"{prefix}_p99": percentile(samples, 99),
        f"{prefix}_max": max(samples, default=float("nan")),
        f"{prefix}_early": sum(1 for v in samples if v < 0),
    }


async def measure(plain: Setup, cluster: Setup, args: argparse.Namespace) -> dict[str, Any]:
    """One round's figures (see the module docstring)."""
    idle_rates([plain, cluster], args.idle)
    # The reference before and after the cluster's run, averaged: this host's speed drifts
    # within seconds, and the ratio is what the target reads.
    before = await lifecycle(plain, SINGLE, args.n)
    spread = await lifecycle(cluster, SHARDED, args.n)
    after = await lifecycle(plain, SINGLE, args.n)
    one = {
        key: [statistics.fmean([before[key][0], after[key][0]])] for key in ("usec", "net_usec")
    } | {"commands_per_task": before["commands_per_task"], "seconds": before["seconds"]}
    pool = await lifecycle(replace(plain, lane=False), SINGLE, args.n)
    # The same with bulk sends (BULK_TIMES as many tasks: a call costs little per task, so
    # what a run costs once weighs more), where a 12-shard topic splits every batch 12 ways:
    # the plain node's 12-shard topic shows what that split costs without a cluster.
    bulk = [
        await lifecycle(setup, topic, args.n * BULK_TIMES, bulk=True)
        for setup, topic in ((plain, SINGLE), (cluster, SHARDED), (plain, SINGLE), (plain, SHARDED))
    ]
    bulk_ref = statistics.fmean([bulk[0]["net_usec"][0], bulk[2]["net_usec"][0]])
    plain_sharded = await lifecycle(plain, SHARDED, args.n)
    flat = await lifecycle(cluster, SINGLE, args.n)
    owner = max(range(len(flat["tasks"])), key=lambda i: flat["tasks"][i])
    out: dict[str, Any] = {
        "cl_idle_plain_ms_per_s": plain.idle[0] * 1000,
        "cl_idle_master_ms_per_s": statistics.fmean(cluster.idle) * 1000,
        "cl_single_usec": one["usec"][0],
        "cl_single_net_usec": one["net_usec"][0],
        "cl_pool_usec": pool["usec"][0],
        "cl_pool_net_usec": pool["net_usec"][0],
        "cl_single_sharded_usec": plain_sharded["usec"][0],
        "cl_single_sharded_net_usec": plain_sharded["net_usec"][0],
        "cl_flat_usec": flat["usec"][owner],
        "cl_flat_net_usec": flat["net_usec"][owner],
        "cl_lifecycle_seconds": spread["seconds"],
        "cl_single_seconds": one["seconds"],
        "cl_master_tasks": spread["tasks"],
        "cl_master_keys": spread["keys"],
        "cl_master_cpu_ms": spread["cpu_ms"],
        "cl_master_usec": spread["usec"],
        "cl_master_net_usec": spread["net_usec"],
        "cl_usec_ratio": _worst(spread["usec"], one["usec"][0]),
        "cl_net_ratio": _worst(spread["net_usec"], one["net_usec"][0]),
        "cl_extra_runs": sum(
            r["extra_runs"] for r in (before, spread, after, pool, plain_sharded, flat, *bulk)
        ),
        "cl_bulk_single_net_usec": bulk_ref,
        "cl_bulk_master_net_usec": bulk[1]["net_usec"],
        "cl_bulk_net_ratio": _worst(bulk[1]["net_usec"], bulk_ref),
        "cl_bulk_single_sharded_net_usec": bulk[3]["net_usec"][0],
        "cl_bulk_sharded_net_ratio": _worst(bulk[1]["net_usec"], bulk[3]["net_usec"][0]),
        "cl_keys_spread": _spread(spread["keys"]),
        "cl_cpu_spread": _spread(spread["cpu_ms"]),
        "cl_stuck_where": [
            [f"{label}: {line}" for line in where]
            for label, r in (
                ("lifecycle", x) for x in (before, spread, after, pool, plain_sharded, flat, *bulk)
            )
            for where in r["stuck_stops"]
        ],
        "cl_commands": {
            "single": one["commands_per_task"][0],
            "single_sharded": plain_sharded["commands_per_task"][0],
            "cluster_masters": spread["commands_per_task"],
        },
    }
    seed = args.round + 1
    for prefix, setup, topic in (
        ("cl_late_sharded", cluster, SHARDED),
        ("cl_late_flat", cluster, SINGLE),
        ("cl_late_single", plain, SINGLE),
    ):
        tally = await lateness(setup, topic, args.lateness, args.window, seed)
        out |= _late(prefix, tally.samples)
        out["cl_extra_runs"] += tally.extra_runs
        out["cl_stuck_where"] += [[f"{prefix}: {line}" for line in w] for w in tally.stuck_stops]
    # Workers that ran every task and then did not stop within STOP_S (see _serve).
    out["cl_stuck_stops"] = len(out["cl_stuck_where"])
    out["cl_late_ratio"] = out["cl_late_sharded_p99"] / out["cl_late_flat_p99"]
    return out


def _worst(per_master: list[float | None], reference: float | None) -> float | None:
    """The costliest master's figure over the reference (None: a master stored nothing)."""
    if reference is None or any(u is None for u in per_master):
        return None
    return max(u for u in per_master if u is not None) / reference


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, measure one round, stop them."""
    with (
        RedisServer(extra_args=list(PRIMARY_ARGS)) as single,
        replica_of(single) as replica,
        RedisCluster(node_timeout_ms=NODE_TIMEOUT_MS) as cluster,
    ):
        replica.wait_replica_link(single)
        plain = Setup("plain", single.url, False, [single])
        nodes = Setup("cluster", cluster.url, True, cluster.masters())
        figures = asyncio.run(measure(plain, nodes, args))
        figures |= cluster_floor.measure(single, cluster, args.floor_n)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="lifecycle tasks per setup")
    parser.add_argument("--lateness", type=int, default=600, help="lateness tasks per setup")
    parser.add_argument("--window", type=float, default=5.0, help="lateness: spread (s)")
    parser.add_argument("--floor-n", type=int, default=20_000, help="floor: EVALSHA calls")
    parser.add_argument("--idle", type=float, default=cluster_floor.IDLE_S, help="idle read (s)")
    parser.add_argument("--round", type=int, default=0, help="round index (the lateness seed)")
    parser.add_argument("--redis-url", help="the harness's data server (unused)")
    parser.add_argument("--hang-s", type=float, default=800, help="dump stacks, exit after")
    parser.add_argument("--pretty", action="store_true", help="indented JSON, no marker")
    args = parser.parse_args()
    # A round that hangs (it should not: every wait has a limit) prints every thread's
    # stack and exits, so the harness reports it rather than waiting out its timeout.
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    emit(run(args), pretty=args.pretty)


if __name__ == "__main__":
    main()
