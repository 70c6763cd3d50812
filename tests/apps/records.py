"""Where the apps' handlers record their deliveries, so a test in another process can
read them back from Redis.  Keys sit outside delayq's ``delayq:`` namespace.

- ``handled_key``  HASH  task id -> number of completed runs (duplicates show as > 1)
- ``events_key``   LIST  ``"<event> <task id> <attempt>"`` with event ``started``/``finished``
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis.asyncio import Redis


def handled_key(queue_name: str) -> str:
    """The hash of completed runs per task id for queue ``queue_name``."""
    return f"delayq-test:{queue_name}:handled"


def events_key(queue_name: str) -> str:
    """The list of handler start/finish events for queue ``queue_name``."""
    return f"delayq-test:{queue_name}:events"


async def handled(redis: Redis, queue_name: str) -> dict[str, int]:
    """Completed runs per task id."""
    raw = await redis.hgetall(handled_key(queue_name))
    return {_text(k): int(v) for k, v in raw.items()}


async def events(redis: Redis, queue_name: str) -> list[tuple[str, str, int]]:
    """The recorded ``(event, task id, attempt)`` triples, oldest first."""
    out = []
    for item in await redis.lrange(events_key(queue_name), 0, -1):
        event, task_id, attempt = _text(item).split(" ")
        out.append((event, task_id, int(attempt)))
    return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
