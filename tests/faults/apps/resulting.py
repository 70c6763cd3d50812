"""A fault-suite app whose topic keeps results: ``delayq worker tests.faults.apps.resulting:queue``.

Configured by ``REDIS_URL``, ``DELAYQ_FAULT_QUEUE`` and ``DELAYQ_FAULT_TTR``.  The handler
of ``RESULT_TOPIC`` hangs on a task's first attempt when its body asks for it (so that the
test can kill the worker holding it), and returns which attempt and process ran it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from delayq import Queue, Task

RESULT_TOPIC = "results"

queue = Queue.from_url(os.environ["REDIS_URL"], name=os.environ["DELAYQ_FAULT_QUEUE"])


@queue.topic(RESULT_TOPIC, results=600, ttr=float(os.environ.get("DELAYQ_FAULT_TTR", "5")))
async def run(body: dict[str, Any], task: Task) -> dict[str, Any]:
    if body.get("hang_first") and task.attempt == 1:
        await asyncio.sleep(3600)
    return {"n": body["n"], "attempt": task.attempt, "pid": os.getpid()}
