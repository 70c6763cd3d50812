"""A periodic topic for the fault suite: ``delayq worker tests.faults.apps.ticker:queue``.

Configured by ``REDIS_URL``, ``DELAYQ_FAULT_QUEUE``, ``DELAYQ_FAULT_LOG`` and optionally
``DELAYQ_FAULT_EVERY`` (seconds, default 0.2).  Every tick appends a ``done`` line to
``<log dir>/<pid>.log`` (format in tests/faults/checker.py): its id, the real time it ran
and its due time (the tick's time).
"""

from __future__ import annotations

import os
from pathlib import Path

from delayq import Queue, Task
from tests.faults.apps.plan import real_now
from tests.faults.checker import Delivery, append

TICK_TOPIC = "tick"
EVERY = float(os.environ.get("DELAYQ_FAULT_EVERY", "0.2"))

queue = Queue.from_url(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:1/0"),
    name=os.environ.get("DELAYQ_FAULT_QUEUE", "ticker"),
)


@queue.periodic(TICK_TOPIC, every=EVERY, catch_up="all", ttr=5)
async def tick(task: Task) -> None:
    """Log the tick."""
    log = Path(os.environ["DELAYQ_FAULT_LOG"]) / f"{os.getpid()}.log"
    append(
        log,
        Delivery(task.id, real_now(), task.due_at.timestamp(), task.attempt, os.getpid(), "done"),
    )
