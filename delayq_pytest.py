"""delayq's pytest plugin, registered through the ``pytest11`` entry point: installing
delayq gives a test suite these fixtures.

- ``delayq_redis`` (session): a private redis-server on a free loopback port, started
  when a test first asks for it;
- ``delayq_redis_url`` (function): its URL, emptied (``FLUSHALL``, which also sets every
  queue's clock back to the real time) before the test, so tests do not see each other's
  tasks or time.

pytest imports this module in every suite where delayq is installed, so it imports only
pytest: delayq, redis-py and pydantic are imported when a test first asks for a fixture.
That is also why it sits outside the ``delayq`` package, whose ``__init__`` imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from delayq.testing.server import PrivateRedis


@pytest.fixture(scope="session")
def delayq_redis() -> Iterator[PrivateRedis]:
    """The session's private redis-server (``.url``)."""
    from delayq.testing.server import PrivateRedis

    server = PrivateRedis().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def delayq_redis_url(delayq_redis: PrivateRedis) -> str:
    """The URL of the session's private Redis, empty and on the real time for this test."""
    import redis

    from delayq.redis.source import stop_test_clock

    stop_test_clock()  # production's scripts, until the test runs run_due
    with redis.Redis.from_url(delayq_redis.url) as client:
        client.flushall()
    return delayq_redis.url
