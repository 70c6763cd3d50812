"""Shared runtime for the per-library benchmark runners.

Every peer module (``benchmarks/peers/<lib>.py``) subclasses :class:`Peer` with
the few lines of glue that differ between libraries and ends with
``run_cli(MyPeer())``.  Everything else lives here: the CLI roles, timing, the
completion counter, lateness recording and JSON output.

This module must import on every benchmark virtualenv, so it uses the standard
library plus redis-py only (``redis.asyncio`` exists in redis-py >= 4.2).

Bookkeeping goes to a *separate* "meta" Redis server so that the library under
test has its Redis to itself: ``INFO commandstats``, ``used_memory`` and the
server's CPU time then measure the library alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import inspect
import json
import math
import os
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import redis.asyncio as aioredis

#: The task body: every task carries this 20-byte string plus its due time.
PAYLOAD = "x" * 20
#: Name used for the queue / task function in every library.
TASK_NAME = "noop"
#: Second task name every worker serves: the backlog of the lateness-under-load scenario.
TASK_NAME_BACKLOG = "backlog"
#: Every task name a worker registers (same handler for all).
TASK_NAMES = (TASK_NAME, TASK_NAME_BACKLOG)
#: Tasks per call when a role uses a library's bulk API.
BULK_BATCH = 1000
#: In-flight enqueues when a role fills a queue without a bulk API.
FILL_CONCURRENCY = 64
#: How often a worker process pushes its recorded completions to the meta Redis.
FLUSH_INTERVAL_S = 0.005
#: How long a worker may take to shut down gracefully once the target is reached.
STOP_GRACE_S = 10.0
#: Printed in front of the result line so stray output on stdout cannot be mistaken for it.
RESULT_MARKER = "@@bench-result "

# Keys on the meta Redis.
KEY_COUNT = "bench:count"  # INCRBY of completed untracked tasks
KEY_LATENESS = "bench:lateness"  # RPUSH of (start - due) ms per tracked task
KEY_LAST_AT = "bench:last_at"  # ZSET, one member: latest completion time (ZADD GT = max)
KEY_DONE_AT = "bench:done_at"  # wall-clock seconds of the last completion once the target is met
KEY_READY = "bench:ready"  # INCR once per worker/sidecar process that is up
KEY_GO = "bench:go"  # set by the harness once every process is up: start serving


# --------------------------------------------------------------------------- time & stats


def now_ms_floor() -> int:
    """Current wall-clock time in whole milliseconds, rounded down."""
    return math.floor(time.time() * 1000)


@contextlib.contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """Measure the wall time of a ``with`` block: ``with stopwatch() as t: ...; t["seconds"]``."""
    box = {"started_at": time.time(), "seconds": 0.0}
    start = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = time.perf_counter() - start


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``, linearly interpolated; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rate(count: int, seconds: float) -> float:
    """``count / seconds``, or NaN when nothing was timed."""
    return count / seconds if seconds > 0 else math.nan


def cpu_seconds(info_cpu: dict[str, Any]) -> float:
    """redis-server's user + sys CPU time so far, from an ``INFO cpu`` reply."""
    return float(info_cpu["used_cpu_user"]) + float(info_cpu["used_cpu_sys"])


def process_cpu_seconds() -> float:
    """This process's user + sys CPU time so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def emit(result: dict[str, Any], pretty: bool = False) -> None:
    """Print one result object on stdout, on its own marked line (what the harness parses)."""
    text = json.dumps(result, indent=2 if pretty else None, sort_keys=True)
    sys.stdout.write(f"{RESULT_MARKER}{text}\n" if not pretty else text + "\n")
    sys.stdout.flush()


def parse_result(stdout: str) -> dict[str, Any]:
    """Find the last result line written by :func:`emit` in a runner's stdout."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_MARKER) :])
            return parsed
    raise ValueError("no result line in runner output")


# --------------------------------------------------------------------------- tasks


