"""Where one worker process's CPU goes while it drains: a py-spy profile, summarised.

Fills a private redis-server with ``--n`` ready no-op tasks (``send_many``), then runs
``py-spy record`` on a child process that drains them with one worker (concurrency 100,
the drain scenario's shape) and stops once no task completed for ``QUIET_S``.  py-spy
samples only stacks that are running, so the time the event loop waits in ``select``
for Redis's replies is not counted: the percentages are of the worker's busy time.

Printed: the drain's rate (under the profiler, so a little slower than unprofiled), then
the functions with the most samples *in themselves* (self) and *under them* (total), as
shares of all samples; time in C code (hiredis, the json and pydantic-core extensions) is
charged to the Python function that called it.  py-spy runs with ``--nonblocking``:
pausing the process for each sample (its default, and the only mode in which it reads C
frames) makes system calls look several times dearer than they are (on Python 3.11
every ``asyncio.get_running_loop()`` is a ``getpid`` call) and slowed the drain so much
that it went quiet before it was done.

py-spy is not a project dependency; install it into the dev interpreter first::

    .venv/bin/pip install py-spy
    .venv/bin/python -m benchmarks.profile_drain
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.drain_cores import drain_until_quiet, fill
from tests.redis_server import RedisServer

MODULE = "benchmarks.profile_drain"
"""This tool, which py-spy starts again as the profiled drain (``--child``)."""
SAMPLE_RATE_HZ = 1000
"""py-spy's samples per second (1 ms apart)."""
EVENT_LOOP_PASS = "BaseEventLoop._run_once "
"""Counted: stacks under the event loop's passes, which is where the drain runs.  Left out:
the start-up (imports, building the queue), before the loop runs anything, and imports
that happen inside it (redis-py imports some modules on first use)."""


def child(url: str, name: str) -> None:
    """Drain ``name``'s ``noop`` topic in this process and print what was drained."""
    from delayq import Queue

    async def run() -> None:
        started = time.time()
        async with Queue.from_url(url, name=name) as queue:
            done, last, _cpu = await drain_until_quiet(queue, started)
        print(f"drained {done:,} tasks at {done / (last - started):,.0f}/s under the profiler")

    asyncio.run(run())


def py_spy() -> str:
    """The py-spy beside this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        sys.exit("py-spy not found: .venv/bin/pip install py-spy")
    return found


def frame_name(frame: str) -> str:
    """``'handle (delayq/worker/runner.py:210)'`` → ``'handle (delayq/worker/runner.py)'``: one row per
    function, whichever line the sample was on."""
    function, _, where = frame.partition(" (")
    return f"{function} ({where.rsplit(':', 1)[0].rstrip(')')})" if where else function


def summarise(raw: Path, top: int) -> None:
    """Print the ``top`` functions by self and by total samples from py-spy's raw
    (collapsed-stack) output: one ``frame;frame;...;leaf count`` line per distinct stack."""
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [frame_name(frame) for frame in stack.split(";") if frame]
        if not any(frame.startswith(EVENT_LOOP_PASS) for frame in frames) or any(
            "importlib" in frame for frame in frames
        ):
            continue
        count = int(count_text)
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            under[name] += count
    print(f"{samples:,} samples in the event loop's passes")
    # A frame on every counted stack (the event loop's own, the script's) says nothing.
    callers = collections.Counter({name: n for name, n in under.items() if n < samples})
    for title, counter in (("self", own), ("total (self + callees)", callers)):
        print(f"\ntop {top} by {title}:")
        for name, count in counter.most_common(top):
            print(f"  {100 * count / samples:5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="tasks drained")
    parser.add_argument("--top", type=int, default=20, help="rows per table")
    parser.add_argument("--child", nargs=2, metavar=("URL", "NAME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    server = RedisServer().start()
    try:
        name = f"profile-{uuid.uuid4().hex[:8]}"
        asyncio.run(fill(server.url, name, args.n))
        with tempfile.TemporaryDirectory() as scratch:
            raw = Path(scratch) / "drain.txt"
            options = ["--nonblocking", "--rate", str(SAMPLE_RATE_HZ), "--format", "raw"]
            drainer = [sys.executable, "-m", MODULE, "--child", server.url, name]
            command = [py_spy(), "record", *options, "--output", str(raw), "--", *drainer]
            subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            summarise(raw, args.top)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
