"""Aborting a running task: ``Queue.cancel(topic, id, running=True)``, on one Redis and on
the local Redis Cluster (real servers, real workers)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from delayq import Queue, Task
from tests.apps.runner import app_env, module_command, run_cli
from tests.fixtures_delayq import StartWorker
from tests.helpers import redis_time_passes, reserve, stored, wait_for
from tests.test_events import Events


@pytest.fixture(params=["single", "cluster"])
async def aq(request: pytest.FixtureRequest, queue_name: str) -> AsyncIterator[Queue]:
    """A fresh queue on the session's Redis, then on the local cluster."""
    if request.param == "single":
        q = Queue.from_url(request.getfixturevalue("redis_url"), name=queue_name)
    else:
        url = request.getfixturevalue("cluster").url
        q = Queue.from_url(url, name=queue_name, cluster=True)
    try:
        yield q
    finally:
        await q.close()


async def lease(q: Queue, topic: str, task_id: str) -> str:
    """Lease ``task_id`` as a worker would (no worker runs it): its lease token."""
    _, _, leased = await reserve(q, topic)
    assert [i for i, _, _ in leased] == [task_id]
    return leased[0][1]


async def test_abort_of_each_state(aq: Queue) -> None:
    """Delayed, ready and dead tasks are cancelled as by a plain cancel; a reserved one only
    with running=True, its lease ended so that the attempt's ack is refused."""
    await aq.send_delayed("t", {}, 60, task_id="delayed")
    assert await aq.cancel("t", "delayed", running=True) is True
    await aq.send("t", {}, task_id="ready")
    assert await aq.cancel("t", "ready", running=True) is True
    assert await aq.get("t", "ready") is None
    await aq.send("t", {}, task_id="dead")
    token = await lease(aq, "t", "dead")
    await aq.scripts.nack(aq.keys("t"), "dead", token, mode="dead", delay_ms=0,
                          error="boom", max_attempts=3)  # fmt: skip
    assert (await stored(aq, "t", "dead")).state == "dead"
    assert await aq.cancel("t", "dead", running=True) is True
    assert await aq.dead_letters("t") == []

    await aq.send("t", {}, task_id="run")
    token = await lease(aq, "t", "run")
    assert await aq.cancel("t", "run") is False  # as before: a running task is left alone
    assert (await stored(aq, "t", "run")).state == "reserved"
    assert await aq.cancel("t", "run", running=True) is True
    assert await aq.get("t", "run") is None
    keys = aq.keys("t")
    assert await aq.redis.zcount(keys.reserved, "-inf", "(inf") == 0  # the lease is gone
    assert await aq.scripts.ack(keys, [("run", token)]) == [False]
    assert await aq.scripts.extend(keys, "run", token, 1000) == 0
    outcome, _ = await aq.scripts.nack(keys, "run", token, mode="retry", delay_ms=0, error="",
                                       max_attempts=3)  # fmt: skip
    assert outcome == 0
    assert await aq.cancel("t", "run", running=True) is False
    assert await aq.cancel("t", "nope", running=True) is False


async def test_an_abort_is_recorded_as_cancelled_and_counted(aq: Queue) -> None:
    aq.topic("h", history=10)(_never_run)
    events = Events()
    aq.hooks.add_listener(events)
    await aq.send("h", {"n": 1}, task_id="x")
    await lease(aq, "h", "x")
    assert await aq.cancel("h", "x", running=True)
    [record] = await aq.history("h")
    assert (record.id, record.outcome, record.attempts, record.body) == (
        "x",
        "cancelled",
        1,
        {"n": 1},
    )
    assert record.error is not None and record.error.startswith("Aborted")
    await events.wait_for("cancelled")


