"""``catch_up`` after every worker stopped: the tick stored a period ahead counts as missed
when no worker was there as it fell due, so ``"none"`` skips it, ``"latest"`` runs only the
most recent missed tick, and ``"all"`` runs them all.  Queue time moves on the test clock
(:mod:`delayq.testing`), so a gap of hours costs no real time."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from delayq import Queue, Task
from delayq.testing import run_due
from delayq.testing.clock import QueueClock
from delayq.ticks import PeriodicOptions, after_last, schedule, tick_id
from delayq.worker.periodic import ON_TIME_MS
from tests.fixtures_delayq import StartWorker

MINUTE = 60_000
SCHEDULES: dict[str, tuple[dict[str, Any], int]] = {
    "every": ({"every": timedelta(minutes=1)}, MINUTE),
    "cron": ({"cron": "*/5 * * * *", "tz": "Europe/Berlin"}, 5 * MINUTE),
}
"""A schedule's options and its period, ms."""


def as_ms(moment: Any) -> int:
    return round(moment.timestamp() * 1000)


async def stored_tick(queue: Queue, topic: str) -> int:
    """Start the chain with a worker, as a deployment would, then stop every worker: the
    tick it stored a period ahead is left waiting.  Returns its time, ms."""
    assert await run_due(queue, within=0) == []
    following = await queue.next_tick(topic)
    assert following is not None
    return as_ms(following)


async def gap_until(queue: Queue, moment_ms: int) -> None:
    """Let the queue's time pass until ``moment_ms`` with no worker running."""
    clock = await QueueClock(queue).load()
    await clock.advance(moment_ms - await clock.now_ms())


