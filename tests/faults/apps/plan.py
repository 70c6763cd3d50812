"""Handlers that follow a plan carried in the task body and log every delivery.

A body looks like ``{"n": 7, "plan": {"1": [["block", 800]], "2": [["fail"]]}}``: on attempt
1 block the event loop for 800 ms, on attempt 2 fail; attempts without a plan run the
process's default steps (``$DELAYQ_FAULT_STEPS``, JSON; default: return at once).

Steps::

    ["sleep", ms]       await asyncio.sleep           ["block", ms]   time.sleep (blocks the loop)
    ["fail"]            raise RuntimeError            ["raise", name] raise a BaseException by name
    ["hang"]            await forever (TTR cancels)   ["hang_shielded"] swallow every cancellation
    ["extend", s]       task.extend(s)                ["exit", code]  os._exit(code)
    ["clock"]           log this process's time.time() offset from the real clock

Each delivery appends a ``start`` line to ``<log dir>/<pid>.log`` when the handler begins
and ``done`` or ``fail:<ExceptionType>`` when it ends (format in tests/faults/checker.py).
Times are read with ``CLOCK_REALTIME`` directly, so a process whose ``time.time`` is
shifted (apps/shifted.py) still logs the real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from delayq import Backoff, LeaseLostError, Queue, Task
from tests.faults.checker import Delivery, append

WORK_TOPIC = "work"
TYPED_TOPIC = "typed"
OTHER_TOPIC = "other"


class Order(BaseModel):
    """The body model of the ``typed`` topic (poison tests break it on purpose)."""

    order_id: int


class PlannedBaseException(BaseException):
    """A BaseException that is neither Exception nor one of the interpreter's own."""


_RAISABLE: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "CancelledError": asyncio.CancelledError,
    "GeneratorExit": GeneratorExit,
    "PlannedBaseException": PlannedBaseException,
}


def real_now() -> float:
    """The real wall clock, whatever was done to ``time.time`` in this process."""
    return time.clock_gettime(time.CLOCK_REALTIME)


class Recorder:
    """Runs planned steps and logs deliveries to ``log_dir/<pid>.log``."""

    def __init__(self, log_dir: Path | str, default_steps: list[list[Any]] | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.default_steps = default_steps or []

    @property
    def path(self) -> Path:
        return self.log_dir / f"{os.getpid()}.log"

    def log(self, task: Task, at: float, event: str) -> None:
        delivery = Delivery(task.id, at, task.due_at.timestamp(), task.attempt, os.getpid(), event)
        append(self.path, delivery)

    async def handle(self, body: Any, task: Task) -> None:
        """The handler: log, run the plan for this attempt, log the outcome."""
        at = real_now()
        self.log(task, at, "start")
        plan = body.get("plan", {}) if isinstance(body, dict) else {}
        steps = plan.get(str(task.attempt), self.default_steps)
        try:
            for step in steps:
                await self._run(step, task, at)
        except BaseException as exc:
            self.log(task, at, f"fail:{type(exc).__name__}")
            raise
        self.log(task, at, "done")

    async def _run(self, step: list[Any], task: Task, at: float) -> None:
        kind, *args = step
        if kind == "sleep":
            await asyncio.sleep(args[0] / 1000)
        elif kind == "block":
            time.sleep(args[0] / 1000)
        elif kind == "fail":
            raise RuntimeError("planned failure")
        elif kind == "raise":
            raise _RAISABLE[args[0]]()
        elif kind == "hang":
            await asyncio.Event().wait()
        elif kind == "hang_shielded":
            while True:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(3600)
        elif kind == "extend":
            try:
                await task.extend(args[0])
            except LeaseLostError:
                self.log(task, at, "extend:lost")
                raise
            self.log(task, at, "extend:ok")
        elif kind == "exit":
            os._exit(args[0])
        elif kind == "clock":
            self.log(task, at, f"clock:{time.time() - real_now():+.1f}")
        else:
            raise ValueError(f"unknown step {step!r}")


def install(
    queue: Queue,
    log_dir: Path | str,
    *,
    ttr: float = 5.0,
    max_attempts: int = 50,
    retry_delay: float = 0.1,
    default_steps: list[list[Any]] | None = None,
    limits: dict[str, dict[str, Any]] | None = None,
) -> Recorder:
    """Register the recording handler on ``work`` and ``other`` (plain JSON bodies) and on
    ``typed`` (an :class:`Order` body) of ``queue``; ``limits`` adds topic options
    (``rate_limit``, ``max_running``) by topic name."""
    recorder = Recorder(log_dir, default_steps)
    backoff = Backoff(initial=retry_delay, factor=1.0, max=retry_delay, jitter=0.0)
    options: dict[str, Any] = {"ttr": ttr, "max_attempts": max_attempts, "backoff": backoff}
    limits = limits or {}

    async def work(body: dict[str, Any], task: Task) -> None:
        await recorder.handle(body, task)

    async def other(body: dict[str, Any], task: Task) -> None:
        await recorder.handle(body, task)

    async def typed(body: Order, task: Task) -> None:
        await recorder.handle(body.model_dump(), task)

    queue.topic(WORK_TOPIC, **options, **limits.get(WORK_TOPIC, {}))(work)
    queue.topic(OTHER_TOPIC, **options, **limits.get(OTHER_TOPIC, {}))(other)
    queue.topic(TYPED_TOPIC, **options, **limits.get(TYPED_TOPIC, {}))(typed)
    return recorder


def from_env() -> Queue:
    """Build the app's queue from ``$REDIS_URL``, ``$DELAYQ_FAULT_QUEUE`` and friends."""
    env = os.environ
    name = env["DELAYQ_FAULT_QUEUE"]
    if env.get("DELAYQ_FAULT_SENTINEL"):  # "host:port,...;service"
        addresses, service = env["DELAYQ_FAULT_SENTINEL"].split(";")
        nodes = [(h, int(p)) for h, _, p in (a.rpartition(":") for a in addresses.split(","))]
        queue = Queue.from_sentinel(nodes, service=service, name=name)
    else:
        queue = Queue.from_url(
            env["REDIS_URL"], name=name, cluster=bool(env.get("DELAYQ_FAULT_CLUSTER"))
        )
    install(
        queue,
        env["DELAYQ_FAULT_LOG"],
        ttr=float(env.get("DELAYQ_FAULT_TTR", "5")),
        max_attempts=int(env.get("DELAYQ_FAULT_MAX_ATTEMPTS", "50")),
        retry_delay=float(env.get("DELAYQ_FAULT_RETRY_DELAY", "0.1")),
        default_steps=json.loads(env.get("DELAYQ_FAULT_STEPS", "[]")),
        limits=json.loads(env.get("DELAYQ_FAULT_LIMITS", "{}")),
    )
    return queue
