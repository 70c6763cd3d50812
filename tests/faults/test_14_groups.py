"""Scenario 14: groups across a fleet of worker processes, through kills and a Redis restart.

- max_running_per_group=1 over 200 groups, 4 worker processes SIGKILLed and restarted at
  random while tasks keep arriving: no two attempts of one group ever run at once, except
  where the first one's lease had expired (its worker was killed: the cap holds until the
  lease ends, which reserve.lua then reclaims); nothing is lost, nothing starts early.
- rate_limit_per_group over 20 groups, 2 worker processes, Redis SIGKILLed and restarted
  from its AOF mid-drain: no group ever has more leases than its rate in any window.

Sizes: CI runs 6 s of kills and a 5/s rate over ~4 s; DELAYQ_FULL_FAULTS=1 runs 60 s of
kills and a 20 s drain.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.faults.apps.plan import WORK_TOPIC, real_now
from tests.faults.checker import publish_figures
from tests.faults.harness import sized
from tests.faults.test_13_controls import LIMITED_APP, most_in_window, read_events
from tests.helpers import wait_for

GROUPS = 200
WORKERS = 4
KILL_SECONDS = sized(ci=6, full=60)
GROUP_TTR = 1.5
TOLERANCE = 0.005  # s: the lease deadline is read in ms; the handlers' clock is the host's
RATE, RATE_GROUPS = 5, 20
RATE_SECONDS = sized(ci=4, full=20)


def overlaps(events: list[dict[str, Any]], killed: dict[int, float]) -> tuple[int, int]:
    """(pairs of attempts of one group that ran at once with the first one's lease still
    held, pairs that overlapped only past an expired lease).  An attempt without an ``end``
    line ran until its worker was killed."""
    ends = {(e["id"], e["attempt"], e["pid"]): e["at"] for e in events if e["event"] == "end"}
    by_group: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for e in events:
        if e["event"] == "start":
            end = ends.get((e["id"], e["attempt"], e["pid"]), killed.get(e["pid"], real_now()))
            by_group[e["group"]].append((e["at"], end, e["deadline"] or end))
    broken = expired = 0
    for attempts in by_group.values():
        attempts.sort()
        for i, (_, end, deadline) in enumerate(attempts):
            for later_start, _, _ in attempts[i + 1 :]:
                if later_start >= end:
                    break
                if later_start + TOLERANCE >= deadline:
                    expired += 1
                else:
                    broken += 1
    return broken, expired


def producing(queue: Any, **options: Any) -> None:
    """Register the work topic in the producer's process too: a send derives its group from
    ``group_by`` where the topic is registered (the workers' registration does not reach
    the test's process)."""

    @queue.topic(WORK_TOPIC, **options)
    async def work(body: Any) -> None: ...


def test_the_overlap_counter() -> None:
    events = [
        {"event": "start", "id": "a", "attempt": 1, "pid": 1, "group": "g", "at": 0.0,
         "deadline": 1.0},
        {"event": "start", "id": "b", "attempt": 1, "pid": 2, "group": "g", "at": 1.0,
         "deadline": 2.0},  # a was killed at 3: its lease ended at 1, b may run
        {"event": "end", "id": "b", "attempt": 1, "pid": 2, "at": 1.5},
        {"event": "start", "id": "c", "attempt": 1, "pid": 2, "group": "g", "at": 1.2,
         "deadline": 2.2},  # b's lease is held: broken
        {"event": "end", "id": "c", "attempt": 1, "pid": 2, "at": 1.3},
    ]  # fmt: skip
    assert overlaps(events, {1: 3.0}) == (1, 2)


async def test_14_group_cap_holds_through_worker_kills(
    make_redis_server, spawn_worker, make_queue, log_dir: Path, queue_name, record_property
) -> None:
    server = make_redis_server()
    queue = make_queue(server.url)
    options = {"group_by": "g", "max_running_per_group": 1}
    producing(queue, **options)
    env = {
        "DELAYQ_FAULT_LIMITS": json.dumps({WORK_TOPIC: options}),
        "DELAYQ_FAULT_SLEEP_MS": "50",
        "DELAYQ_FAULT_LEASE_AT_START": "1",
    }

    def spawn() -> Any:
        return spawn_worker(server, app=LIMITED_APP, concurrency=20, ttr=GROUP_TTR, env=env)

    workers = [await spawn().started() for _ in range(WORKERS)]
    rng = random.Random(14)
    sent: dict[str, float] = {}  # id -> earliest moment it may start (real clock)
    killed: dict[int, float] = {}

    async def produce() -> None:
        n = 0
        stop = real_now() + KILL_SECONDS
        while real_now() < stop:
            bodies = [{"g": f"g{rng.randrange(GROUPS)}"} for _ in range(80)]
            delays = [rng.choice((0, 0, 0.2, 0.5)) for _ in bodies]
            ids = [f"k{n + i:06d}" for i in range(len(bodies))]
            at = real_now()
            await queue.send_many(WORK_TOPIC, bodies, task_ids=ids, delay=delays)
            sent.update({i: at + d for i, d in zip(ids, delays, strict=True)})
            n += len(bodies)
            await asyncio.sleep(0.1)

    sending = asyncio.create_task(produce())
    kills = 0
    while not sending.done():
        await asyncio.sleep(rng.uniform(0.2, 0.8))
        victim = rng.randrange(WORKERS)
        killed[workers[victim].pid] = real_now()
        workers[victim].kill()
        kills += 1
        workers[victim] = spawn().start()  # joins when it is up
    await sending

    def done() -> set[str]:
        return {e["id"] for e in read_events(log_dir) if e["event"] == "end"}

    await wait_for(lambda: done() >= set(sent), 120, "every task to finish")
    events = read_events(log_dir)
    broken, expired = overlaps(events, killed)
    starts = [e for e in events if e["event"] == "start"]
    early = sum(1 for e in starts if e["at"] + TOLERANCE < sent[e["id"]])
    with server.client() as admin:
        prefix = f"delayq:{{{queue_name}:{WORK_TOPIC}}}:"
        await wait_for(lambda: admin.exists(prefix + "grp:run") == 0, 30, "every lease to end")
        left = admin.exists(prefix + "grp:all", prefix + "grp:ring", prefix + "grp:wait",
                            prefix + "grp:full")  # fmt: skip
    figures = {
        "scenario": f"14 max_running_per_group=1, {GROUPS} groups, {WORKERS} worker processes "
        f"killed at random for {KILL_SECONDS} s",
        "tasks": len(sent), "finished": len(done() & set(sent)), "kills": kills,
        "runs": len(starts), "overlaps_with_lease_held": broken,
        "overlaps_past_expired_lease": expired, "early": early,
        "redelivered": sum(1 for e in starts if e["attempt"] > 1),
    }  # fmt: skip
    print(f"\n{figures}")
    for key, value in figures.items():
        record_property(key, value)
    publish_figures(figures)
    assert figures["finished"] == len(sent)  # lost: 0
    assert early == 0
    assert broken == 0, figures
    assert kills >= 3
    assert left == 0  # every group's state drained with its tasks


async def test_14_rate_per_group_holds_through_a_redis_restart(
    make_redis_server, spawn_worker, make_queue, log_dir: Path, queue_name, record_property
) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")
    queue = make_queue(server.url)
    options = {"group_by": "g", "rate_limit_per_group": f"{RATE}/s"}
    producing(queue, **options)
    env = {"DELAYQ_FAULT_LIMITS": json.dumps({WORK_TOPIC: options})}
    for _ in range(2):
        await spawn_worker(server, app=LIMITED_APP, concurrency=20, ttr=5.0, env=env).started()
    per_group = RATE * RATE_SECONDS
    bodies = [{"g": f"r{n % RATE_GROUPS}"} for n in range(per_group * RATE_GROUPS)]
    await queue.send_many(WORK_TOPIC, bodies, batch_size=1_000)

    def ended() -> set[str]:
        return {e["id"] for e in read_events(log_dir) if e["event"] == "end"}

    await wait_for(lambda: len(ended()) >= len(bodies) // 3, 60, "a third of the tasks")
    server.kill()
    await asyncio.sleep(0.5)
    server.start()  # replays the AOF: the groups' windows come back with it
    await wait_for(lambda: len(ended()) >= len(bodies), RATE_SECONDS * 3 + 60, "every task")
    by_group: dict[str, list[float]] = defaultdict(list)
    for e in read_events(log_dir):
        if e["event"] == "end" and e["leased"] is not None:
            by_group[e["group"]].append(e["leased"])
    worst = max(most_in_window(times, 1.0) for times in by_group.values())
    figures = {
        "scenario": f"14 rate_limit_per_group={RATE}/s, {RATE_GROUPS} groups, 2 worker "
        "processes, Redis SIGKILLed and restarted from its AOF",
        "tasks": len(bodies), "finished": len(ended()), "most_leases_any_1s_one_group": worst,
    }  # fmt: skip
    print(f"\n{figures}")
    for key, value in figures.items():
        record_property(key, value)
    publish_figures(figures)
    assert figures["finished"] == len(bodies)
    assert worst <= RATE, figures
