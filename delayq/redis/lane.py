"""The script lane: one connection that runs delayq's scripts with the least Python per call.

A send awaited one by one is a round trip to Redis and back, and on a small host the
client's own work per command is as large as Redis's.  redis-py's asyncio client spends
it on a lock, stream reads and a parser per command; in the benchmark's ceiling a bare
``EVALSHA 'return 1'`` loop through redis-py ran at 0.83-0.87x of the same loop on this
module's connection, and a one-by-one ``send_delayed`` on it at 0.81-0.83x of
redis-py's ``return 1`` (0.58-0.68x before, on a held redis-py connection).

The lane is an :class:`asyncio.Protocol` feeding a ``hiredis.Reader``: a call packs its
command with hiredis, writes it and awaits a future that ``data_received`` resolves in
order.  Calls pipeline: any number may be in flight, answered in the order sent, so a
call cancelled by its caller leaves the connection usable (its reply is read and
dropped).

What it does not do itself is left to redis-py, so the two cannot disagree:

* **Connecting.**  The connection is opened by the pool's own connection class, with the
  pool's settings: TCP, TLS (``rediss://``), unix sockets, AUTH or ACL credentials,
  SELECT, the client name.  Once redis-py's handshake is done the lane takes the
  transport over.
* **Retrying.**  A call whose connection fails or times out is tried again on a new
  connection under the retry policy redis-py derives from the pool's settings, with the
  same ``Retry`` object's ``call_with_retry`` that redis-py's client uses.
* **Errors.**  Error replies become redis-py's exception classes (``NoScriptError``,
  ``OutOfMemoryError``, ``NoPermissionError``, ...), which delayq translates in one place.

``socket_timeout`` is kept (or the lane's own ``silence``): while a reply is awaited and
nothing arrives for that long, the connection is aborted and its calls fail with
redis-py's ``TimeoutError``.  One timer per connection is armed while calls are in
flight, not one per call, so a short limit costs a call nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING, Any, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import ConnectionPool


def lane_supported(pool: ConnectionPool) -> bool:
    """Whether a lane can speak for ``pool``: RESP2 and strict utf-8, which hiredis packs
    exactly as redis-py would (anything else keeps every call on the pool)."""
    options = pool.connection_kwargs
    return (
        options.get("protocol") in (None, 2, "2")
        and options.get("encoding", "utf-8") == "utf-8"
        and options.get("encoding_errors", "strict") == "strict"
    )


class _LaneProtocol(asyncio.Protocol):
    """Replies matched to calls in order; a silence of ``timeout`` while one is awaited
    aborts the connection."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        reader: hiredis.Reader,
        timeout: float | None,
    ) -> None:
        self.loop = loop
        self._transport = transport
        self._reader = reader
        self._timeout = timeout
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._heard_at = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self.lost: Exception | None = None

    def call(self, packed: bytes) -> asyncio.Future[Any]:
        """Write one packed command; the future gets its reply (or error)."""
        if self.lost is not None:
            raise RedisConnectionError(f"Lane connection lost: {self.lost}")
        future = self.loop.create_future()
        if not self._waiting:
            self._heard_at = self.loop.time()  # silence is counted from the first call
            if self._timeout and self._watchdog is None:
                self._watchdog = self.loop.call_later(self._timeout, self._check_silence)
        self._waiting.append(future)
        self._transport.write(packed)
        return future

    def data_received(self, data: bytes) -> None:
        self._heard_at = self.loop.time()
        self._reader.feed(data)
        waiting = self._waiting
        try:
            while (reply := self._reader.gets()) is not False:
                future = waiting.popleft()
                if future.done():
                    continue  # its caller was cancelled: the reply is dropped
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except (InvalidResponse, IndexError) as exc:
            # Bytes that are not RESP, or a reply nobody asked for: the stream is unusable.
            self._fail(RedisConnectionError(f"Protocol error on the lane: {exc!r}"))
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Connection closed by server: {exc or 'EOF'}"))

    def eof_received(self) -> bool | None:
        return False  # closes the transport, which calls connection_lost

    def close(self) -> None:
        self._fail(RedisConnectionError("Lane closed"))
        self._transport.close()

    def _check_silence(self) -> None:
        self._watchdog = None
        timeout = self._timeout
        if not self._waiting or self.lost is not None or not timeout:
            return
        silent = self.loop.time() - self._heard_at
        if silent >= timeout:
            self._fail(RedisTimeoutError("Timeout reading from socket"))
            self._transport.abort()
        else:
            self._watchdog = self.loop.call_later(timeout - silent, self._check_silence)

    def _fail(self, error: Exception) -> None:
        if self.lost is None:
            self.lost = error
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)


