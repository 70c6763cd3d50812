"""What ``Queue.groups`` costs Redis, by number of groups: ``python -m benchmarks.groups_view``.

A private redis-server; one topic whose groups each hold 10 waiting tasks (5 due), half
of the groups in ``grp:ring`` and half in ``grp:wait``, a third with leases and a rate
window, under ``group_max_running=5`` and ``group_rate_limit=100/s`` (the keys written
as the core's ``_groups.lua`` lays them out, so that 10,000 groups take seconds to set up,
not a send each).  The visit cap is lifted to time the script per group.  Prints Redis's
own time per ``groups.lua`` call (``INFO commandstats``, evalsha), the median of 5 rounds
of 10 calls of ``Queue.groups(topic, limit=20)``.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import delayq.group_stats
from delayq import Queue
from delayq.testing import PrivateRedis

SIZES = (100, 1_000, 2_000, 10_000)


async def main() -> None:
    delayq.group_stats.MAX_GROUPS_VISITED = 100_000
    with PrivateRedis() as server:
        queue = Queue.from_url(server.url, name="bench")
        keys = queue.keys("t")
        await queue.redis.hset(
            keys.controls, mapping={"group_max_running": "5", "group_rate_limit": "100/s"}
        )
        now = int(time.time() * 1000)
        base = keys.prefix + "grp:"
        done = 0
        for groups in SIZES:
            pipe = queue.redis.pipeline(transaction=False)
            for n in range(done, groups):
                group = f"tenant-{n:05d}"
                tasks = {f"{group}-{i}": now - 1000 if i < 5 else now + 600_000 for i in range(10)}
                pipe.zadd(f"{base}q:{group}", tasks)  # type: ignore[arg-type]
                pipe.zadd(base + ("wait" if n % 2 else "ring"), {group: n})
                if n % 3 == 0:
                    pipe.hset(base + "run", group, 2)
                    pipe.hset(f"{base}starts:{group}", mapping={"g": 50, str(now // 50): 3})
            await pipe.execute()
            done = groups
            await queue.groups("t")
            rounds = []
            for _ in range(5):
                await queue.redis.config_resetstat()
                for _ in range(10):
                    await queue.groups("t", limit=20)
                stats = await queue.redis.info("commandstats")
                rounds.append(float(stats["cmdstat_evalsha"]["usec_per_call"]))
            median = statistics.median(rounds)
            print(f"groups={groups:6d}  redis ms/call={median / 1000:7.2f}  "
                  f"us/group={median / groups:5.1f}")  # fmt: skip
        await queue.close()


if __name__ == "__main__":
    asyncio.run(main())
