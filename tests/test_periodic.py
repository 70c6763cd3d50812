"""Periodic topics on a real Redis: each tick once across workers, the tick script's
refusals (also after a tick was acked), catch-up after missed ticks, a changed schedule
replacing the chain, validation at decoration time, ``next_tick`` and ``delayq periodic``.

Intervals are short (0.1-0.3 s) and the assertions are about which ticks ran, not when:
lateness is measured by the fault suite and shown by the figures, never asserted here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio

from delayq import InvalidInputError, InvalidScheduleError, Queue, Task, Worker
from delayq.redis.keys import TopicKeys
from delayq.ticks import MAX_CATCH_UP, PeriodicOptions, schedule, tick_id
from delayq.worker.periodic import Keeper
from tests.apps.runner import app_env, module_command, run_cli
from tests.fixtures_delayq import StartWorker
from tests.helpers import redis_now_ms, wait_for

EVERY_MS = 100


class Ticks:
    """What periodic handlers saw: (tick id, worker number, due_at ms) per run, and for each
    tick whether it was stored after its time had come (a missed tick being caught up)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, int]] = []
        self.caught_up: dict[int, bool] = {}
        self._changed = asyncio.Event()

    def handler(self, worker: int) -> Callable[[Task], Any]:
        async def tick(task: Task) -> None:
            due = round(task.due_at.timestamp() * 1000)
            self.runs.append((task.id, worker, due))
            self.caught_up[due] = task.enqueued_at >= task.due_at
            self._changed.set()

        return tick

    async def wait(self, count: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.runs) < count:
                self._changed.clear()
                await self._changed.wait()

    def ids(self) -> list[str]:
        return [run[0] for run in self.runs]


async def test_each_tick_runs_once_across_workers(
    queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    ticks = Ticks()
    for number in range(3):
        queue = queues()
        every = timedelta(milliseconds=EVERY_MS)
        queue.periodic("sweep", every=every, catch_up="all")(ticks.handler(number))
        await start_worker(queue, concurrency=4)
    await ticks.wait(12)

    due = sorted(run[2] for run in ticks.runs)
    assert len(due) == len(set(due)), Counter(ticks.ids()).most_common(3)
    # Consecutive multiples of the interval, with none left out.
    assert all(t % EVERY_MS == 0 for t in due)
    assert due == list(range(due[0], due[-1] + 1, EVERY_MS))
    assert all(task_id == tick_id(t) for task_id, _, t in ticks.runs)
    assert len({run[1] for run in ticks.runs}) >= 1


async def test_tick_script_schedules_each_tick_time_once_ever(queue: Queue) -> None:
    """tick.lua refuses a tick not later than the last one scheduled, also after that tick
    ran and was acked (when an idempotent send would store it again)."""
    keys = queue.keys("sweep")
    scripts = queue.scripts
    now = await redis_now_ms(queue.redis)
    tick = now - now % 1000 + 1000

    async def schedule_tick(ms: int, mode: str = "advance", fingerprint: str = "fp1") -> int:
        status, _, _ = await scripts.tick(
            keys, mode=mode, fingerprint=fingerprint, tick_ms=ms, task_id=tick_id(ms), body=b"null"
        )  # type: ignore[arg-type]
        return status

    assert await schedule_tick(tick) == 1
    assert await schedule_tick(tick) == 0  # a second worker trying the same tick
    assert await schedule_tick(tick - 1000) == 0  # an earlier one
    info = await queue.get("sweep", tick_id(tick))
    assert info is not None and info.state == "delayed" and info.body is None
    assert info.due_at.timestamp() * 1000 == tick

    # The tick runs and is acked: it is gone, yet its time cannot be scheduled again.
    assert await queue.cancel("sweep", tick_id(tick))
    assert await schedule_tick(tick) == 0
    assert await queue.get("sweep", tick_id(tick)) is None

    # Another schedule: 'advance' stands aside, 'claim' replaces the chain.
    assert await schedule_tick(tick + 1000) == 1
    assert await schedule_tick(tick + 500, fingerprint="fp2") == -1
    assert await schedule_tick(tick + 500, mode="claim", fingerprint="fp2") == 1
    assert await queue.get("sweep", tick_id(tick + 1000)) is None  # the old waiting tick
    assert await queue.get("sweep", tick_id(tick + 500)) is not None
    assert await scripts.tick_state(keys) == (pytest.approx(now, abs=60_000), "fp2", tick + 500)


def keeper_for(periodic: PeriodicOptions) -> Keeper:
    """A keeper for its choice of tick only (choose() touches neither Redis nor events)."""
    keys = TopicKeys.build("q", "sweep")
    return Keeper(None, keys, periodic, None, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        ("all", 1_100),  # the oldest missed tick: the rest follow one by one
        ("latest", 2_000),  # the most recent missed tick only
        ("none", 2_100),  # none of them: the next tick to come
    ],
)
def test_catch_up_chooses_which_missed_tick_runs(catch_up: Any, expected: int) -> None:
    keeper = keeper_for(PeriodicOptions(schedule(cron=None, every=0.1, tz=None), catch_up))
    # The chain's last tick was 1,000 ms; ticks 1,100 .. 2,000 were missed; now is 2,050.
    assert keeper.choose(1_000, 2_050) == (expected, False)
    # Nothing missed: every mode schedules the next tick.
    assert keeper.choose(1_000, 1_050) == (1_100, False)
    # A new chain starts with the next tick after now.
    assert keeper.choose(None, 2_050) == (2_100, False)