async def test_an_abort_stores_the_cancelled_result_and_wakes_its_waiter(
    aq: Queue, start_worker: StartWorker
) -> None:
    """The result of a topic with results= is stored by the same exit of cancel.lua, so a
    waiter of the running task's result hears it finish as cancelled."""
    started = asyncio.Event()

    @aq.topic("r", ttr=60, results=60)
    async def handler(body: Any) -> int:
        started.set()
        await asyncio.sleep(60)
        return 1

    await start_worker(aq)
    await aq.send("r", {}, task_id="x")
    await asyncio.wait_for(started.wait(), 10)
    waiter = asyncio.create_task(aq.result("r", "x", wait=20))
    await asyncio.sleep(0)  # (the waiter may start before or after the abort: both work)
    assert await aq.cancel("r", "x", running=True)
    result = await asyncio.wait_for(waiter, 20)
    assert result is not None
    assert (result.outcome, result.value, result.attempts) == ("cancelled", None, 1)
    assert result.error is not None and result.error.startswith("Aborted")
    again = await aq.result("r", "x")
    assert again is not None and again.outcome == "cancelled"


async def _never_run(body: Any) -> None:
    raise AssertionError("not run in this test")


async def test_aborting_a_running_handler_cancels_it(
    aq: Queue, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker holding the lease hears the abort and cancels the handler at once, with
    a message naming the abort; the task is never retried."""
    started, messages, runs = asyncio.Event(), [], []

    @aq.topic("t", ttr=60, max_attempts=5, history=10)
    async def handler(body: Any, task: Task) -> None:
        runs.append(task.attempt)
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as exc:
            messages.append(exc.args[0] if exc.args else None)
            raise

    events = Events()
    aq.hooks.add_listener(events)
    worker = await start_worker(aq)
    await aq.send("t", {}, task_id="x")
    await asyncio.wait_for(started.wait(), 10)
    caplog.set_level(logging.INFO, "delayq.worker")
    assert await aq.cancel("t", "x", running=True)
    took = await wait_for(lambda: messages, 5, "the handler's cancellation")
    assert took < 5  # a generous bound; the cancel follows the publish at once
    assert messages == ["Aborted: t/x was cancelled while running"]
    await wait_for(lambda: worker.held == 0, 5, "the worker to let the delivery go")
    await events.wait_for("lease_lost")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await aq.get("t", "x") is None
    [record] = await aq.history("t")
    assert record.outcome == "cancelled"
    await aq.send("t", {}, task_id="after")  # the worker goes on, and never reruns x
    await wait_for(lambda: len(runs) == 2, 5, "the next task")
    assert runs == [1, 1]


async def test_a_handler_that_swallows_the_abort_is_not_acked(
    aq: Queue, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    started, swallowed, done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @aq.topic("t", ttr=60)
    async def handler(body: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.set()
        await asyncio.sleep(0.05)  # and it goes on, then returns
        done.set()

    events = Events()
    aq.hooks.add_listener(events)
    worker = await start_worker(aq)
    await aq.send("t", {}, task_id="x")
    await asyncio.wait_for(started.wait(), 10)
    caplog.set_level(logging.INFO, "delayq.worker")
    assert await aq.cancel("t", "x", running=True)
    await asyncio.wait_for(done.wait(), 5)
    await wait_for(lambda: worker.held == 0, 5, "the worker to let the delivery go")
    await events.wait_for("lease_lost")
    assert "acked" not in events.kinds()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("aborted" in r.getMessage() for r in caplog.records)
    assert await aq.get("t", "x") is None


async def test_a_sync_handler_runs_on_and_its_result_is_ignored(
    aq: Queue, start_worker: StartWorker
) -> None:
    """A thread cannot be interrupted: the worker lets the delivery go at the abort, and
    what the thread returns later is ignored, as at a TTR."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    @aq.topic("t", ttr=60)
    def handler(body: Any) -> None:
        started.set()
        release.wait(10)
        finished.set()

    events = Events()
    aq.hooks.add_listener(events)
    worker = await start_worker(aq)
    await aq.send("t", {}, task_id="x")
    await wait_for(started.is_set, 10, "the handler's thread")
    assert await aq.cancel("t", "x", running=True)
    await wait_for(lambda: worker.held == 0, 5, "the worker to let the delivery go")
    assert not finished.is_set()  # the thread is still in the handler
    release.set()
    await wait_for(finished.is_set, 5, "the thread to finish")
    await events.wait_for("lease_lost")
    assert "acked" not in events.kinds() and "retried" not in events.kinds()
    assert await aq.get("t", "x") is None


async def test_abort_with_no_live_holder_then_the_task_never_runs(
    aq: Queue, start_worker: StartWorker
) -> None:
    """The lease is held by no running worker (its holder died): the abort still succeeds,
    and a worker started after the lease's TTR never runs the task."""
    runs: list[str] = []

    @aq.topic("t", ttr=0.3)
    async def handler(body: Any, task: Task) -> None:
        runs.append(task.id)

    await aq.send("t", {}, task_id="x")
    _, _, leased = await reserve(aq, "t", ttr_ms=300)  # a holder that then died
    assert [i for i, _, _ in leased] == ["x"]
    assert await aq.cancel("t", "x", running=True)
    await redis_time_passes(aq.redis, 400)  # past the dead holder's lease
    await start_worker(aq)
    await aq.send("t", {}, task_id="marker")
    await wait_for(lambda: runs, 10, "the marker task")
    assert runs == ["marker"]
    assert await aq.get("t", "x") is None


async def test_topic_cancel_aborts(aq: Queue) -> None:
    topic = aq.topic("t")(_never_run)
    await topic.send({}, task_id="x")
    await lease(aq, "t", "x")
    assert await topic.cancel("x") is False
    assert await topic.cancel("x", running=True) is True
    assert await aq.get("t", "x") is None


async def test_an_abort_message_for_a_lease_it_does_not_hold_changes_nothing(
    aq: Queue, start_worker: StartWorker
) -> None:
    """Every worker of the topic hears an abort; one holding the task under another token
    (a later attempt) keeps running it."""
    started, cancelled = asyncio.Event(), []

    @aq.topic("t", ttr=60)
    async def handler(body: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise

    events = Events()
    aq.hooks.add_listener(events)
    await start_worker(aq)
    await aq.send("t", {}, task_id="x")
    await asyncio.wait_for(started.wait(), 10)
    keys = aq.keys("t")
    channel = keys.wake_publish.lstrip("!")
    if keys.wake_publish.startswith("!"):
        await aq.redis.execute_command("SPUBLISH", channel, "abort:0:x")
    else:
        await aq.redis.publish(channel, "abort:0:x")
    await events.wait_for("acked")
    assert cancelled == []


@pytest.mark.parametrize("where", ["single", "cluster"])
async def test_the_cli_aborts_with_running(
    request: pytest.FixtureRequest, queue_name: str, where: str
) -> None:
    if where == "single":
        url, options = request.getfixturevalue("redis_url"), ["--url"]
    else:
        url, options = request.getfixturevalue("cluster").url, ["--cluster", "--url"]
    q = Queue.from_url(url, name=queue_name, cluster=where == "cluster")
    try:
        await q.send("t", {}, task_id="x")
        await lease(q, "t", "x")
        args = ("cancel", *options, url, "--name", queue_name, "t", "x")
        env = app_env(url, "unused")
        refused = await run_cli(module_command(*args), env)
        assert refused.returncode == 1 and "--running" in refused.stderr, refused.stderr
        assert (await stored(q, "t", "x")).state == "reserved"
        aborted = await run_cli(module_command(*args, "--running"), env)
        assert aborted.returncode == 0, aborted.stderr
        assert "cancelled t/x" in aborted.stdout
        assert await q.get("t", "x") is None
        again = await run_cli(module_command(*args, "--running"), env)
        assert again.returncode == 1 and "unknown or done" in again.stderr
    finally:
        await q.close()


async def test_abort_on_a_sharded_topic(aq: Queue, start_worker: StartWorker) -> None:
    """Each shard has its own wake channel: the abort is heard on the task's shard's."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    @aq.topic("s", ttr=60, shards=4)
    async def handler(body: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await start_worker(aq)
    for task_id in ("a", "b", "c"):
        started.clear()
        await aq.send("s", {}, task_id=task_id)
        await asyncio.wait_for(started.wait(), 10)
        cancelled.clear()
        assert await aq.cancel("s", task_id, running=True)
        await asyncio.wait_for(cancelled.wait(), 5)
        assert await aq.get("s", task_id) is None
