"""Periodic ticks through faults: 3 worker processes run ``every=0.2 s`` (catch_up="all");
one worker is SIGKILLed and restarted mid-run, and Redis (AOF, appendfsync always) is
SIGKILLed and restarted once.  Every tick from the first to the last must run exactly
once: missed ticks (never ran) and doubled ticks (ran to the end twice) are counted and
must both be 0.  Tick lateness (start - tick time) p50/p99 are the figures; the ticks due
while Redis was down (or the workers reconnecting) are late by design, caught up when it is
back, so the lateness of the others is reported apart too.

Sizes: 60 s under DELAYQ_FULL_FAULTS=1, 12 s in CI.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter

from delayq.ticks import tick_id
from tests.faults.apps.plan import real_now
from tests.faults.apps.ticker import TICK_TOPIC
from tests.faults.checker import _percentile, publish_figures, read_log
from tests.faults.harness import FULL

DURATION = 60.0 if FULL else 12.0
EVERY_MS = 200
TICKER = "tests.faults.apps.ticker:queue"
DOWN = 0.5  # seconds a killed process stays down
RECONNECT = 1.0  # the longest pause of a worker's reconnect backoff
TTR = 5.0  # the ticker's ttr (tests/faults/apps/ticker.py)


async def test_21_periodic_every_tick_once_through_a_worker_kill_and_a_redis_restart(
    make_redis_server, spawn_worker, make_queue, log_dir, record_property
) -> None:
    server = make_redis_server(appendonly=True, appendfsync="always")

    def worker():  # type: ignore[no-untyped-def]
        return spawn_worker(server, app=TICKER, ready_topic=TICK_TOPIC, concurrency=5)

    workers = [await worker().started() for _ in range(3)]
    started = real_now()

    await asyncio.sleep(DURATION * 0.3)
    workers[0].kill()
    worker_killed = real_now()
    await asyncio.sleep(DOWN)
    workers[0] = await worker().started()

    await asyncio.sleep(max(0.0, started + DURATION * 0.65 - real_now()))
    redis_killed = real_now()
    server.kill()
    await asyncio.sleep(DOWN)
    server.start()  # same port and directory: replays the AOF
    redis_back = real_now()

    await asyncio.sleep(max(0.0, started + DURATION - real_now()))
    ended = real_now()
    # Every tick due by `ended` gets time to run: besides retries and a late catch-up, a
    # tick leased by a reserve whose reply died with Redis (the lease reached the AOF, the
    # worker never saw it) runs again only when that lease expires, a TTR later.
    deadline = real_now() + TTR + 10
    while _not_run(log_dir, ended) and real_now() < deadline:
        await asyncio.sleep(0.05)
    for proc in workers:
        assert proc.alive, proc.output()[-3000:]
    outputs = [proc.output() for proc in workers]
    for proc in workers:
        await proc.terminate()

    deliveries = [d for d in read_log(log_dir) if d.event == "done"]
    done = Counter(d.task_id for d in deliveries)
    first_ms = round(min(d.due for d in deliveries) * 1000)
    last_ms = math.floor(ended * 1000 / EVERY_MS) * EVERY_MS
    expected = [tick_id(t) for t in range(first_ms, last_ms + 1, EVERY_MS)]
    missed = [t for t in expected if t not in done]
    doubled = [t for t, n in done.items() if n > 1]
    once = {d.task_id: d for d in sorted(deliveries, key=lambda d: d.at)}.values()
    lateness = [(d.at - d.due) * 1000 for d in once]
    # Ticks due while Redis was down or the workers were reconnecting (their retries back
    # off to 1 s), and the one scheduled just before the kill.
    window = (redis_killed - EVERY_MS / 1000, redis_back + RECONNECT)
    outage = [(d.at - d.due) * 1000 for d in once if window[0] <= d.due <= window[1]]
    others = [(d.at - d.due) * 1000 for d in once if not window[0] <= d.due <= window[1]]
    figures = {
        "scenario": f"21 periodic every 0.2 s, 3 workers, {DURATION:.0f} s, worker SIGKILL "
        "+ Redis SIGKILL/restart (AOF always), catch_up=all",
        "ticks": len(expected),
        "missed": len(missed),
        "doubled": len(doubled),
        "lateness_p50_ms": _percentile(lateness, 0.50),
        "lateness_p99_ms": _percentile(lateness, 0.99),
        "lateness_max_ms": max(lateness),
        "lateness_p50_ms_outside_outage": _percentile(others, 0.50),
        "lateness_p99_ms_outside_outage": _percentile(others, 0.99),
        "ticks_due_in_outage": len(outage),
        "outage_max_lateness_ms": max(outage, default=math.nan),
        "worker_killed_at_s": worker_killed - started,
        "redis_down_s": redis_back - redis_killed,
        "tick_workers": len({d.pid for d in deliveries}),
        "ticks_run_again_after_a_lost_attempt": sum(1 for d in once if d.attempt > 1),
    }
    publish_figures(figures)
    for key, value in figures.items():
        record_property(key, value)
    print("\n" + "\n".join(f"{k:34} {v}" for k, v in figures.items()))

    if missed:  # say where each missed tick is, for the failure's message
        queue = make_queue(server.url)
        states = {t: await queue.get(TICK_TOPIC, t) for t in missed[:5]}
        print(
            "timeline (s from start): worker killed",
            worker_killed - started,
            "redis killed",
            redis_killed - started,
            "back",
            redis_back - started,
        )
        for t, info in states.items():
            print("missed", t, info)
        for out in outputs:
            print(out[-4000:])
    assert missed == [], f"{len(missed)} missed, e.g. {missed[:5]}"
    assert doubled == [], f"{len(doubled)} doubled, e.g. {doubled[:5]}"
    assert len(expected) >= DURATION * 1000 / EVERY_MS * 0.9


def _not_run(log_dir, ended: float) -> bool:  # type: ignore[no-untyped-def]
    """Whether a tick from the first one run to the last one due by ``ended`` has not run."""
    done = {d.task_id: d.due for d in read_log(log_dir) if d.event == "done"}
    if not done:
        return True
    first_ms = round(min(done.values()) * 1000)
    last_ms = math.floor(ended * 1000 / EVERY_MS) * EVERY_MS
    return any(tick_id(t) not in done for t in range(first_ms, last_ms + 1, EVERY_MS))