@dataclass
class Task:
    """One task to enqueue.

    ``delay_ms == 0`` means "ready now" (the library's plain enqueue); anything
    else goes through the library's delayed-work API.  Call :meth:`stamp`
    immediately before handing the task to the library: it fixes ``due_ms``
    from the clock *before* the library reads it, and rounds down, so the
    recorded due time is never later than the library's own and a firing can
    only look early if it really was.
    """

    delay_ms: int = 0
    track: bool = False  # whether the handler records lateness for this task
    name: str = TASK_NAME  # task function / topic: TASK_NAME or TASK_NAME_BACKLOG
    due_ms: int = 0

    def stamp(self) -> Task:
        """Fix the due time from the current clock; returns self for chaining."""
        self.due_ms = now_ms_floor() + self.delay_ms
        return self

    @property
    def delayed(self) -> bool:
        """True if the task must go through the delayed-work API."""
        return self.delay_ms > 0

    @property
    def due_body(self) -> int:
        """The ``due`` argument the handler receives (0 = don't record lateness)."""
        return self.due_ms if self.track else 0

    @property
    def args(self) -> tuple[str, int]:
        """Positional arguments of the task function: ``(payload, due)``."""
        return (PAYLOAD, self.due_body)

    @property
    def kwargs(self) -> dict[str, Any]:
        """Keyword form of :attr:`args`."""
        return {"payload": PAYLOAD, "due": self.due_body}

    @property
    def due_s(self) -> float:
        """Absolute due time in epoch seconds (for APIs that take a timestamp)."""
        return self.due_ms / 1000

    @property
    def due_datetime(self) -> datetime:
        """Absolute due time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.due_s, tz=UTC)


# --------------------------------------------------------------------------- recording


@dataclass
class Recorder:
    """Counts completions in memory and flushes them to the meta Redis; one per worker process.

    The handler of every library calls :func:`record`, which only appends to
    in-process lists (no I/O), so bookkeeping costs every library the same few
    microseconds instead of a meta-Redis round trip per task.  A background
    task (:meth:`flush_forever`) pushes the deltas every :data:`FLUSH_INTERVAL_S`
    in one pipeline: ``INCRBY`` :data:`KEY_COUNT` for plain tasks, ``RPUSH``
    :data:`KEY_LATENESS` for tracked ones, and ``ZADD GT`` of the latest
    completion time into :data:`KEY_LAST_AT` (a max across processes).  The flush
    that sees the cross-process total (plain + tracked) reach ``target`` copies
    that max into :data:`KEY_DONE_AT` (``SET NX``): the measured end is the last
    completion, not the flush.
    """

    meta_url: str
    target: int
    processed: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    _count: int = 0  # plain completions not yet flushed
    _lateness: list[float] = field(default_factory=list)  # tracked, not yet flushed
    _last_at: float = 0.0  # wall-clock time of this process's latest completion
    first_at: float = 0.0  # wall-clock time of this process's first completion (0: none yet)
    _client: aioredis.Redis | None = None

    @property
    def client(self) -> aioredis.Redis:
        """The meta connection, created lazily in whichever event loop runs the flusher."""
        if self._client is None:
            self._client = aioredis.Redis.from_url(self.meta_url)
        return self._client

    def record(self, due_ms: float) -> None:
        """Record one completed task; ``due_ms > 0`` also records its lateness."""
        now = time.time()
        if due_ms:
            self._lateness.append(now * 1000 - due_ms)
        else:
            self._count += 1
        self._last_at = now
        if not self.processed:
            self.first_at = now
        self.processed += 1

    async def flush(self) -> None:
        """Push what was recorded since the last flush (nothing if nothing was)."""
        if not self._count and not self._lateness:
            return
        count, samples, last_at = self._count, self._lateness, self._last_at
        self._count, self._lateness = 0, []
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(KEY_LAST_AT, {"last": last_at}, gt=True)
        pipe.incrby(KEY_COUNT, count)
        if samples:
            pipe.rpush(KEY_LATENESS, *samples)
        else:
            pipe.llen(KEY_LATENESS)
        pipe.zscore(KEY_LAST_AT, "last")
        _, plain, tracked, latest = await pipe.execute()
        if plain + tracked >= self.target and not self.done.is_set():
            await self.client.set(KEY_DONE_AT, repr(latest), nx=True)
            self.done.set()

    async def flush_until(self, stop: asyncio.Event) -> None:
        """Flush every :data:`FLUSH_INTERVAL_S` until ``stop`` is set, then flush the remainder.

        Stopped by an event, not cancelled, so that no flush is cut off halfway.
        """
        try:
            while not stop.is_set():
                await asyncio.sleep(FLUSH_INTERVAL_S)
                await self.flush()
            await self.flush()  # what completed since (re-runs after the target included)
        finally:
            if self._client is not None:
                await self._client.aclose()


_recorder: Recorder | None = None


async def record(due: float) -> None:
    """What every benchmark task handler calls (it is a no-op outside a worker role).

    In-memory only: see :class:`Recorder`.  A coroutine so handlers keep ``await record(due)``.
    """
    if _recorder is not None:
        _recorder.record(due)


async def wait_done(meta_url: str, local: asyncio.Event, poll_s: float = 0.02) -> None:
    """Return once any process reached the target (local event or the meta key)."""
    client = aioredis.Redis.from_url(meta_url)
    try:
        while not local.is_set():
            if await client.exists(KEY_DONE_AT):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(local.wait(), poll_s)
    finally:
        await client.aclose()


async def ready_set_go(meta_url: str, poll_s: float = 0.005) -> None:
    """Tell the harness this process is up (imports done), then wait for its "go".

    The barrier lets all worker processes of a measurement start together, so
    the measured time excludes interpreter start-up and imports.
    """
    client = aioredis.Redis.from_url(meta_url)
    try:
        await client.incr(KEY_READY)
        while not await client.exists(KEY_GO):
            await asyncio.sleep(poll_s)
    finally:
        await client.aclose()


async def run_until(work: Coroutine[Any, Any, Any], stop: asyncio.Event) -> None:
    """Run ``work`` until ``stop`` is set, then cancel it.

    If ``work`` ends first (a crash, usually) its exception propagates.
    """
    job = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if job.done():
            job.result()
            return
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
    finally:
        stopper.cancel()


# --------------------------------------------------------------------------- adapter interface


class Peer:
    """What a benchmark adapter for one library provides.

    Subclasses set the class attributes and implement the coroutines; each
    method is small glue around the library's *recommended* API.  Producer
    methods (:meth:`enqueue`, :meth:`enqueue_bulk`) run between
    :meth:`open` and :meth:`close` in a single process; :meth:`serve` and
    :meth:`serve_sidecar` run in their own processes.  Task handlers must call
    ``await benchmarks.common.record(due)`` with the ``due`` argument of
    :attr:`Task.args`.
    """

    #: Library name as used on the command line and in results.
    name: ClassVar[str]
    #: Distributions whose versions are reported (first one is "the" version).
    distributions: ClassVar[tuple[str, ...]]
    #: One line: the delayed-work call used (shown in the report).
    delayed_api: ClassVar[str]
    #: One line: the bulk call used, or None when the library has no bulk enqueue.
    bulk_api: ClassVar[str | None] = None
    #: Extra long-running processes needed for delayed tasks to fire (e.g. a scheduler).
    sidecars: ClassVar[tuple[str, ...]] = ()
    #: The scenarios this adapter takes part in; None: all of them.
    scenarios: ClassVar[tuple[str, ...] | None] = None
    #: True for a yardstick that is not a library (measured beside them, never ranked
    #: among them, not drawn in the chart).
    reference: ClassVar[bool] = False

    def settings(self) -> dict[str, Any]:
        """Poll intervals and other defaults in effect (read from the library where possible)."""
        return {}

    async def open(self, redis_url: str) -> None:
        """Create the producer-side client(s)."""

    async def close(self) -> None:
        """Release what :meth:`open` created."""

    async def enqueue(self, task: Task) -> None:
        """Enqueue one task: delayed API if ``task.delayed``, else plain enqueue.

        Implementations call ``task.stamp()`` right before the library call.
        """
        raise NotImplementedError

    async def enqueue_bulk(self, tasks: Sequence[Task]) -> None:
        """Enqueue many tasks with the library's bulk API (only if :attr:`bulk_api`).

        Implementations call ``task.stamp()`` on each task while building the batch.
        """
        raise NotImplementedError

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        """Run one worker at ``concurrency`` until ``stop`` is set, then shut it down."""
        raise NotImplementedError

    async def serve_sidecar(self, name: str, redis_url: str, stop: asyncio.Event) -> None:
        """Run the sidecar ``name`` (one of :attr:`sidecars`) until ``stop`` is set."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Static facts about this adapter, for the report."""
        versions = {d: importlib.metadata.version(d) for d in self.distributions}
        return {
            "name": self.name,
            "version": versions[self.distributions[0]],
            "versions": versions,
            "redis_py": _version_or_none("redis"),
            "hiredis": _version_or_none("hiredis"),
            "python": sys.version.split()[0],
            "delayed_api": self.delayed_api,
            "bulk_api": self.bulk_api,
            "sidecars": list(self.sidecars),
            "scenarios": None if self.scenarios is None else list(self.scenarios),
            "reference": self.reference,
            "settings": self.settings(),
        }


