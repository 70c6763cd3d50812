"""What each part of ``reserve.lua`` and ``ack.lua`` costs inside Redis.

``lifecycle_cost`` shows that a lease and an ack cost about twice the compact-layout
floor's; the drain's 2-process ratio grows as that time shrinks (``host_scaling``).
This script says where the time goes, as ``send_parts`` does for ``send.lua``: it runs
the two scripts as shipped, and copies of one of them with one part taken out, on one
private ``redis-server``.  Each round and variant fills a fresh topic with ``--n`` ready
tasks (``send_many``), leases them all in calls of 100 and then acks them in calls of
100, and reads the time inside ``EVALSHA`` per task of each phase from
``INFO commandstats``.  Variants take turns round by round; the minimum over rounds is
reported beside the median.

A copy with a part taken out is not a correct script; it only prices the part (a lease
without its header rewrite, for one, leaves tokens the shipped ack refuses, so only the
phase a variant changes is read).  Copies are made by replacing exact text of the
scripts as the loader inlines them: when that text changes, this script stops with the
text it could not find.

Run with the dev interpreter (``./scripts/test`` creates it)::

    .venv/bin/python -m benchmarks.lease_parts --rounds 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

import redis

from benchmarks.common import emit
from delayq import Queue
from delayq.redis.keys import TopicKeys
from delayq.redis.scripts import ack_keys, lua_source, reserve_keys
from delayq.task import Envelope
from tests.redis_server import RedisServer

BATCH = 100
LEASE_MS = 60_000

Cut = list[tuple[str, str]]
"""(exact text of the script, what replaces it), applied in order."""

RESERVE_PARTS: dict[str, Cut] = {
    "type and slot checks": [
        (
            "local bad = check_types({ [wheel] = 'zset', [reserved] = 'zset', [dead] = 'zset',\n"
            "  [errors] = 'hash', [seq] = 'string', [slot_counter(prefix)] = 'string' }) or "
            "load_buckets(prefix)",
            "local bad = load_buckets(prefix)",
        ),
        ("bad = check_slots(prefix, wheel, now, now)", "bad = nil"),
    ],
    "reclaim scan (ZRANGE of expired leases)": [
        (
            "local expired = redis.call('ZRANGE', reserved, '-inf', now, 'BYSCORE', 'LIMIT', 0,"
            " max_reclaim)",
            "local expired = {}",
        ),
    ],
    "body read (HMGET of header and body -> HGET)": [
        (
            "  local got = redis.call('HMGET', bucket_of(prefix, id), id, body_field(id))\n"
            "  return got[1], got[2]",
            "  return redis.call('HGET', bucket_of(prefix, id), id), 'x'",
        ),
    ],
    "fencing counter (INCRBY)": [
        ("local first_token = redis.call('INCRBY', seq, #due) - #due", "local first_token = 0"),
    ],
    "header rewrite (new attempt and token: string work + HSET)": [
        (
            "local header, ttr = leased_header(raw, first_token + i)",
            "local header, ttr = raw, 0",
        ),
        ("        redis.call('HSET', bucket_of(prefix, id), id, header)\n", ""),
    ],
    "header rewrite: its HSET alone": [
        ("        redis.call('HSET', bucket_of(prefix, id), id, header)\n", ""),
    ],
    "header rewrite: its string work alone": [
        (
            "local header, ttr = leased_header(raw, first_token + i)",
            "local header, ttr = raw, 0",
        ),
    ],
    "next wake-up (schedule head, first lease)": [
        (
            "local next_due = not paused and schedule_head(prefix, wheel) or nil\n"
            "local next_lease = first_lease_deadline(reserved)",
            "local next_due, next_lease = nil, nil",
        ),
    ],
}

ACK_PARTS: dict[str, Cut] = {
    "type checks": [
        (
            "local bad = check_types({ [reserved] = 'zset', [errors] = 'hash' }) or "
            "load_buckets(prefix)",
            "local bad = load_buckets(prefix)",
        ),
    ],
    "token read (HGET of the header)": [
        (
            "  headers[#ids] = read_header(prefix, ARGV[i])",
            "  headers[#ids] = '0,' .. ARGV[i + 1] .. ',0,0,0,0'",
        ),
    ],
    "lease removal (a ZREM per task)": [
        ("redis.call('ZREM', reserved, id) == 1", "true"),
    ],
    "body field delete (HDEL of 2 fields -> 1)": [
        (
            "redis.call('HDEL', bucket_of(prefix, id), id, body_field(id))",
            "redis.call('HDEL', bucket_of(prefix, id), id)",
        ),
    ],
    "last errors cleared (HDEL of the batch)": [
        ("  redis.call('HDEL', errors, unpack(done))\n", ""),
    ],
}


def cut(source: str, script: str, part: Cut) -> str:
    """``source`` with each replacement of ``part`` applied once."""
    for old, new in part:
        if source.count(old) != 1:
            raise SystemExit(f"{script}.lua changed: {old!r} is not there once; update the parts")
        source = source.replace(old, new)
    return source


def variants() -> dict[str, tuple[str, str]]:
    """Variant name -> (reserve source, ack source)."""
    reserve, ack = lua_source("reserve"), lua_source("ack")
    return {
        "shipped": (reserve, ack),
        **{
            f"reserve without {p}": (cut(reserve, "reserve", c), ack)
            for p, c in RESERVE_PARTS.items()
        },
        **{f"ack without {p}": (reserve, cut(ack, "ack", c)) for p, c in ACK_PARTS.items()},
    }


def evalsha_usec(client: redis.Redis) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha", {"usec": 0})
    return float(stats["usec"])


async def fill(url: str, topic: str, n: int) -> TopicKeys:
    """``n`` ready tasks with a 20-byte payload (as the benchmark's) in a new topic."""
    async with Queue.from_url(url, name="parts") as queue:
        await queue.send_many(topic, [{"payload": "x" * 20, "due": 0}] * n, batch_size=1000)
        return queue.keys(topic)


def one_round(
    client: redis.Redis, url: str, shas: tuple[str, str], topic: str, n: int
) -> tuple[float, float]:
    """Fill, lease all, ack all: µs inside EVALSHA per task of the lease and the ack phase."""
    keys = asyncio.run(fill(url, topic, n))
    reserve_sha, ack_sha = shas
    reserve_args, ack_args = reserve_keys(keys), ack_keys(keys)
    client.config_resetstat()
    batches: list[list[str]] = []
    while True:
        reply: Any = client.evalsha(
            reserve_sha, len(reserve_args), *reserve_args, BATCH, BATCH, LEASE_MS, 5
        )
        items = reply[3:]
        if not items:
            break
        batch: list[str] = []
        for i in range(0, len(items), 2):
            batch += [items[i].decode(), Envelope.parse(items[i + 1]).token]
        batches.append(batch)
    leased = evalsha_usec(client)
    client.config_resetstat()
    for batch in batches:
        client.evalsha(ack_sha, len(ack_args), *ack_args, keys.wake, *batch)
    acked = evalsha_usec(client)
    return leased / n, acked / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--n", type=int, default=10_000, help="tasks per round and variant")
    args = parser.parse_args()
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    try:
        scripts = variants()
        shas = {
            name: (client.script_load(reserve), client.script_load(ack))
            for name, (reserve, ack) in scripts.items()
        }
        lease: dict[str, list[float]] = {name: [] for name in scripts}
        ack: dict[str, list[float]] = {name: [] for name in scripts}
        for round_no in range(args.rounds):
            for number, name in enumerate(scripts):
                got = one_round(client, server.url, shas[name], f"t{round_no}.{number}", args.n)
                lease[name].append(got[0])
                ack[name].append(got[1])
    finally:
        client.close()
        server.stop()
    print(
        f"µs inside EVALSHA per task over {args.rounds} rounds of {args.n:,} tasks (calls of {BATCH}):"
    )
    print(f"  {'':<78}{'min':>7}{'saves':>7}{'median':>8}{'saves':>7}")
    for phase, figures, prefix in (("lease", lease, "reserve"), ("ack", ack, "ack")):
        base_low, base_mid = min(figures["shipped"]), statistics.median(figures["shipped"])
        print(f"  {'shipped ' + phase:<78}{base_low:7.2f}{'':7}{base_mid:8.2f}")
        for name in (name for name in scripts if name.startswith(f"{prefix} without")):
            low, mid = min(figures[name]), statistics.median(figures[name])
            print(f"  {name:<78}{low:7.2f}{base_low - low:7.2f}{mid:8.2f}{base_mid - mid:7.2f}")
    emit(
        {"rounds": args.rounds, "n": args.n, "lease_usec_per_task": lease, "ack_usec_per_task": ack}
    )


if __name__ == "__main__":
    main()
