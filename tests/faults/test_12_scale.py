"""Scenario 12: a million delayed tasks in one topic.

The topic is filled with send_many.lua itself, 1,000 tasks per call (its batch limit).  Then, with SLOWLOG
recording every call, the server-side cost of reserve (promotion is part of it: a task is
ready once its due time passes, in the same sorted set), ack, send and stats is compared
with the same calls on a topic of 10,000 tasks.

Figures: bytes per task (``used_memory`` growth / tasks), median script times.  Checks:
reserve at the large size costs at most 2x its cost at 10k, and no script call takes more
than 50 ms (every script works on bounded batches).

Size: CI loads 200,000 tasks; DELAYQ_FULL_FAULTS=1 loads the issue's 1,000,000.
"""

from __future__ import annotations

import hashlib
import statistics
import time

from delayq import Queue
from delayq.redis.scripts import waiting_keys
from delayq.redis.source import lua_source
from tests.faults.checker import publish_figures
from tests.faults.harness import sized

BIG = sized(200_000, 1_000_000)
SMALL = 10_000
DUE_NOW = 2_000  # due tasks on top of the delayed ones, leased in batches of 100
CHUNK = 1_000
LIMIT_MS = 50.0
# SLOWLOG also records the commands a script calls: room for every one of them.
SLOWLOG_LEN = 200_000
BODY = '{"order_id":1234567,"action":"close","note":"a typical small body"}'


def _now_ms(admin) -> int:
    seconds, micros = admin.time()
    return seconds * 1000 + micros // 1000


def _load(admin, queue: Queue, topic: str, count: int, due0: int, prefix: str) -> float:
    """Bulk-load ``count`` tasks, ids "<prefix><n>" due at ``due0`` + n ms; return the seconds."""
    keys = queue.keys(topic)
    load = admin.register_script(lua_source("send_many"))
    started = time.monotonic()
    for first in range(0, count, CHUNK):
        fields: list[str | int] = []
        for n in range(first, min(first + CHUNK, count)):
            fields += (f"{prefix}{n}", due0 + n, BODY)
        # A tolerance of a day: the "due now" tasks are loaded with (absolute) times in the
        # past; no max attempts or ttr of their own.
        load(keys=waiting_keys(keys), args=[86_400_000, keys.wake, "a", 0, 0, 0, *fields])
    admin.sadd(f"delayq:{{{queue.name}}}:topics", topic)
    return time.monotonic() - started


async def _exercise(queue: Queue, topic: str) -> None:
    """Lease every due task in batches of 100 and ack them; send a few; read stats."""
    keys = queue.keys(topic)
    while True:
        _, _, items = await queue.scripts.reserve(
            keys, limit=100, reclaim=100, ttr_ms=30_000, max_attempts=5
        )
        if not items:
            break
        leases = [(task_id, raw.split(b",")[1].decode()) for task_id, raw in items]
        assert all(await queue.scripts.ack(keys, leases))
    for i in range(50):
        await queue.send_delayed(topic, {"n": i}, 3600)
    await queue.stats()


def _durations_us(admin) -> dict[str, list[int]]:
    """Per script name, the SLOWLOG durations (µs) of its EVALSHA calls."""
    by_sha = {
        hashlib.sha1(lua_source(name).encode()).hexdigest(): name
        for name in ("reserve", "ack", "send", "stats")
    }
    found: dict[str, list[int]] = {name: [] for name in by_sha.values()}
    for entry in admin.slowlog_get(SLOWLOG_LEN):
        parts = entry["command"].split()
        if parts and parts[0].upper() == b"EVALSHA" and parts[1].decode() in by_sha:
            found[by_sha[parts[1].decode()]].append(int(entry["duration"]))
    return found


async def test_12_one_million_delayed_tasks(make_redis_server, make_queue, record_property):
    server = make_redis_server(extra_args=["--slowlog-max-len", str(SLOWLOG_LEN)])
    queue = make_queue(server.url)
    admin = server.client()
    base_memory = admin.info("memory")["used_memory"]
    far = _now_ms(admin) + 86_400_000
    big_load_s = _load(admin, queue, "big", BIG, far, "d")
    bytes_per_task = (admin.info("memory")["used_memory"] - base_memory) / BIG
    _load(admin, queue, "small", SMALL, far, "d")
    for topic in ("small", "big"):
        _load(admin, queue, topic, DUE_NOW, _now_ms(admin) - DUE_NOW - 1, "r")

    costs = {}
    for topic in ("small", "big"):
        admin.config_set("slowlog-log-slower-than", 0)
        admin.slowlog_reset()
        await _exercise(queue, topic)
        admin.config_set("slowlog-log-slower-than", 10_000)
        costs[topic] = _durations_us(admin)
    admin.close()

    median = {t: {s: statistics.median(v) for s, v in c.items() if v} for t, c in costs.items()}
    worst_ms = max(max(v) for c in costs.values() for v in c.values() if v) / 1000
    figures = {
        "tasks": BIG,
        "bytes_per_task": round(bytes_per_task),
        "bulk_load_s": round(big_load_s, 2),
        "worst_script_ms": worst_ms,
        **{f"{s}_us_{t}": m for t, ms in median.items() for s, m in ms.items()},
    }
    for key, value in figures.items():
        record_property(key, value)
    publish_figures({"scenario": f"12 scale: {BIG:,} delayed tasks in one topic", **figures})
    print("\n" + "\n".join(f"{key:<22} {value}" for key, value in figures.items()))

    assert len(costs["big"]["reserve"]) >= DUE_NOW // 100
    assert median["big"]["reserve"] <= 2 * median["small"]["reserve"], median
    assert worst_ms <= LIMIT_MS, figures
