"""Fixtures of the fault suite: throw-away servers, worker subprocesses, proxies, the log.

Every process and proxy a test starts is killed at teardown, whatever the test did to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delayq import Queue
from tests.faults.harness import WorkerProc
from tests.faults.proxy import FaultProxy
from tests.redis_server import RedisServer

SpawnWorker = Callable[..., WorkerProc]


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

    def spawn(server: RedisServer, *, url: str | None = None, **options: Any) -> WorkerProc:
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
def make_proxy() -> Iterator[Callable[[RedisServer], FaultProxy]]:
    """``make_proxy(server)`` -> a started FaultProxy in front of ``server``."""
    proxies: list[FaultProxy] = []

    def make(server: RedisServer) -> FaultProxy:
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
