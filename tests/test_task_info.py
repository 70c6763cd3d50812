"""``TaskInfo.max_attempts`` and ``ttr`` are the values that apply to the task: its own, else
its topic's as registered in the asking process, else as the topic's workers recorded them
in Redis, else the defaults."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from delayq import Queue, TaskInfo
from tests.fixtures_delayq import StartWorker


async def test_a_tasks_own_limits_come_first(queue: Queue) -> None:
    @queue.topic("job", ttr=10, max_attempts=2)
    async def job(body: None) -> None: ...

    await queue.send("job", None, task_id="own", ttr=7, max_attempts=9)
    info = await queue.get("job", "own")
    assert info is not None and (info.max_attempts, info.ttr) == (9, 7)


async def test_without_them_the_topic_registered_in_this_process_applies(queue: Queue) -> None:
    @queue.topic("job", ttr=10, max_attempts=2)
    async def job(body: None) -> None: ...

    await queue.send_delayed("job", None, 60, task_id="t")
    info = await queue.get("job", "t")
    assert info is not None and (info.max_attempts, info.ttr) == (2, 10)


async def test_a_process_without_the_topic_reads_what_its_workers_recorded(
    queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    app, lookup = queues(), queues()  # the worker's process, and a CLI or dashboard

    @app.topic("job", ttr=12.5, max_attempts=3)
    async def job(body: None) -> None:
        raise RuntimeError("always")

    await lookup.send_delayed("job", None, 60, task_id="before")
    before = await lookup.get("job", "before")
    assert before is not None and (before.max_attempts, before.ttr) == (5, 30)  # the defaults
    await start_worker(app)
    info = await lookup.get("job", "before")
    assert info is not None and (info.max_attempts, info.ttr) == (3, 12.5)


async def test_dead_letters_report_the_limits_that_applied(
    queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    app, lookup = queues(), queues()

    @app.topic("job", ttr=12.5, max_attempts=1)
    async def job(body: None) -> None:
        raise RuntimeError("always")

    await start_worker(app)
    await lookup.send("job", None, task_id="doomed")
    dead = await wait_for_dead(lookup)
    assert [(d.id, d.attempts, d.max_attempts, d.ttr) for d in dead] == [("doomed", 1, 1, 12.5)]


async def wait_for_dead(queue: Queue) -> list[TaskInfo]:
    async with asyncio.timeout(10):
        while not (dead := await queue.dead_letters("job")):
            await asyncio.sleep(0.02)
    return dead
