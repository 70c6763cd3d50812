"""Serving the app alone with uvicorn: what ``delayq web`` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from typing import TYPE_CHECKING

import uvicorn

from delayq.web.app import create_app
from delayq.worker.heartbeat import DEFAULT_INTERVAL, Heartbeat, heartbeat_seconds

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import FrameType

    from delayq.queue import Queue
    from delayq.web.auth import Tokens

log = logging.getLogger("delayq.web")

GRACEFUL_STOP = 10
"""Seconds requests in flight get after SIGTERM/SIGINT.  Long polls end at once (with no
task; one cut while it leased leaves its tasks to be delivered again after their TTR)."""
EXIT_CHECK = 0.1
"""Seconds between looks at whether uvicorn was asked to stop (uvicorn's own interval)."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stopped_by_signals(server: uvicorn.Server) -> Iterator[None]:
    """SIGINT and SIGTERM stop ``server`` and let ``serve()`` return normally.

    uvicorn handles both signals while it serves, and after its graceful stop raises the
    one it got again, for the handler that was in place before: this one, which only asks
    the server to stop (again), so that ``delayq web`` goes on to close its queue and
    exits 0.  It also covers a signal that arrives before uvicorn installed its own.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(sig: int, _frame: FrameType | None) -> None:
        log.debug("stopping on signal %d", sig)
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def serve(
    queue: Queue,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    access_log: bool = True,
    heartbeat: float = DEFAULT_INTERVAL,
) -> None:
    """Serve ``queue``'s API and dashboard until SIGINT/SIGTERM, then stop gracefully.

    The process is listed by ``Queue.workers()`` as kind ``"http"`` (it serves HTTP
    consumers), with the topics registered in it, for as long as it serves.
    """
    if tokens.anonymous_read:
        log.warning(
            "no token configured: the API is read-only and reads need no token "
            "(give --token-file or $DELAYQ_WEB_TOKENS to allow writes)"
        )
    stopping = asyncio.Event()
    config = uvicorn.Config(
        create_app(queue, tokens, stopping=stopping), host=host, port=port, access_log=access_log,
        log_config=None, lifespan="off", server_header=False,
        timeout_graceful_shutdown=GRACEFUL_STOP,
    )  # fmt: skip
    server = uvicorn.Server(config)
    with stopped_by_signals(server):
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(_end_long_polls(server, stopping))
            beating = group.create_task(http_heartbeat(queue, heartbeat).run(stopping))
            await server.serve()
            watcher.cancel()
            stopping.set()
            await beating  # leaves the registry


def http_heartbeat(queue: Queue, interval: float) -> Heartbeat:
    """The registry heartbeat of a process serving ``queue``'s HTTP consumers."""
    return Heartbeat(
        queue.registry, kind="http", topics=sorted(queue.topics), concurrency=0,
        running=lambda: 0, interval=heartbeat_seconds(interval),
    )  # fmt: skip


async def _end_long_polls(server: uvicorn.Server, stopping: asyncio.Event) -> None:
    """Set ``stopping`` once ``server`` is asked to stop (``should_exit``, which uvicorn
    itself looks at this often), so that long polls do not hold up the graceful stop."""
    # A look, not an event: ``should_exit`` is the stop uvicorn's public API exposes.
    while not server.should_exit:  # noqa: ASYNC110
        await asyncio.sleep(EXIT_CHECK)
    stopping.set()
