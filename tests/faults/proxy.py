"""A loopback TCP proxy that injects network faults between Redis clients and a server.

The proxy runs its own asyncio loop in a daemon thread, so a test may block (``time.sleep``,
``subprocess.wait``) without stalling the traffic it relays, and worker subprocesses can
connect through it while the test's own loop is busy.  Every public method is thread-safe.

Faults it injects::

    pause() / resume()      stop forwarding in both directions (bytes queue up), then go on
    slow(ms)                hold every chunk ``ms`` milliseconds before forwarding it (order kept)
    cut()                   abort every open connection at once (clients see a reset)
    cut_next("request")     abort the next connection that sends a request, before forwarding
                            it: Redis never sees the command
    cut_next("reply")       forward the next request, then abort that connection when the
                            reply arrives, dropping it: Redis executed the command, the client
                            never learns the outcome

Only 127.0.0.1 is ever bound or connected to.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

__all__ = ["CutPoint", "FaultProxy"]

CutPoint = Literal["request", "reply"]
_T = TypeVar("_T")
_CHUNK = 64 * 1024
_LOOPBACK = "127.0.0.1"


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream connection to Redis."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    cut_on_reply: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.server):
            writer.transport.abort()


@dataclass
class ProxyStats:
    """What the proxy did so far (for assertions that a fault really happened)."""

    connections: int = 0
    cuts: int = 0
    cut_requests: int = 0
    cut_replies: int = 0


class FaultProxy:
    """Relay ``127.0.0.1:<port>`` to a Redis on ``127.0.0.1:target_port``, with faults on demand.

    Use as a context manager, or call :meth:`start` and :meth:`close`.

    Args:
        target_port: the redis-server's port on 127.0.0.1.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.stats = ProxyStats()
        self._latency = 0.0
        self._armed: list[CutPoint] = []
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._forwarding: asyncio.Event | None = None
        self._server: asyncio.Server | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Start listening on a free loopback port (see :attr:`port`)."""
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        self._forwarding = asyncio.Event()
        self._forwarding.set()
        self._server = await asyncio.start_server(self._accept, _LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop listening, drop every connection and stop the proxy's thread.  Idempotent."""
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._cut_all()
        tasks = [task for link in self._links for task in link.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def url(self, *, db: int = 0, auth: str = "") -> str:
        """A ``redis://`` URL through the proxy (``auth`` like ``"user:pw@"``)."""
        return f"redis://{auth}{_LOOPBACK}:{self.port}/{db}"

    # -- faults ------------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop forwarding in both directions; connections stay open and bytes queue up."""
        self._loop.call_soon_threadsafe(self._set_forwarding, False)

    def resume(self) -> None:
        """Forward again (undo :meth:`pause`); queued bytes go out in order."""
        self._loop.call_soon_threadsafe(self._set_forwarding, True)

    def slow(self, ms: float) -> None:
        """Hold every chunk ``ms`` milliseconds before forwarding it (0 = no added latency)."""
        self._latency = ms / 1000

    def cut(self) -> int:
        """Abort every open connection now.  Returns how many were cut."""
        return self._call(self._cut_now())

    def cut_next(self, point: CutPoint, count: int = 1) -> None:
        """Arm ``count`` one-shot cuts at ``point`` (see the module docstring)."""
        self._loop.call_soon_threadsafe(self._armed.extend, [point] * count)

    def disarm(self) -> int:
        """Forget armed cuts that have not fired.  Returns how many were pending."""
        return self._call(self._disarm())

    @property
    def armed(self) -> int:
        """Cuts armed and not yet fired."""
        return len(self._armed)

    @property
    def open_connections(self) -> int:
        """Client connections currently relayed."""
        return len(self._links)

    # -- relaying ----------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def _set_forwarding(self, on: bool) -> None:
        assert self._forwarding is not None
        if on:
            self._forwarding.set()
        else:
            self._forwarding.clear()

    async def _cut_now(self) -> int:
        return self._cut_all()

    async def _disarm(self) -> int:
        pending = len(self._armed)
        self._armed.clear()
        return pending

    def _cut_all(self) -> int:
        links = list(self._links)
        for link in links:
            link.abort()
        self.stats.cuts += len(links)
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(_LOOPBACK, self.target_port)
        except OSError:
            writer.transport.abort()  # Redis is down: the client sees its connection reset
            return
        link = _Link(client=writer, server=up_writer)
        self._links.add(link)
        self.stats.connections += 1
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer, upstream=True)),
            asyncio.create_task(self._pump(link, up_reader, writer, upstream=False)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        self._links.discard(link)

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        """Copy one direction, chunk by chunk; reading goes on while a chunk is held, so that
        latency delays bytes without throttling a pipelined stream."""
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send_held(link, held, writer))
        try:
            while chunk := await reader.read(_CHUNK):
                if not self._admit(link, upstream):
                    return
                held.put_nowait((time.monotonic() + self._latency, chunk))
            held.put_nowait((0.0, b""))  # EOF marker: close after the held bytes
            await sender
        except (ConnectionError, OSError):
            pass
        finally:
            if not sender.done():
                sender.cancel()
            link.abort()

    def _admit(self, link: _Link, upstream: bool) -> bool:
        """Decide whether a chunk goes through, firing an armed cut.  False = connection cut."""
        if upstream and self._armed:
            point = self._armed.pop(0)
            if point == "request":
                self.stats.cut_requests += 1
                self.stats.cuts += 1
                link.abort()
                return False
            link.cut_on_reply = True
        elif not upstream and link.cut_on_reply:
            self.stats.cut_replies += 1
            self.stats.cuts += 1
            link.abort()
            return False
        return True

    async def _send_held(
        self, link: _Link, held: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        assert self._forwarding is not None
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                release, chunk = await held.get()
                if not chunk:
                    writer.write_eof()
                    return
                wait = release - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._forwarding.wait()
                writer.write(chunk)
                await writer.drain()