def defaults_of(target: Callable[..., Any], *names: str) -> dict[str, Any]:
    """Default values of ``target``'s parameters ``names``, read from its signature.

    Adapters report settings this way, so the report shows what the installed
    version really uses.  (Worker concurrency is always set by the harness.)
    """
    params = inspect.signature(target).parameters
    return {name: _jsonable(params[name].default) for name in names}


def _jsonable(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _version_or_none(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------- roles


async def _producer(peer: Peer, url: str, body: Callable[[], Awaitable[Any]]) -> None:
    await peer.open(url)
    try:
        await body()
    finally:
        await peer.close()


async def role_enqueue(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """N tasks, each awaited before the next (the common "enqueue from a request handler")."""

    async def body() -> None:
        for _ in range(args.n):
            await peer.enqueue(Task(delay_ms=args.delay_ms))

    with stopwatch() as timer:
        await _producer(peer, args.redis_url, body)
    return {"n": args.n, "seconds": timer["seconds"], "rate": rate(args.n, timer["seconds"])}


async def role_enqueue_bulk(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """N tasks through the bulk API in batches of ``--batch``."""
    if peer.bulk_api is None:
        return {"n": 0, "unsupported": True}

    async def body() -> None:
        for start in range(0, args.n, args.batch):
            size = min(args.batch, args.n - start)
            await peer.enqueue_bulk([Task(delay_ms=args.delay_ms) for _ in range(size)])

    with stopwatch() as timer:
        await _producer(peer, args.redis_url, body)
    return {
        "n": args.n,
        "batch": args.batch,
        "seconds": timer["seconds"],
        "rate": rate(args.n, timer["seconds"]),
    }


async def _fill(peer: Peer, args: argparse.Namespace, delay_ms: int) -> dict[str, Any]:
    """Fill the queue as fast as the library allows (bulk API, else concurrent enqueues)."""

    async def bulk() -> None:
        for start in range(0, args.n, BULK_BATCH):
            size = min(BULK_BATCH, args.n - start)
            await peer.enqueue_bulk([Task(delay_ms, name=args.task) for _ in range(size)])

    async def concurrent() -> None:
        gate = asyncio.Semaphore(FILL_CONCURRENCY)

        async def one() -> None:
            async with gate:
                await peer.enqueue(Task(delay_ms, name=args.task))

        await asyncio.gather(*(one() for _ in range(args.n)))

    method = "bulk" if peer.bulk_api else "concurrent"
    with stopwatch() as timer:
        await _producer(peer, args.redis_url, bulk if peer.bulk_api else concurrent)
    return {"n": args.n, "seconds": timer["seconds"], "method": method}


async def role_fill_ready(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """N ready tasks (``--task``), for the drain and backlog scenarios."""
    return await _fill(peer, args, delay_ms=0)


async def role_fill_delayed(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """N tasks (``--task``) delayed by ``--delay-ms``, for the memory and scale scenarios."""
    return await _fill(peer, args, delay_ms=args.delay_ms)


async def role_schedule_lateness(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """N tracked tasks, each due a uniformly random 1 ms .. window after its enqueue."""
    rng = random.Random(args.seed)
    window_ms = round(args.window * 1000)

    async def body() -> None:
        for _ in range(args.n):
            await peer.enqueue(Task(delay_ms=rng.randint(1, window_ms), track=True))

    with stopwatch() as timer:
        await _producer(peer, args.redis_url, body)
    return {"n": args.n, "window_s": args.window, "enqueue_seconds": timer["seconds"]}


async def _serve_until_done(
    args: argparse.Namespace, serve: Callable[[asyncio.Event], Coroutine[Any, Any, None]]
) -> dict[str, Any]:
    """Shared life cycle of worker and sidecar processes."""
    global _recorder
    _recorder = recorder = Recorder(args.meta_url, args.n)
    stop = asyncio.Event()
    await ready_set_go(args.meta_url)
    started_at, cpu_at_start = time.time(), process_cpu_seconds()
    serving = asyncio.ensure_future(serve(stop))
    stop_flushing = asyncio.Event()
    flusher = asyncio.ensure_future(recorder.flush_until(stop_flushing))
    watcher = asyncio.ensure_future(wait_done(args.meta_url, recorder.done))
    await asyncio.wait({serving, flusher, watcher}, return_when=asyncio.FIRST_COMPLETED)
    if not watcher.done():  # the library (or the flusher) stopped on its own: surface the error
        watcher.cancel()
        flusher.cancel()
        (serving if serving.done() else flusher).result()
        raise RuntimeError("worker stopped before the target was reached")
    cpu = process_cpu_seconds() - cpu_at_start
    stop.set()
    forced = False
    try:
        await asyncio.wait_for(serving, STOP_GRACE_S)
    except TimeoutError:
        forced = True
    stop_flushing.set()
    await flusher
    return {
        "pid": os.getpid(),
        "started_at": started_at,
        "stopped_at": time.time(),
        "first_at": recorder.first_at,
        "processed": recorder.processed,
        "cpu_seconds": cpu,  # from the release until the target was reached
        "forced_stop": forced,
    }


async def role_worker(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """Run one worker until the completion counter reaches ``--n`` (across all workers)."""
    return await _serve_until_done(
        args, lambda stop: peer.serve(args.redis_url, args.concurrency, stop)
    )


async def role_sidecar(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """Run a helper process (e.g. taskiq's scheduler) until the workers are done."""
    return await _serve_until_done(
        args, lambda stop: peer.serve_sidecar(args.name, args.redis_url, stop)
    )


async def role_describe(peer: Peer, args: argparse.Namespace) -> dict[str, Any]:
    """Versions, APIs and settings of this adapter."""
    return peer.describe()


ROLES: dict[str, Callable[[Peer, argparse.Namespace], Awaitable[dict[str, Any]]]] = {
    "describe": role_describe,
    "enqueue": role_enqueue,
    "enqueue-bulk": role_enqueue_bulk,
    "fill-ready": role_fill_ready,
    "fill-delayed": role_fill_delayed,
    "schedule-lateness": role_schedule_lateness,
    "worker": role_worker,
    "sidecar": role_sidecar,
}


def build_parser(prog: str) -> argparse.ArgumentParser:
    """The CLI every peer module exposes: ``python -m benchmarks.peers.<lib> ROLE [options]``."""
    parser = argparse.ArgumentParser(prog=prog, description="delayq benchmark runner")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--meta-url", default=None, help="bookkeeping Redis (default: --redis-url)")
    parser.add_argument(
        "--n", type=int, default=1000, help="tasks (workers: completions to wait for)"
    )
    parser.add_argument("--delay-ms", type=int, default=3_600_000, help="delay of enqueued tasks")
    parser.add_argument("--batch", type=int, default=BULK_BATCH, help="tasks per bulk call")
    parser.add_argument("--concurrency", type=int, default=100, help="worker concurrency")
    parser.add_argument(
        "--window", type=float, default=10.0, help="lateness: spread of due times (s)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--task", default=TASK_NAME, choices=TASK_NAMES, help="fill roles: task name"
    )
    parser.add_argument("--name", default="", help="sidecar name")
    parser.add_argument("--out", choices=("json", "pretty"), default="json")
    return parser


def run_cli(peer: Peer, argv: Sequence[str] | None = None) -> None:
    """Entry point of a peer module: parse the role, run it, print the JSON result."""
    args = build_parser(f"python -m benchmarks.peers.{peer.name}").parse_args(argv)
    args.meta_url = args.meta_url or args.redis_url
    started = time.time()
    result = asyncio.run(ROLES[args.role](peer, args))
    result.update(role=args.role, lib=peer.name, wall_seconds=time.time() - started)
    emit(result, pretty=args.out == "pretty")
    # Some libraries leave non-daemon threads or pools behind; the result is out, so
    # leave without waiting for them.
    os._exit(0)
