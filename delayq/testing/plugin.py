"""delayq's pytest plugin, registered through the ``pytest11`` entry point: installing
delayq gives a test suite these fixtures.

- ``delayq_redis`` (session): a private redis-server on a free loopback port, started
  when a test first asks for it, its clock movable by :func:`delayq.testing.run_due`;
- ``delayq_redis_url`` (function): its URL, emptied (``FLUSHALL``) and its clock set back
  to the real time before the test, so tests do not see each other's tasks or time.

Nothing is started, and nothing but pytest and redis-py is imported, unless a test asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import redis

from delayq.testing import due
from delayq.testing.server import PrivateRedis

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(scope="session")
def delayq_redis() -> Iterator[PrivateRedis]:
    """The session's private redis-server (``.url``; ``.clock`` moves its time)."""
    server = PrivateRedis().start()
    due.register(server)
    try:
        yield server
    finally:
        due.unregister(server)
        server.close()


@pytest.fixture
def delayq_redis_url(delayq_redis: PrivateRedis) -> str:
    """The URL of the session's private Redis, empty and on the real time for this test."""
    if delayq_redis.clock is not None:
        delayq_redis.clock.reset()
    with redis.Redis.from_url(delayq_redis.url) as client:
        client.flushall()
    return delayq_redis.url
