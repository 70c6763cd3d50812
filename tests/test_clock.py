"""A queue's test clock (delayq.testing.run_due): the offset every script adds to Redis's
time.  Without one (production) the scripts read Redis's time exactly as before; with one,
only that queue's time moves; run_due needs no C compiler, no LD_PRELOAD and no particular
redis-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from delayq import Queue, RedisCommandError, Task
from delayq.redis.source import lua_source, use_test_clock
from delayq.testing import run_due
from tests.helpers import redis_now_ms

HOUR = 3_600_000
REPO = Path(__file__).resolve().parent.parent


NAMES = ("send", "send_many", "reserve", "ack", "nack", "extend", "cancel", "reschedule",
         "replay", "get", "stats", "dead_letters", "upcoming", "timeline", "control", "tick",
         "tick_state", "tick_look", "rollup", "shards", "clock", "groups")  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_the_test_clock_copy_differs_from_production_in_one_constant(name: str) -> None:
    production, clocked = lua_source(name), lua_source(name, test_clock=True)
    assert "local READ_CLOCK = true" not in production
    assert clocked == production.replace("local READ_CLOCK = false\n", "local READ_CLOCK = true\n")


async def test_production_scripts_never_read_the_clock_key(queue: Queue) -> None:
    @queue.topic("t")
    async def handle(body: None) -> None: ...

    await queue.redis.set(queue.keys("t").clock, "soon")  # would fail a script that read it
    before = await redis_now_ms(queue.redis)
    await queue.send_delayed("t", None, 0, task_id="now")
    info = await queue.get("t", "now")
    assert info is not None and info.state == "ready"
    assert before <= info.due_at.timestamp() * 1000 <= await redis_now_ms(queue.redis)


@pytest.mark.parametrize("clocked", [False, True], ids=["production", "test-clock"])
async def test_without_a_clock_key_every_script_reads_redis_time(
    queue: Queue, clocked: bool
) -> None:
    if clocked:
        use_test_clock()

    @queue.topic("t")
    async def handle(body: None) -> None: ...

    keys = queue.keys("t")
    await queue.send_delayed("t", None, 0, task_id="now")
    before = await redis_now_ms(queue.redis)
    read = [
        (await queue.scripts.clock(keys))[0],
        (await queue.scripts.tick_state(keys))[0],
        (await queue.scripts.upcoming(keys, limit=1, after=None))[0],
        (await queue.scripts.reserve(keys, limit=1, reclaim=1, ttr_ms=30_000, max_attempts=3))[0]
        // 1000,
    ]
    after = await redis_now_ms(queue.redis)
    assert all(before <= now <= after for now in read), (before, read, after)
    assert (await queue.scripts.clock(keys))[1] == 0
    # Production never writes the key.
    assert await queue.redis.exists(keys.clock) == 0


async def test_an_offset_moves_every_script_of_that_topic(queue: Queue) -> None:
    use_test_clock()

    @queue.topic("t")
    async def handle(body: None) -> None: ...

    keys = queue.keys("t")
    assert (await queue.scripts.clock(keys, HOUR))[1] == HOUR
    before = await redis_now_ms(queue.redis) + HOUR
    await queue.send_delayed("t", None, 60, task_id="in-1m")
    info = await queue.get("t", "in-1m")
    read = [
        (await queue.scripts.clock(keys))[0],
        (await queue.scripts.tick_state(keys))[0],
        (await queue.scripts.upcoming(keys, limit=1, after=None))[0],
    ]
    after = await redis_now_ms(queue.redis) + HOUR
    assert all(before <= now <= after for now in read), (before, read, after)
    assert info is not None and info.state == "delayed"
    assert before + 60_000 <= info.due_at.timestamp() * 1000 <= after + 60_000
    # Back to zero removes the key: the topic reads Redis's time again.
    await queue.scripts.clock(keys, 0)
    assert await queue.redis.exists(keys.clock) == 0


async def test_a_clock_key_holding_something_else_fails_the_call(queue: Queue) -> None:
    use_test_clock()

    @queue.topic("t")
    async def handle(body: None) -> None: ...

    await queue.redis.set(queue.keys("t").clock, "soon")
    with pytest.raises(RedisCommandError, match="not a clock offset"):
        await queue.send("t", None)


async def test_another_queue_on_the_same_redis_keeps_real_time(
    redis_url: str, queue_name: str
) -> None:
    moved = Queue.from_url(redis_url, name=queue_name)
    other = Queue.from_url(redis_url, name=queue_name + "-other")
    try:
        for queue in (moved, other):

            @queue.topic("remind")
            async def remind(body: None) -> None: ...

            await queue.send_delayed("remind", None, timedelta(hours=1), task_id="r")

        assert [o.task_id for o in await run_due(moved, within=timedelta(hours=2))] == ["r"]
        info = await other.get("remind", "r")
        assert info is not None and info.state == "delayed"
        assert await run_due(other, within=0) == []
        real = await redis_now_ms(other.redis)
        now, offset = await other.scripts.clock(other.keys("remind"))
        assert offset == 0 and real <= now <= await redis_now_ms(other.redis)
        # Another Queue object of the moved queue (a web app's, say) sees the moved time.
        again = Queue.from_url(redis_url, name=queue_name)
        try:
            # (two hours less the real time the run took, which passed for it too)
            assert (await again.scripts.clock(again.keys("remind")))[1] >= 2 * HOUR - 60_000
        finally:
            await again.close()
    finally:
        await moved.close()
        await other.close()


SANDBOXED = """
import asyncio, os, shutil, subprocess, sys, time
from datetime import timedelta

