"""Serving the app alone with uvicorn: what ``delayq web`` runs."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from typing import TYPE_CHECKING, Any, cast

import uvicorn

from delayq.web.app import create_app

if TYPE_CHECKING:
    import asyncio
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


class CorkedTransport:
    """A transport whose writes made in one step of the event loop leave as one.

    uvicorn writes a response's head and its body separately: two system calls, and two
    TCP segments the client wakes for, per request of the API's hot path.  Held until the
    response is complete (:meth:`flush`, see :func:`http_protocol`) or the end of the loop
    step (``call_soon``), whichever comes first, and joined, they are one.  Everything but
    writing is the wrapped transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        """Send what is held now (a response is complete: nothing more of it will come)."""
        self._flush()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:
        # Defined, not left to __getattr__: uvicorn asks once per response, and a name
        # found only by __getattr__ costs an AttributeError raised and caught first.
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def http_protocol() -> type[asyncio.Protocol] | str:
    """uvicorn's httptools protocol on a :class:`CorkedTransport` (its default, "auto",
    without httptools)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover (the web extra installs httptools)
        return "auto"

    class Corked(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.corked = CorkedTransport(cast("asyncio.Transport", transport), self.loop)
            super().connection_made(cast("asyncio.Transport", self.corked))

        def on_response_complete(self) -> None:
            # The response's last byte is written: send it now rather than at the next
            # step of the loop (one poll of the loop later), so that the client has it
            # while the request's task unwinds.
            self.corked.flush()
            super().on_response_complete()

    return Corked


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
        log_config=None, lifespan="off", server_header=False, http=http_protocol(),
        timeout_graceful_shutdown=GRACEFUL_STOP,
    )  # fmt: skip
    await _Server(config).serve()
