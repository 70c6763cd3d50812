"""Pause and resume: fleet-wide, stored in Redis, shown by stats() and get(), and by the CLI."""

from __future__ import annotations

import asyncio

import redis.asyncio

from delayq import Queue, TopicStats
from tests.apps.runner import app_env
from tests.fixtures_delayq import StartWorker
from tests.helpers import counted, redis_time_passes, reserve, stored
from tests.test_cli import cli

QUIET_S = 0.5
"""How long a paused topic is watched for a lease that must not happen."""


def recording(queue: Queue, topic: str = "t") -> tuple[list[str], asyncio.Event]:
    """Register a handler on ``topic`` that records each body's ``n``; the event is set on each."""
    ran: list[str] = []
    event = asyncio.Event()

    @queue.topic(topic)
    async def handler(body: dict[str, str]) -> None:
        ran.append(body["n"])
        event.set()

    return ran, event


async def test_a_paused_topic_leases_nothing_and_sends_are_accepted(
    queue: Queue, start_worker: StartWorker
) -> None:
    ran, event = recording(queue)
    await queue.pause("t")
    await start_worker(queue)
    task_id = await queue.send("t", {"n": "1"})

    await asyncio.sleep(QUIET_S)
    assert ran == []
    info = await stored(queue, "t", task_id)
    assert (info.state, info.paused) == ("ready", True)
    assert counted(await queue.stats()) == {
        "t": TopicStats(delayed=0, ready=1, reserved=0, dead=0, paused=True)
    }

    await queue.resume("t")
    async with asyncio.timeout(10):
        await event.wait()
    assert ran == ["1"]
    async with asyncio.timeout(10):
        while await queue.stats():  # once acked: nothing left, and nothing paused
            await asyncio.sleep(0.01)


async def test_resume_wakes_the_workers_at_once(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    keys = queue.keys("t")
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(keys.wake)
    try:
        await queue.pause("t")
        await queue.resume("t")
        await queue.resume("t")  # not paused: nothing changes, nobody is woken
        woken = []
        async with asyncio.timeout(5):
            while len(woken) < 2:
                message = await pubsub.get_message(timeout=1)
                if message is not None:
                    woken.append(message)
        assert await pubsub.get_message(timeout=0.2) is None
    finally:
        await pubsub.aclose()


async def test_the_pause_outlives_the_workers_and_running_tasks_finish(
    queue: Queue, start_worker: StartWorker
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    @queue.topic("t")
    async def handler(body: dict[str, str]) -> None:
        if body["n"] == "slow":
            started.set()
            await release.wait()
        finished.append(body["n"])

    first = await start_worker(queue)
    await queue.send("t", {"n": "slow"})
    async with asyncio.timeout(10):
        await started.wait()
    await queue.pause("t")
    await queue.send("t", {"n": "after"})
    release.set()  # leased before the pause: runs to the end and is acked
    async with asyncio.timeout(10):
        while first.held:
            await asyncio.sleep(0.01)
    assert finished == ["slow"]

    first.stop()
    await start_worker(queue)  # a new worker starts into the stored pause
    await asyncio.sleep(QUIET_S)
    assert finished == ["slow"]
    await queue.resume("t")
    async with asyncio.timeout(10):
        while finished != ["slow", "after"]:
            await asyncio.sleep(0.01)


async def test_a_paused_topic_still_reclaims_expired_leases(queue: Queue) -> None:
    task_id = await queue.send("t", {})
    _, _, leased = await reserve(queue, "t", ttr_ms=1)
    assert [item[0] for item in leased] == [task_id]
    await queue.pause("t")
    await redis_time_passes(queue.redis, 1)
    _, next_ms, leased = await reserve(queue, "t")
    assert leased == [] and next_ms == -1  # reclaimed (no lease left), nothing leased
    info = await stored(queue, "t", task_id)
    assert (info.state, info.attempts, info.paused) == ("ready", 1, True)
    assert info.last_error is not None and info.last_error.startswith("LeaseExpired")
    await queue.resume("t")
    _, _, leased = await reserve(queue, "t")
    assert [(item[0], item[2]) for item in leased] == [(task_id, 2)]


async def test_pause_and_resume_from_the_command_line(
    redis_url: str, queue: Queue, queue_name: str
) -> None:
    await queue.send_delayed("mail", {}, delay=60)
    env = app_env(redis_url, "unused")
    del env["DELAYQ_QUEUE"]
    where = ("--url", redis_url, "--name", queue_name)

    paused = await cli(env, "pause", *where, "mail")
    assert paused.returncode == 0, paused.stderr
    assert "paused mail" in paused.stdout
    table = await cli(env, "stats", *where)
    assert table.stdout.splitlines()[1].split() == ["mail", "1", "0", "0", "0", "0", "-", "paused"]
    assert (await queue.stats())["mail"].paused

    resumed = await cli(env, "resume", *where, "mail")
    assert resumed.returncode == 0, resumed.stderr
    assert not (await queue.stats())["mail"].paused


async def test_pausing_a_topic_redis_never_saw_needs_force(
    redis_url: str, queue: Queue, queue_name: str
) -> None:
    env = app_env(redis_url, "unused")
    del env["DELAYQ_QUEUE"]
    where = ("--url", redis_url, "--name", queue_name)

    for command in ("pause", "resume"):
        refused = await cli(env, command, *where, "mial")
        assert refused.returncode == 1, refused.stderr
        assert "never seen topic 'mial'" in refused.stderr
        assert "--force" in refused.stderr
    assert await queue.stats() == {}  # nothing was stored
    assert await queue.topic_names() == []

    forced = await cli(env, "pause", *where, "--force", "mial")
    assert forced.returncode == 0, forced.stderr
    assert (await queue.stats())["mial"].paused
    resumed = await cli(env, "resume", *where, "mial")  # seen now: its pause is stored
    assert resumed.returncode == 0, resumed.stderr
    assert "mial" not in await queue.stats()  # no tasks, and no longer paused
