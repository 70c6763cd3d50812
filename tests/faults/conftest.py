"""Fixtures of the fault suite: throw-away servers, worker subprocesses, proxies, the log.

Every process and proxy a test starts is killed at teardown, whatever the test did to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from delayq import Queue
from delayq.redis.keys import TopicKeys, topics_key
from delayq.testing import PrivateRedis
from tests.faults.harness import WorkerProc
from tests.faults.proxy import FaultProxy
from tests.helpers import RECOUNT

SpawnWorker = Callable[..., WorkerProc]


FAULTS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/faults/ is in the ``faults`` tier (left out by ``--quick``)."""
    for item in items:
        if item.path.is_relative_to(FAULTS_DIR):
            item.add_marker(pytest.mark.faults)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "no_recount(reason): the scenario leaves no topic to recount (say why)"
    )


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """The delivery log directory (one file per worker process)."""
    path = tmp_path / "deliveries"
    path.mkdir()
    return path


@pytest.fixture
def spawn_worker(log_dir: Path, queue_name: str) -> Iterator[SpawnWorker]:
    """``spawn_worker(server, url=..., concurrency=..., ...)`` -> an unstarted WorkerProc;
    call ``.start()`` or ``await .started()``.  All are SIGKILLed at teardown."""
    procs: list[WorkerProc] = []
    admins: list[Any] = []

    def spawn(server: PrivateRedis, *, url: str | None = None, **options: Any) -> WorkerProc:
        admin = server.client()
        admins.append(admin)
        proc = WorkerProc(url or server.url, queue_name, log_dir, admin, **options)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.close()
    for admin in admins:
        admin.close()


@pytest.fixture
def make_proxy() -> Iterator[Callable[[PrivateRedis], FaultProxy]]:
    """``make_proxy(server)`` -> a started FaultProxy in front of ``server``."""
    proxies: list[FaultProxy] = []

    def make(server: PrivateRedis) -> FaultProxy:
        proxy = FaultProxy(server.port).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
async def make_queue(queue_name: str) -> AsyncIterator[Callable[..., Queue]]:
    """``make_queue(url, **options)`` -> a Queue named ``queue_name``, closed at teardown."""
    queues: list[Queue] = []

    def make(url: str, **options: Any) -> Queue:
        queue = Queue.from_url(url, name=queue_name, **options)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        await queue.close()


@pytest.fixture(autouse=True)
def counts_stay_exact(
    request: pytest.FixtureRequest, make_redis_server: Any, queue_name: str
) -> Iterator[None]:
    """After every scenario: on each server it made that still answers, the scheduled count
    the scripts keep for each topic of the test's queue equals a full recount (one atomic
    script, so workers may still be running).

    A scenario that made servers must leave at least one topic to compare (so that a test
    whose queue is named otherwise, or whose servers all end down, cannot skip the check
    unnoticed); one that cannot says why with ``@pytest.mark.no_recount(reason)``.
    """
    yield
    checked = sum(
        check_counts(server, queue_name) for server in make_redis_server.servers if server.running
    )
    request.node.user_properties.append(("counts_checked", checked))
    exempt = request.node.get_closest_marker("no_recount")
    if make_redis_server.servers and not checked and exempt is None:
        pytest.fail(
            f"no topic of queue {queue_name!r} was left to recount on the "
            f"{len(make_redis_server.servers)} server(s) this scenario made "
            "(mark it no_recount(reason) if that is its point)"
        )


def check_counts(server: PrivateRedis, queue_name: str) -> int:
    """Assert the kept count of every topic of ``queue_name`` on ``server`` is exact;
    return how many topics were compared (0: the server did not answer)."""
    with server.client(socket_timeout=2) as client:
        try:
            topics = {m.decode() for m in client.smembers(topics_key(queue_name))}
            pattern = f"delayq:{{{queue_name}:*}}:meta"
            for key in client.scan_iter(match=pattern, count=1000):
                topics.add(key.decode()[len(f"delayq:{{{queue_name}:") : -len("}:meta")])
            # Shards k >= 1 of sharded topics keep their own counts (docs/cluster.md).
            prefixes = [TopicKeys.build(queue_name, topic).prefix for topic in sorted(topics)]
            for key in client.scan_iter(match=f"delayq:s:{{{queue_name}:*}}:meta", count=1000):
                prefixes.append(key.decode().removesuffix("meta"))
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return 0  # left paused, down, or locked by the scenario: nothing to compare
        for prefix in prefixes:
            kept, counted = client.eval(RECOUNT, 1, prefix)
            assert int(kept or 0) == counted, f"{prefix}: count kept {kept}, recounted {counted}"
        return len(topics)
