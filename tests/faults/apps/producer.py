"""A producer process for the clock scenario: ``python -m tests.faults.apps.producer COUNT
MIN_DELAY MAX_DELAY LONG OUT`` sends COUNT tasks to the ``work`` topic of
``$DELAYQ_FAULT_QUEUE`` with random delays, and writes one JSON line per task to OUT: its
id, the delay, the real clock just before and just after ``send_delayed``, and the
process's ``time.time()`` offset from it.  The first
LONG tasks log their handler's clock offset and then run for 1.5 s.  Run it under
apps/shifted.py to give it a wrong clock.
"""

import asyncio
import json
import os
import random
import sys
import time

from delayq import Queue
from tests.faults.apps.plan import WORK_TOPIC, real_now

LONG_PLAN = {"1": [["clock"], ["sleep", 1500]]}


async def produce(count: int, low: float, high: float, long: int, out: str) -> None:
    """Send the tasks one after the other and record them."""
    rng = random.Random(8)
    queue = Queue.from_url(os.environ["REDIS_URL"], name=os.environ["DELAYQ_FAULT_QUEUE"])
    try:
        with open(out, "w", encoding="utf-8") as records:
            for i in range(count):
                task_id, delay = f"clock-{i:05d}", rng.uniform(low, high)
                before = real_now()
                body = {"i": i, "plan": LONG_PLAN if i < long else {}}
                await queue.send_delayed(WORK_TOPIC, body, delay, task_id=task_id)
                after = real_now()
                record = {"id": task_id, "delay": delay, "before": before, "after": after,
                          "offset": time.time() - after}  # fmt: skip
                records.write(json.dumps(record) + "\n")
    finally:
        await queue.close()


if __name__ == "__main__":
    count, low, high, long, out = sys.argv[1:]
    asyncio.run(produce(int(count), float(low), float(high), int(long), out))