def test_catch_up_all_is_bounded() -> None:
    keeper = keeper_for(PeriodicOptions(schedule(cron=None, every=0.001, tz=None), "all"))
    now = 10 * MAX_CATCH_UP
    assert keeper.choose(0, now) == (now - MAX_CATCH_UP + 1, False)
    assert keeper.choose(0, now, missed=True) == (now - MAX_CATCH_UP + 1, True)


@pytest.mark.parametrize("catch_up", ["all", "latest", "none"])
async def test_missed_ticks_after_a_pause_follow_catch_up(
    queue: Queue, redis_client: redis.asyncio.Redis, start_worker: StartWorker, catch_up: Any
) -> None:
    """The chain stood still (no worker) after tick `last`; 8 ticks were missed since.  A
    tick stored after its time had come is a caught-up one (its enqueued_at >= due_at)."""
    every = 200
    ticks = Ticks()
    topic = queue.periodic("sweep", every=every / 1000, catch_up=catch_up)(ticks.handler(0))
    assert topic.options.periodic is not None
    now = await redis_now_ms(redis_client)
    last = now - now % every - 8 * every
    await redis_client.hset(
        queue.keys("sweep").periodic,
        mapping={"fp": topic.options.periodic.schedule.fingerprint, "last": last, "id": "gone"},
    )
    await start_worker(queue)
    await ticks.wait({"all": 8, "latest": 1, "none": 0}[catch_up] + 2)

    due = sorted(t for _, _, t in ticks.runs)
    assert due == list(range(due[0], due[-1] + 1, every))  # contiguous, none twice
    caught_up = [t for t in due if ticks.caught_up[t]]
    if catch_up == "all":
        assert caught_up[:8] == list(range(last + every, last + 9 * every, every))
    elif catch_up == "latest":  # the first run is the most recent missed tick
        assert due[0] == caught_up[0] >= last + 8 * every
    else:  # the first run is a tick scheduled ahead, after the missed ones
        assert due[0] > last + 8 * every and not ticks.caught_up[due[0]]


