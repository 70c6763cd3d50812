"""The registry of live workers through faults, with a short heartbeat interval (0.5 s):

- a worker SIGKILLed leaves ``queue.workers()`` within 3 intervals;
- the only worker of a periodic topic's new schedule SIGKILLed while a worker of the old
  schedule runs: the old one takes the chain back and ticks resume within 3 intervals,
  none doubled, the missed ones run (``catch_up="all"``);
- Redis (AOF) SIGKILLed and restarted after more than 3 intervals down: a live worker is
  listed again within one interval of Redis answering.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.faults.apps.plan import real_now
from tests.faults.apps.ticker import TICK_TOPIC
from tests.faults.checker import read_log
from tests.helpers import wait_for

HEARTBEAT = 0.5
POLL = 0.02
"""How often the test looks: each measured time may be late by up to one poll."""
TICKER = "tests.faults.apps.ticker:queue"
OLD_EVERY_MS, NEW_EVERY_MS = 400, 500


async def test_30_a_killed_worker_leaves_the_list_within_three_intervals(
    make_redis_server, spawn_worker, make_queue, record_property
) -> None:
    server = make_redis_server()
    queue = make_queue(server.url)
    victim = await spawn_worker(server, heartbeat=HEARTBEAT).started()
    survivor = await spawn_worker(server, heartbeat=HEARTBEAT).started()

    async def both_listed() -> bool:
        return {w.pid for w in await queue.workers()} == {victim.pid, survivor.pid}

    await wait_for(both_listed, 10, "both workers listed")
    await queue.send("work", {"steps": []})  # a topic for the count check at teardown
    victim.kill()
    killed = real_now()

    async def victim_gone() -> bool:
        return {w.pid for w in await queue.workers()} == {survivor.pid}

    await wait_for(victim_gone, 3 * HEARTBEAT + 5, "the killed worker to leave", step=POLL)
    gone_after = real_now() - killed
    record_property("gone_after_s", round(gone_after, 3))
    # Its last beat was at most one interval before the kill, so its entry expires at most
    # 3 intervals after it (Redis's clock).
    assert gone_after <= 3 * HEARTBEAT + POLL + 0.05, gone_after


async def test_30_ticks_resume_when_the_new_schedules_only_worker_is_killed(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server()
    admin = server.client()
    queue = make_queue(server.url)

    def ticker(every_ms: int):  # type: ignore[no-untyped-def]
        return spawn_worker(server, app=TICKER, ready_topic=TICK_TOPIC, heartbeat=HEARTBEAT,
                            env={"DELAYQ_FAULT_EVERY": str(every_ms / 1000)})  # fmt: skip

    old = await ticker(OLD_EVERY_MS).started()
    await wait_for(lambda: len(read_log(log_dir)) >= 2, 10, "the old schedule to tick")
    chain = f"delayq:{{{queue.name}:{TICK_TOPIC}}}:periodic"
    old_fp = admin.hget(chain, "fp")
    new = await ticker(NEW_EVERY_MS).started()
    await wait_for(lambda: admin.hget(chain, "fp") != old_fp, 10, "the new schedule's claim")
    await wait_for(lambda: _after(log_dir, new.pid), 10, "a tick of the new schedule")
    new.kill()
    killed = real_now()
    new_last = int(admin.hget(chain, "last"))  # its chain's last tick, ms

    def resumed() -> bool:
        return admin.hget(chain, "fp") == old_fp and any(
            d.at > killed and round(d.due * 1000) > new_last for d in read_log(log_dir)
        )

    await wait_for(resumed, 3 * HEARTBEAT + 5, "ticks to resume", step=POLL)
    resumed_after = (
        min(d.at for d in read_log(log_dir) if d.at > killed and round(d.due * 1000) > new_last)
        - killed
    )
    await asyncio.sleep(4 * OLD_EVERY_MS / 1000)  # a few more ticks of the old schedule
    ended = real_now()
    deliveries = [d for d in read_log(log_dir) if d.event == "done"]
    record_property("resumed_after_s", round(resumed_after, 3))

    done = Counter(d.task_id for d in deliveries)
    assert [t for t, n in done.items() if n > 1] == [], "a tick ran twice"
    # catch_up="all": every old-schedule tick after the new chain's last one ran.
    ran = {round(d.due * 1000) for d in deliveries if round(d.due * 1000) > new_last}
    first = new_last - new_last % OLD_EVERY_MS + OLD_EVERY_MS
    expected = set(range(first, int((ended - 1.0) * 1000), OLD_EVERY_MS))
    assert expected <= ran, sorted(expected - ran)[:5]
    # Takeover at most 2.25 intervals after the kill (2 without a beat, checked every
    # quarter interval), then the missed tick runs at once.
    assert resumed_after <= 3 * HEARTBEAT, resumed_after
    assert "takes its ticks over" in old.output()
    admin.close()


def _after(log_dir, pid: int) -> bool:  # type: ignore[no-untyped-def]
    return any(d.pid == pid for d in read_log(log_dir))


async def test_30_a_redis_restart_does_not_hide_live_workers(
    make_redis_server, spawn_worker, make_queue, record_property
) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")
    queue = make_queue(server.url)
    worker = await spawn_worker(server, heartbeat=HEARTBEAT).started()
    await queue.send("work", {"steps": []})

    async def listed() -> bool:
        return [w.pid for w in await queue.workers()] == [worker.pid]

    await wait_for(listed, 10, "the worker listed")
    server.kill()
    await asyncio.sleep(4 * HEARTBEAT)  # longer than an entry lives without a beat
    server.start()  # same port and directory: replays the AOF

    async def answers() -> bool:
        try:
            await queue.workers()
        except Exception:
            return False
        return True

    await wait_for(answers, 15, "Redis back", step=POLL)
    back = real_now()
    await wait_for(listed, 5, "the worker listed again", step=POLL)
    hidden = real_now() - back
    record_property("hidden_after_restart_s", round(hidden, 3))
    assert worker.alive
    assert hidden <= HEARTBEAT, hidden
