"""Run the ``delayq`` command in a child process, the way it runs in production.

:class:`WorkerProcess` is a ``delayq worker`` whose output goes to a file (a pipe nobody
reads could fill up and stall the worker); :func:`run_cli` runs a short command to the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: children run there, so ``tests.apps.counting`` is importable."""
ENTRY_POINT = Path(sys.executable).with_name("delayq")
"""The console script installed by ``pip install -e .``."""
APP = "tests.apps.counting:queue"


def app_env(redis_url: str, queue_name: str, **extra: str) -> dict[str, str]:
    """The environment of a child running the counting app on ``queue_name``."""
    env = {**os.environ, "REDIS_URL": redis_url, "DELAYQ_QUEUE": queue_name, **extra}
    env.pop("DELAYQ_LOG_LEVEL", None)  # the tests read the INFO lines
    return env


def module_command(*args: str) -> list[str]:
    """``python -m delayq ARGS`` with this interpreter."""
    return [sys.executable, "-m", "delayq", *args]


def script_command(*args: str) -> list[str]:
    """``delayq ARGS`` through the installed console script."""
    return [str(ENTRY_POINT), *args]


@dataclass
class Result:
    """The outcome of a finished command."""

    returncode: int
    stdout: str
    stderr: str


async def run_cli(command: list[str], env: dict[str, str], timeout: float = 20.0) -> Result:
    """Run ``command`` to its end without blocking the event loop."""
    proc = await asyncio.create_subprocess_exec(
        *command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


class WorkerProcess:
    """A ``delayq worker`` child process, logging to ``log_path``."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.command = command
        self.env = env
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        """Start the child (returns at once; see :meth:`wait_started`)."""
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        assert self._proc is not None, "not started"
        return self._proc

    def log(self) -> str:
        """Everything the child printed so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_for_log(self, text: str, timeout: float = 15.0) -> None:
        """Wait until ``text`` appears in the child's output."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.02)

    async def wait_started(self, timeout: float = 15.0) -> None:
        """Wait until the worker has installed its signal handlers and starts consuming."""
        await self.wait_for_log("worker started", timeout)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child."""
        self.proc.send_signal(sig)

    async def wait(self, timeout: float = 15.0) -> int:
        """Wait for the child to exit and return its exit code."""
        deadline = time.monotonic() + timeout
        while (code := self.proc.poll()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker still running after {timeout}s:\n{self.log()}")
            await asyncio.sleep(0.02)
        return code

    def close(self) -> None:
        """Kill the child if it still runs (test teardown)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=10)


class Spawner:
    """Starts worker processes and kills whatever still runs on :meth:`close`."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.workers: list[WorkerProcess] = []

    def spawn(self, command: list[str], env: dict[str, str]) -> WorkerProcess:
        """Start ``command`` (a ``delayq worker`` invocation) in the background."""
        log_path = self.log_dir / f"worker-{len(self.workers)}.log"
        worker = WorkerProcess(command, env, log_path)
        self.workers.append(worker)  # before start(), so a failed start is cleaned up too
        return worker.start()

    def close(self) -> None:
        """Kill every worker still running."""
        for worker in self.workers:
            worker.close()