async def test_a_changed_schedule_replaces_the_chain(
    queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    old_ticks, new_ticks = Ticks(), Ticks()
    old = queues()
    old.periodic("sweep", every=60)(old_ticks.handler(0))
    worker = await start_worker(old)
    async with asyncio.timeout(5):
        while (waiting := await old.next_tick("sweep")) is None:
            await asyncio.sleep(0.02)
    old_id = tick_id(round(waiting.timestamp() * 1000))
    worker.stop()
    assert await old.get("sweep", old_id) is not None  # waiting for its minute

    new = queues()
    new.periodic("sweep", every=0.2)(new_ticks.handler(1))
    await start_worker(new)
    await new_ticks.wait(3)
    assert await new.get("sweep", old_id) is None  # the old chain's tick is gone
    assert old_ticks.runs == []
    assert all(t % 200 == 0 for _, _, t in new_ticks.runs)
    # The old schedule is no longer current: its process sees no next tick of its own.
    assert await old.next_tick("sweep") is None
    assert await new.next_tick("sweep") is not None


async def test_next_tick_and_decoration_time_validation(queue: Queue) -> None:
    async def sweep(task: Task) -> None: ...

    for bad in (
        {"cron": "61 * * * *"},
        {"cron": "* * * * *", "tz": "Mars/Olympus_Mons"},
        {"cron": "* * *"},
        {"every": 0},
        {"every": 1, "cron": "* * * * *"},
        {"every": 1, "catch_up": "sometimes"},
    ):
        with pytest.raises(InvalidScheduleError) as error:
            queue.periodic("sweep", **bad)(sweep)
        assert isinstance(error.value, ValueError)
    assert "sweep" not in queue.topics

    async def takes_body(body: int, task: Task) -> None: ...

    with pytest.raises(InvalidInputError, match=r"take \(task\) or nothing"):
        queue.periodic("sweep", every=1)(takes_body)

    queue.periodic("sweep", cron="0 3 * * *", tz="Europe/Berlin")(sweep)
    assert await queue.next_tick("sweep") is None  # no worker has scheduled one
    with pytest.raises(InvalidInputError, match="not a periodic topic"):
        await queue.next_tick("other")


async def test_delayq_periodic_lists_topics_and_next_ticks(redis_url: str, queue_name: str) -> None:
    from tests.apps import ticking

    env = app_env(redis_url, queue_name)
    before = await run_cli(module_command("periodic", "tests.apps.ticking:queue", "--json"), env)
    assert before.returncode == 0, before.stderr
    listed = json.loads(before.stdout)
    assert listed == {
        "report.daily": {
            "schedule": "cron 0 3 * * * (Europe/Berlin)",
            "catch_up": "latest",
            "chain_schedule": None,
            "next_tick": None,
            "live": False,
        },
        "cart.sweep": {
            "schedule": "every 3600s", "catch_up": "all", "chain_schedule": None,
            "next_tick": None, "live": False,
        },
    }  # fmt: skip
    queue = ticking.build(redis_url, queue_name)
    worker = Worker(queue, topics=["cart.sweep"])
    run = asyncio.create_task(worker.run(handle_signals=False))
    try:
        async with asyncio.timeout(5):
            while await queue.next_tick("cart.sweep") is None or not await queue.workers():
                await asyncio.sleep(0.02)
        running = await run_cli(
            module_command("periodic", "tests.apps.ticking:queue", "--json"), env
        )
        sweep = json.loads(running.stdout)["cart.sweep"]
        assert (sweep["live"], sweep["chain_schedule"]) == (True, "every 3600s")
        assert sweep["next_tick"] is not None
        assert not json.loads(running.stdout)["report.daily"]["live"]
    finally:
        worker.stop()
        await run  # before the queue closes: a worker must not outlive its queue's client
        await queue.close()
    after = await run_cli(module_command("periodic", "tests.apps.ticking:queue"), env)
    assert after.returncode == 0, after.stderr
    lines = after.stdout.splitlines()
    assert lines[0].split() == ["topic", "schedule", "catch_up", "next", "tick", "live",
                                "chain's", "schedule"]  # fmt: skip
    row = next(line for line in lines if line.startswith("cart.sweep")).split()
    assert row[-4].endswith("Z")  # a tick id: its time in UTC
    assert row[-3:] == ["no", "every", "3600s"]  # stopped: no live worker runs the chain


async def test_a_periodic_tick_can_also_be_sent_by_hand(
    queue: Queue, start_worker: StartWorker
) -> None:
    ticks = Ticks()
    sweep = queue.periodic("sweep", cron="0 3 1 1 *")(ticks.handler(0))
    await start_worker(queue, on_outcome=None)
    await sweep.send(None, task_id="by-hand")
    await ticks.wait(1)
    assert ticks.ids() == ["by-hand"]


async def test_worker_without_the_periodic_topic_does_not_tick(
    queue: Queue, start_worker: StartWorker
) -> None:
    ticks = Ticks()
    queue.periodic("sweep", every=0.1)(ticks.handler(0))

    @queue.topic("other")
    async def other(body: None) -> None: ...

    await start_worker(queue, topics=["other"])
    await asyncio.sleep(0.35)
    assert ticks.runs == []
    assert await queue.next_tick("sweep") is None


async def test_a_chain_whose_schedule_no_live_worker_runs_is_taken_back(
    queues: Callable[[], Queue], start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed rollout: the new schedule's only worker goes away; the old schedule's worker
    takes the chain back after two heartbeat intervals, warning with both schedules."""
    beat = 0.2
    ticks = Ticks()
    old = queues()
    old_topic = old.periodic("sweep", every=0.3)(ticks.handler(0))
    await start_worker(old, heartbeat=beat)
    await ticks.wait(1)
    new = queues()
    new_topic = new.periodic("sweep", every=0.25)(ticks.handler(1))
    new_worker = await start_worker(new, heartbeat=beat)
    new_fp = new_topic.options.periodic.schedule.fingerprint  # type: ignore[union-attr]
    async with asyncio.timeout(5):  # the new schedule claimed the chain
        while (await new.scripts.tick_state(new.keys("sweep")))[1] != new_fp:
            await asyncio.sleep(0.02)
    new_worker.stop()
    stopped = await redis_now_ms(old.redis)
    caplog.set_level(logging.WARNING, logger="delayq.worker")

    def resumed() -> bool:
        return any(due > stopped and due % 300 == 0 for _, _, due in ticks.runs)

    await wait_for(resumed, 3 * beat + 0.3 + 2, "the old schedule's ticks to resume")
    due = [run[2] for run in ticks.runs]
    assert len(due) == len(set(due)), Counter(ticks.ids()).most_common(3)  # none doubled
    (warning,) = [
        r.getMessage() for r in caplog.records if "takes its ticks over" in r.getMessage()
    ]
    assert "every 0.25s" in warning and "every 0.3s" in warning, warning
    assert old_topic.options.periodic is not None
    old_fp = old_topic.options.periodic.schedule.fingerprint
    assert (await old.scripts.tick_state(old.keys("sweep")))[1] == old_fp
