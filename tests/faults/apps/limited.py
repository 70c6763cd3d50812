"""The app of the limits figures: ``delayq worker tests.faults.apps.limited:queue``.

One topic, ``work``, with the options in ``$DELAYQ_FAULT_LIMITS`` (JSON, as for the
recorder: ``{"work": {"rate_limit": "200/s", "max_running": 3}}``) and the lease length
``$DELAYQ_FAULT_TTR``.  Its handler sleeps ``$DELAYQ_FAULT_SLEEP_MS`` and appends JSON
lines to ``$DELAYQ_FAULT_LOG/<pid>.jsonl``: a ``start`` line when it begins and an ``end``
line when it returns, each with the real clock (``CLOCK_REALTIME``, Redis's clock on this
host), and on the ``end`` line the moment its lease began on Redis's clock (the lease
deadline ``get()`` reports, less the TTR: what the rate limit counts).  Each line also
holds the task's group; with ``$DELAYQ_FAULT_LEASE_AT_START`` set, the ``start`` line holds
the lease deadline too (read with ``get()`` as the handler begins), so that a checker can
tell an overlap of a killed attempt's expired lease from a broken group cap.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from delayq import Queue, Task
from tests.faults.apps.plan import WORK_TOPIC, real_now

env = os.environ
queue = Queue.from_url(env["REDIS_URL"], name=env["DELAYQ_FAULT_QUEUE"])
TTR = float(env.get("DELAYQ_FAULT_TTR", "5"))
SLEEP_S = float(env.get("DELAYQ_FAULT_SLEEP_MS", "0")) / 1000
LOG = Path(env["DELAYQ_FAULT_LOG"]) / f"{os.getpid()}.jsonl"
LEASE_AT_START = bool(env.get("DELAYQ_FAULT_LEASE_AT_START"))
OPTIONS: dict[str, Any] = json.loads(env.get("DELAYQ_FAULT_LIMITS", "{}")).get(WORK_TOPIC, {})


def write(line: dict[str, Any]) -> None:
    with LOG.open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@queue.topic(WORK_TOPIC, ttr=TTR, max_attempts=50, **OPTIONS)
async def work(body: dict[str, Any], task: Task) -> None:
    start = real_now()
    mine = {"id": task.id, "attempt": task.attempt, "pid": os.getpid(), "priority": task.priority,
            "token": int(task.token), "group": task.group}  # fmt: skip
    if LEASE_AT_START:
        held = await queue.get(WORK_TOPIC, task.id)
        lease = held.lease_deadline if held is not None else None
        mine["deadline"] = lease.timestamp() if lease is not None else None
    write({**mine, "event": "start", "at": start})
    if SLEEP_S:
        await asyncio.sleep(SLEEP_S)
    end = real_now()
    info = await queue.get(WORK_TOPIC, task.id)
    deadline = info.lease_deadline if info is not None else None
    leased = deadline.timestamp() - TTR if deadline is not None else None
    write({**mine, "event": "end", "at": end, "start": start, "leased": leased})
