"""What a cluster call retries: redis-py's disconnect race, but never delayq's own bugs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.connection import Connection

from delayq import Queue
from delayq.redis.cluster import is_disconnect_race, run_command
from delayq.redis.scripts import Scripts


@pytest.fixture
async def cq(cluster: Any, queue_name: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    yield queue
    await queue.close()


def delayq_bug() -> AttributeError:
    """An AttributeError raised by delayq's own code (a client that is ``None``)."""
    try:
        Scripts(None)  # type: ignore[arg-type]
    except AttributeError as exc:
        return exc
    raise AssertionError("Scripts(None) did not fail")


async def redis_py_race() -> AttributeError:
    """The AttributeError redis-py raises reading from a connection whose stream is gone
    (what its cluster client runs into when a connection is disconnected under a call)."""
    try:
        await Connection(port=1).read_response()
    except AttributeError as exc:
        return exc
    raise AssertionError("redis-py's read on no stream did not raise AttributeError")


async def test_only_redis_pys_race_counts_as_one() -> None:
    assert is_disconnect_race(await redis_py_race())
    assert not is_disconnect_race(delayq_bug())
    assert not is_disconnect_race(AttributeError("raised here"))


async def test_an_attribute_error_from_delayqs_code_is_not_retried(cq: Queue) -> None:
    calls = 0

    async def buggy() -> None:
        nonlocal calls
        calls += 1
        raise delayq_bug()

    with pytest.raises(AttributeError, match="register_script"):
        await run_command(cq.redis, buggy)
    assert calls == 1


async def test_redis_pys_race_is_retried_on_a_cluster(cq: Queue) -> None:
    race = await redis_py_race()
    calls = 0

    async def racing_once() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise race
        return "sent"

    assert await run_command(cq.redis, racing_once) == "sent"
    assert calls == 2
