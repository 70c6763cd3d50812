"""Building blocks of the fault scenarios: worker subprocesses, a recording producer, waits.

Workers run as real ``python -m delayq worker`` processes (so SIGKILL and SIGSTOP are
real) with the app in tests/faults/apps/recorder.py; the producer runs in the test's
process and records what it sent for the checker.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from delayq import DelayqError, Queue
from tests.faults.apps.plan import WORK_TOPIC, real_now
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("DELAYQ_FULL_FAULTS") == "1"
"""Run the issue's full-size figures (slow); CI runs shrunken ones."""

_numbers = itertools.count(1)


def sized(ci: int, full: int) -> int:
    """``full`` under DELAYQ_FULL_FAULTS=1, else the CI size ``ci``."""
    return full if FULL else ci


@dataclass
class WorkerProc:
    """A ``delayq worker`` subprocess running the recorder app.

    Args:
        url: the Redis URL the worker uses (possibly through a proxy).
        queue_name: the queue to consume.
        log_dir: the delivery log directory shared with the checker.
        admin: a direct client to the real server, to see the worker subscribe.
        concurrency, ttr, steps, grace: worker and app settings.
        clock_shift: run with ``time.time`` shifted by this many seconds.
        env: extra environment variables.
        app: the app the worker runs (default: the recorder).
        ready_topic: the topic whose wake-up subscription means the worker is running.
        heartbeat: its registry heartbeat interval (default: the CLI's).
    """

    url: str
    queue_name: str
    log_dir: Path
    admin: redis.Redis
    concurrency: int = 10
    ttr: float = 5.0
    steps: list[list[Any]] = field(default_factory=list)
    grace: float = 1.0
    clock_shift: float | None = None
    topics: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    app: str = "tests.faults.apps.recorder:queue"
    ready_topic: str = WORK_TOPIC
    heartbeat: float | None = None
    proc: subprocess.Popen[bytes] | None = None
    stderr_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.stderr_path = self.log_dir.parent / f"worker-{next(_numbers)}.stderr"

    def command(self) -> list[str]:
        cmd = [sys.executable]
        if self.clock_shift is not None:
            cmd += ["-m", "tests.faults.apps.shifted", str(self.clock_shift), "delayq"]
        else:
            cmd += ["-m", "delayq"]
        cmd += ["worker", self.app,
                "--concurrency", str(self.concurrency), "--grace", str(self.grace)]  # fmt: skip
        if self.topics:
            cmd += ["--topics", self.topics]
        if self.heartbeat is not None:
            cmd += ["--heartbeat", str(self.heartbeat)]
        return cmd

    def start(self) -> WorkerProc:
        env = {
            **os.environ,
            "REDIS_URL": self.url,
            "DELAYQ_FAULT_QUEUE": self.queue_name,
            "DELAYQ_FAULT_LOG": str(self.log_dir),
            "DELAYQ_FAULT_TTR": str(self.ttr),
            "DELAYQ_FAULT_STEPS": json.dumps(self.steps),
            "DELAYQ_LOG_LEVEL": "INFO",
            "PYTHONPATH": str(ROOT),
            **self.env,
        }
        with self.stderr_path.open("ab") as err:
            self.proc = subprocess.Popen(
                self.command(), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=err, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return self

    async def started(self, timeout: float = 15.0) -> WorkerProc:
        """Start, and wait until the worker listens for wake-ups (it is then fetching)."""
        channel = f"delayq:{{{self.queue_name}:{self.ready_topic}}}:wake"
        before = self._subscribers(channel)
        self.start()

        def ready() -> bool:
            if not self.alive:
                raise AssertionError(f"worker exited at start:\n{self.output()[-3000:]}")
            return self._subscribers(channel) > before

        await wait_for(ready, timeout, f"worker {self.pid} to subscribe")
        return self

    def _subscribers(self, channel: str) -> int:
        if self.env.get("DELAYQ_FAULT_CLUSTER"):  # sharded pub/sub; admin: the owning master
            reply = self.admin.execute_command("PUBSUB", "SHARDNUMSUB", channel)
            return int(reply[1]) if reply else 0
        counts = self.admin.pubsub_numsub(channel)
        return int(counts[0][1]) if counts else 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL (continuing a stopped process first is not needed for SIGKILL)."""
        if self.alive:
            self.signal(signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(timeout=10)

    async def terminate(self, timeout: float = 15.0) -> int:
        """Graceful stop (SIGTERM); returns the exit status."""
        if self.alive:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        await wait_for(lambda: not self.alive, timeout, f"worker {self.pid} to exit")
        assert self.proc is not None and self.proc.returncode is not None
        return self.proc.returncode

    def output(self) -> str:
        """The worker's log (stdout and stderr) so far."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        if self.alive:
            self.signal(signal.SIGCONT)
        self.kill()


class Producer:
    """Sends tasks and records, for the checker, what was sent and what returned.

    Args:
        queue: the producer's queue (possibly through a proxy).
        topic: the topic to send to.
    """

    def __init__(self, queue: Queue, topic: str = WORK_TOPIC) -> None:
        self.queue = queue
        self.topic = topic
        self.sent: list[str] = []
        self.returned: set[str] = set()
        self.not_before: dict[str, float] = {}
        self.errors: Counter[str] = Counter()
        self.attempts = 0

    async def send(
        self, task_id: str, delay: float = 0.0, body: dict[str, Any] | None = None
    ) -> bool:
        """One send; True if it returned.  An error is counted, not raised."""
        if task_id not in self.not_before:
            self.sent.append(task_id)
            # The earliest moment the task may run, on the real clock of this host.
            self.not_before[task_id] = real_now() + delay
        self.attempts += 1
        try:
            await self.queue.send_delayed(
                self.topic, body if body is not None else {"id": task_id}, delay, task_id=task_id
            )
        except DelayqError as exc:
            self.errors[type(exc).__name__] += 1
            return False
        self.returned.add(task_id)
        return True

    async def send_until_returned(
        self,
        task_id: str,
        delay: float = 0.0,
        body: dict[str, Any] | None = None,
        *,
        give_up_after: float = 30.0,
        pause: float = 0.05,
    ) -> bool:
        """Retry with the same id until the send returns: safe, since sends are idempotent."""
        deadline = time.monotonic() + give_up_after
        while not await self.send(task_id, delay, body):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(pause)
        return True

    async def send_many(
        self,
        ids: Sequence[str],
        delays: Callable[[int], float] = lambda i: 0.0,
        *,
        concurrency: int = 20,
        retry: bool = True,
        body: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        """Send ``ids`` from ``concurrency`` coroutines, retrying each until it returns."""
        work = iter(enumerate(ids))

        async def lane() -> None:
            for i, task_id in work:
                payload = body(task_id) if body else None
                if retry:
                    await self.send_until_returned(task_id, delays(i), payload)
                else:
                    await self.send(task_id, delays(i), payload)

        await asyncio.gather(*(lane() for _ in range(concurrency)))


def task_ids(prefix: str, count: int) -> list[str]:
    """``count`` distinct, readable task ids."""
    return [f"{prefix}-{i:07d}" for i in range(count)]


_SNAPSHOT = """#!lua flags=no-writes
local prefix = KEYS[1]
local schedule, tasks = {}, {}
for _, n in ipairs(redis.call('ZRANGE', prefix .. 'wheel', 0, -1)) do
  for _, id in ipairs(redis.call('ZRANGE', prefix .. 'slot:' .. n, 0, -1)) do
    schedule[#schedule + 1] = id
  end
end
for _, bucket in ipairs(redis.call('KEYS', prefix .. 'tasks:*')) do
  for _, field in ipairs(redis.call('HKEYS', bucket)) do
    if string.sub(field, -1) ~= '\\0' then
      tasks[#tasks + 1] = field
    end
  end
end
return { schedule, redis.call('ZRANGE', prefix .. 'reserved', '-inf', '(inf', 'BYSCORE'),
         redis.call('ZRANGE', prefix .. 'dead', 0, -1), tasks }
"""


def consistency_problems(client: redis.Redis, queue_name: str, topics: Iterable[str]) -> list[str]:
    """Invariants of the stored state: each task in exactly one of schedule / reserved / dead
    (and in one schedule slot), and no index entry without its task.  Returns a description
    of each violation."""
    problems = []
    for topic in topics:
        # One atomic read-only script: a consistent snapshot, allowed even when Redis is full.
        replies = client.eval(_SNAPSHOT, 1, f"delayq:{{{queue_name}:{topic}}}:")
        if len(replies[0]) != len(set(replies[0])):
            problems.append(f"{topic}: a task is in two schedule slots")
        schedule, reserved, dead, tasks = (set(reply) for reply in replies)
        for task_id in tasks:
            homes = (task_id in schedule) + (task_id in reserved) + (task_id in dead)
            if homes != 1:
                problems.append(f"{topic}/{task_id!r} is in {homes} states")
        for name, members in (("schedule", schedule), ("reserved", reserved), ("dead", dead)):
            for task_id in members - tasks:
                problems.append(f"{topic}/{task_id!r} in {name} has no stored task")
    return problems


def expired_leases(client: redis.Redis, queue_name: str, topic: str, slack_ms: int = 0) -> int:
    """Leases whose deadline passed more than ``slack_ms`` ago (Redis's clock)."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    key = f"delayq:{{{queue_name}:{topic}}}:reserved"
    return int(client.zcount(key, "-inf", now_ms - slack_ms))


def leases(client: redis.Redis, reserved_key: str) -> int:
    """Leases in a ``reserved`` ZSET, not counting the member that pins its encoding
    (score +inf, see docs/keys.md)."""
    return int(client.zcount(reserved_key, "-inf", "(inf"))