import redis

from delayq import Queue
from delayq.testing import free_port, run_due

assert not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")), os.environ["PATH"]
assert "LD_PRELOAD" not in os.environ

port = free_port()
server = subprocess.Popen(
    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
     "--appendonly", "no"],
    stdout=subprocess.DEVNULL,
)
try:
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(port=port).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)

    async def main() -> None:
        queue = Queue.from_url(f"redis://127.0.0.1:{port}/0", name="shop")
        ran = []

        @queue.topic("order.close")
        async def close(body: dict, task) -> None:
            ran.append(task.id)

        await queue.send_delayed("order.close", {}, timedelta(minutes=30), task_id="o1")
        await queue.send_delayed("order.close", {}, timedelta(days=1), task_id="o2")
        outcomes = await run_due(queue, within=timedelta(hours=1))
        assert [(o.task_id, o.outcome) for o in outcomes] == [("o1", "acked")], outcomes
        assert ran == ["o1"]
        await queue.close()

    asyncio.run(main())
    print("ran o1")
finally:
    server.terminate()
    server.wait(10)
"""


def test_run_due_needs_no_compiler_and_no_preload(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # redis-server and python, nothing else
    bin_dir.mkdir()
    found = shutil.which("redis-server")
    assert found is not None
    (bin_dir / "redis-server").symlink_to(found)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("LD_PRELOAD", "DELAYQ_CLOCK_SHIM", "CC") and not key.startswith("PYTEST")
    }
    env.update(PATH=str(bin_dir), PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SANDBOXED)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ran o1"


async def test_run_due_on_the_plugin_url(delayq_redis_url: str) -> None:
    queue = Queue.from_url(delayq_redis_url, name="plugin")
    try:

        @queue.topic("t")
        async def handle(body: None) -> None: ...

        await queue.send_delayed("t", None, timedelta(days=2), task_id="d2")
        assert [o.task_id for o in await run_due(queue, within=timedelta(days=3))] == ["d2"]
    finally:
        await queue.close()


def test_a_process_started_with_delayq_test_clock_reads_the_offsets() -> None:
    code = "from delayq.redis.source import test_clock_on; print(test_clock_on())"
    for value, expected in (("1", "True"), ("", "False")):
        env = {**os.environ, "DELAYQ_TEST_CLOCK": value, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected


async def test_run_due_on_a_cluster_moves_every_topic_and_shard(
    cluster: Any, queue_name: str
) -> None:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        ran: list[str] = []

        @queue.topic("a")
        async def a(body: None, task: Task) -> None:
            ran.append(task.id)

        @queue.topic("b", shards=3)
        async def b(body: None, task: Task) -> None:
            ran.append(task.id)

        for i in range(6):
            await queue.send_delayed("b", None, timedelta(minutes=10 + i), task_id=f"b{i}")
        await queue.send_delayed("a", None, timedelta(minutes=30), task_id="a1")
        await queue.send_delayed("a", None, timedelta(hours=3), task_id="a2")
        outcomes = await run_due(queue, within=timedelta(hours=1))
        assert [o.task_id for o in outcomes] == [*(f"b{i}" for i in range(6)), "a1"]
        offsets = {
            (await queue.scripts.clock(keys))[1]
            for name in ("a", "b")
            for keys in queue.shard_keys(name)
        }
        assert len(offsets) == 1 and offsets.pop() >= HOUR - 60_000
    finally:
        await queue.close()