@pytest.mark.parametrize("kind", sorted(SCHEDULES))
@pytest.mark.parametrize("catch_up", ["none", "latest", "all"])
async def test_a_gap_of_several_periods_follows_catch_up(
    queue: Queue, kind: str, catch_up: Any
) -> None:
    options, period = SCHEDULES[kind]
    ran: list[str] = []

    @queue.periodic("report", catch_up=catch_up, **options)
    async def report(task: Task) -> None:
        ran.append(task.id)

    first = await stored_tick(queue, "report")
    # No worker for the stored tick and the 3 after it: 4 missed ticks.
    await gap_until(queue, first + 3 * period + period // 2)
    await run_due(queue, within=0)  # a worker is back

    missed = [tick_id(first + n * period) for n in range(4)]
    expected = {"none": [], "latest": missed[-1:], "all": missed}[catch_up]
    assert ran == expected
    following = await queue.next_tick("report")
    assert following is not None and as_ms(following) == first + 4 * period
    # Nothing left over: the skipped ticks are gone from the schedule.
    page = await queue.upcoming("report", limit=10)
    assert [task.id for task in page.tasks] == [tick_id(first + 4 * period)]


@pytest.mark.parametrize("catch_up", ["none", "latest", "all"])
async def test_a_daily_report_after_a_two_hour_outage(queue: Queue, catch_up: Any) -> None:
    """The one missed tick is the stored one: ``"none"`` skips it, the others run it once."""
    ran: list[str] = []

    @queue.periodic("daily", cron="0 3 * * *", catch_up=catch_up)
    async def daily(task: Task) -> None:
        ran.append(task.id)

    three_am = await stored_tick(queue, "daily")
    await gap_until(queue, three_am + 2 * 3_600_000)
    await run_due(queue, within=0)

    assert ran == ([] if catch_up == "none" else [tick_id(three_am)])
    following = await queue.next_tick("daily")
    assert following is not None and as_ms(following) == three_am + 24 * 3_600_000


@pytest.mark.parametrize("catch_up", ["none", "latest", "all"])
async def test_ticks_that_fall_due_while_a_worker_runs_are_not_missed(
    queue: Queue, catch_up: Any
) -> None:
    ran: list[str] = []

    @queue.periodic("report", every=timedelta(minutes=1), catch_up=catch_up)
    async def report(task: Task) -> None:
        ran.append(task.id)

    first = await stored_tick(queue, "report")
    now = await (await QueueClock(queue).load()).now_ms()
    await run_due(queue, within=timedelta(milliseconds=first + 3 * MINUTE - now))

    assert ran == [tick_id(first + n * MINUTE) for n in range(4)]


async def test_a_tick_looked_at_late_is_missed_and_the_verdict_stays(queue: Queue) -> None:
    """tick_look.lua judges the chain's last tick once, at the first look after it fell due."""

    @queue.periodic("report", every=timedelta(minutes=1))
    async def report(task: Task) -> None: ...

    first = await stored_tick(queue, "report")
    keys = queue.keys("report")
    assert report.options.periodic is not None
    fingerprint = report.options.periodic.schedule.fingerprint
    await gap_until(queue, first + ON_TIME_MS // 2)  # a live worker's keeper is this late
    assert (await queue.scripts.tick_look(keys, fingerprint, ON_TIME_MS))[2:] == (first, False)
    await gap_until(queue, first + 10 * MINUTE)
    assert (await queue.scripts.tick_look(keys, fingerprint, ON_TIME_MS))[2:] == (first, False)
    # Another chain's look neither judges nor reads a verdict.
    assert (await queue.scripts.tick_look(keys, "other", ON_TIME_MS))[3] is False


async def test_a_first_look_past_the_slack_marks_the_tick_missed(queue: Queue) -> None:
    @queue.periodic("report", every=timedelta(minutes=1))
    async def report(task: Task) -> None: ...

    first = await stored_tick(queue, "report")
    assert report.options.periodic is not None
    fingerprint = report.options.periodic.schedule.fingerprint
    await gap_until(queue, first + 2 * ON_TIME_MS)
    keys = queue.keys("report")
    for _ in range(2):  # the verdict stays for every later look
        assert (await queue.scripts.tick_look(keys, fingerprint, ON_TIME_MS))[2:] == (first, True)


@pytest.mark.parametrize(
    ("catch_up", "now", "expected"),
    [
        # Only the stored tick (1,000) was missed.
        ("all", 1_050, (1_100, False)),
        ("latest", 1_050, (1_100, False)),  # it is the most recent missed tick: it runs
        ("none", 1_050, (1_100, True)),
        # The stored tick and 1,100 .. 2,000 were missed.
        ("all", 2_050, (1_100, False)),
        ("latest", 2_050, (2_000, True)),
        ("none", 2_050, (2_100, True)),
    ],
)
def test_which_tick_follows_a_missed_stored_tick(
    catch_up: Any, now: int, expected: tuple[int, bool]
) -> None:
    periodic = PeriodicOptions(schedule(cron=None, every=0.1, tz=None), catch_up)
    assert after_last(periodic, 1_000, now, last_missed=True) == expected
    # A stored tick that fell due while a worker ran is late, not missed: never dropped.
    assert after_last(periodic, 1_000, now, last_missed=False)[1] is False


async def test_workers_returning_together_never_run_a_skipped_tick(
    queues: Any, start_worker: StartWorker
) -> None:
    """Each worker looks at its chains before it leases anything, so the missed stored tick
    is gone before any of them could lease it."""
    ran: list[str] = []
    opened: list[Queue] = []
    for _ in range(3):  # three processes' queues
        queue = queues()

        @queue.periodic("report", every=timedelta(minutes=1), catch_up="none")
        async def report(task: Task) -> None:
            ran.append(task.id)

        opened.append(queue)
    first = await stored_tick(queue, "report")
    await gap_until(queue, first + MINUTE // 2)
    workers = await asyncio.gather(*(start_worker(q, concurrency=4) for q in opened))

    marker = await opened[0].send("report", None)  # due now: leased after any older tick
    async with asyncio.timeout(10):
        while marker not in ran or any(worker.held for worker in workers):
            await asyncio.sleep(0.01)
    assert ran == [marker]
    page = await queue.upcoming("report", limit=10)
    assert [task.id for task in page.tasks] == [tick_id(first + MINUTE)]


@pytest.mark.parametrize("catch_up", ["none", "latest"])
async def test_a_missed_stored_tick_on_a_cluster(
    cluster: Any, queue_name: str, catch_up: Any
) -> None:
    """tick_look.lua and tick.lua touch only the topic's slot."""
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        ran: list[str] = []

        @queue.periodic("report", every=timedelta(minutes=1), catch_up=catch_up)
        async def report(task: Task) -> None:
            ran.append(task.id)

        first = await stored_tick(queue, "report")
        await gap_until(queue, first + 2 * MINUTE + MINUTE // 2)
        await run_due(queue, within=0)
        assert ran == ([] if catch_up == "none" else [tick_id(first + 2 * MINUTE)])
        page = await queue.upcoming("report", limit=10)
        assert [task.id for task in page.tasks] == [tick_id(first + 3 * MINUTE)]
    finally:
        await queue.close()
