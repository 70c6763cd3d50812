"""Serving the app alone with uvicorn: what ``delayq web`` runs."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import TYPE_CHECKING

import uvicorn

from delayq.web.app import create_app

if TYPE_CHECKING:
    from collections.abc import Iterator

    from delayq.queue import Queue
    from delayq.web.auth import Tokens

log = logging.getLogger("delayq.web")

GRACEFUL_STOP = 10
"""Seconds requests in flight (a long poll waits up to 30) get after SIGTERM/SIGINT.  A
long poll cut short may have leased tasks it could not hand over: their leases expire
after their TTR and they are delivered again."""


class _Server(uvicorn.Server):
    """uvicorn's server, but a signal ends ``serve()`` normally: uvicorn raises the signal
    again after its graceful stop, which would end the process before ``delayq web``
    closes its queue."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


async def serve(
    queue: Queue,
    tokens: Tokens,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    access_log: bool = True,
) -> None:
    """Serve ``queue``'s API and dashboard until SIGINT/SIGTERM, then stop gracefully."""
    if tokens.anonymous_read:
        log.warning(
            "no token configured: the API is read-only and reads need no token "
            "(give --token-file or $DELAYQ_WEB_TOKENS to allow writes)"
        )
    config = uvicorn.Config(
        create_app(queue, tokens), host=host, port=port, access_log=access_log,
        log_config=None, lifespan="off", server_header=False,
        timeout_graceful_shutdown=GRACEFUL_STOP,
    )  # fmt: skip
    await _Server(config).serve()