class ScriptLane:
    """A lazily opened, pipelined connection for EVALSHA calls, with ``pool``'s settings.

    Args:
        pool: the pool whose connection class and settings open the lane's connection.
        silence: seconds without a reply, while one is awaited, after which the connection
            is dropped; ``None``: the pool's ``socket_timeout``.
    """

    def __init__(self, pool: ConnectionPool, silence: float | None = None) -> None:
        self._pool = pool
        self._silence = silence
        self._protocol: _LaneProtocol | None = None
        self._opening: asyncio.Future[_LaneProtocol] | None = None
        self._writer: asyncio.StreamWriter | None = None
        # The retry policy redis-py derives from the pool's settings for each connection
        # (``retry``, ``retry_on_timeout``, ``retry_on_error``), taken from an unopened one.
        self._retry = pool.connection_class(**pool.connection_kwargs).retry

    async def evalsha(
        self,
        sha: str,
        source: str | bytes | memoryview,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
    ) -> Any:
        """Run a script by its sha, loading ``source`` once on NOSCRIPT (e.g. after a Redis
        restart or ``SCRIPT FLUSH``).

        A call whose connection fails or times out is tried again on a new connection as
        redis-py's own client would (the pool's retry policy; delayq's default: once,
        without backoff), so it may run twice.

        Raises:
            redis.exceptions.ConnectionError: (or ``TimeoutError``) no try got a reply.
            redis.exceptions.ResponseError: (and subclasses) the error Redis replied with.
        """
        # (hiredis's stub types its argument as a one-element tuple)
        command = hiredis.pack_command(("EVALSHA", sha, len(keys), *keys, *args))  # type: ignore[arg-type]
        return await self._retry.call_with_retry(
            lambda: self._open_and_call(command, source), self._drop
        )

    async def _call(self, protocol: _LaneProtocol, command: bytes, source: Any) -> Any:
        try:
            return await protocol.call(command)
        except NoScriptError:
            await protocol.call(hiredis.pack_command(("SCRIPT", "LOAD", source)))  # type: ignore[arg-type]
            return await protocol.call(command)

    async def _open_and_call(self, command: bytes, source: Any) -> Any:
        protocol = self._protocol
        if (
            protocol is None
            or protocol.lost is not None
            # a transport serves only the event loop it was opened in
            or protocol.loop is not asyncio.get_running_loop()
        ):
            protocol = await self._open()
        return await self._call(protocol, command, source)

    async def _drop(self, error: Exception) -> None:
        """Between tries: forget the connection if it failed, so the next try opens a new
        one (as redis-py disconnects).  Only a failed one: by the time a call's failure is
        handled, another call may have opened a healthy connection, which must stay."""
        protocol = self._protocol
        if protocol is not None and protocol.lost is not None:
            self._close_transport()

    async def _open(self) -> _LaneProtocol:
        """The one connection attempt that concurrent first calls share."""
        opening = self._opening
        if opening is None or opening.get_loop() is not asyncio.get_running_loop():
            opening = self._opening = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _connect(self) -> _LaneProtocol:
        self._close_transport()
        # redis-py's connection class does the handshake (TLS, AUTH/ACL, SELECT, name);
        # then its stream is taken over, and the object that opened it dropped.
        connection = self._pool.connection_class(**self._pool.connection_kwargs)
        # As redis-py's own send path connects: the socket connect under the retry policy,
        # the handshake once (redis-py 5's connect() does just that).
        connect = getattr(connection, "connect_check_health", None)
        if connect is not None:
            await connect(check_health=False)
        else:
            await connection.connect()  # type: ignore[no-untyped-call]
        writer = connection._writer
        connection._writer = connection._reader = None
        if writer is None:
            raise RedisConnectionError("redis-py connected without a stream")
        encoder = connection.encoder
        reader = hiredis.Reader(
            protocolError=InvalidResponse,
            replyError=BaseParser.parse_error,
            encoding=encoder.encoding if encoder.decode_responses else None,
            errors=encoder.encoding_errors,
        )
        transport = cast("asyncio.Transport", writer.transport)
        silence = self._silence or connection.socket_timeout
        protocol = _LaneProtocol(asyncio.get_running_loop(), transport, reader, silence)
        transport.set_protocol(protocol)
        # The writer is kept: on newer Pythons a StreamWriter collected while its
        # transport is open closes the transport.
        self._writer, self._protocol = writer, protocol
        return protocol

    def _close_transport(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            # Opened in an event loop that is closed now: nothing is left to close.
            with contextlib.suppress(RuntimeError):
                protocol.close()
        # Only now: a StreamWriter collected while its transport is open warns and closes it.
        self._writer = None

    async def aclose(self) -> None:
        """Close the connection; calls in flight fail with redis-py's ``ConnectionError``."""
        if self._opening is not None:
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
            self._opening = None
        self._close_transport()
