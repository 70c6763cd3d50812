"""The script lane's own connection: an :class:`asyncio.Protocol` feeding a ``hiredis.Reader``.

A send awaited one by one is a round trip, and on a small host the client's work per
call weighs as much as Redis's.  redis-py's public ``read_response`` spends it on a
stream reader, a parser and a timer per reply; this connection spends one future: a call
packs its command with hiredis, writes it and awaits a future that ``data_received``
resolves in order.  Any number of calls may be in flight, answered in the order sent, so
a caller cancelled while waiting leaves the connection usable (its reply is read and
dropped).  One silence timer per connection, armed while replies are awaited, keeps
``socket_timeout``.

It opens only connections it can open exactly as redis-py would (:func:`wire_settings`):
plain TCP or a unix socket, ``AUTH`` with a password or ACL user, ``HELLO`` for the
protocol, the client name, the library name and version, ``SELECT``; strict utf-8.
Anything else (TLS, a credential provider, health checks, a custom connection or parser
class, ...) stays on redis-py's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import hiredis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ExecAbortError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from redis.asyncio import ConnectionPool
    from redis.asyncio.connection import AbstractConnection
    from redis.asyncio.retry import Retry

ERROR_CLASSES: dict[str, type[RedisError]] = {
    "NOSCRIPT": NoScriptError,
    "OOM": OutOfMemoryError,
    "NOPERM": NoPermissionError,
    "READONLY": ReadOnlyError,
    "LOADING": BusyLoadingError,
    "EXECABORT": ExecAbortError,
    "WRONGPASS": AuthenticationError,
    "NOAUTH": AuthenticationError,
}
"""redis-py's exception class for an error reply's code (what its parsers raise: the
message without the code); any other code is a ``ResponseError`` with the whole text."""

ERR_CLASSES: dict[str, type[RedisError]] = {
    "max number of clients reached": RedisConnectionError,
    "invalid password": AuthenticationError,
}
"""The ``ERR`` replies redis-py raises as something other than ``ResponseError``."""


def error_reply(message: str) -> RedisError:
    """redis-py's exception for the error reply ``message``."""
    code, _, rest = message.partition(" ")
    cls = ERROR_CLASSES.get(code)
    if cls is not None:
        return cls(rest)
    if code == "ERR" and rest in ERR_CLASSES:
        return ERR_CLASSES[rest](rest)
    return ResponseError(rest if code == "ERR" else message)


# What a pool's connection_kwargs may hold for the wire to open the connection as
# redis-py would; any other key changes what redis-py sends or how, so it keeps it.
_KNOWN_SETTINGS = frozenset(
    {
        "host", "port", "path", "db", "username", "password", "client_name",
        "lib_name", "lib_version", "driver_info", "protocol", "encoding",
        "encoding_errors", "decode_responses", "socket_timeout", "socket_connect_timeout",
        "socket_keepalive", "socket_keepalive_options", "socket_type", "socket_read_size",
        "retry", "retry_on_timeout", "retry_on_error", "health_check_interval",
        "himport_registry", "maint_notifications_config", "maint_notifications_pool_handler",
        "orig_host_address", "orig_socket_timeout", "orig_socket_connect_timeout",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class WireSettings:
    """How to open and greet a Redis: read from an unopened redis-py connection."""

    host: str
    port: int
    path: str | None
    handshake: tuple[tuple[str | int, ...], ...]
    keepalive: Mapping[int, int | bytes] | None  # None: no keepalive
    connect_timeout: float | None
    timeout: float | None
    decode: bool
    retry: Retry
    """The policy redis-py derives from the pool's settings for each connection
    (``retry``, ``retry_on_timeout``, ``retry_on_error``)."""


def wire_settings(pool: ConnectionPool) -> WireSettings | None:
    """The settings to open ``pool``'s connections on the wire, or ``None`` when only
    redis-py's connection class can open them as configured.

    The wire serves redis-py's own TCP and unix socket classes with password or ACL
    credentials, RESP2 or RESP3 and strict utf-8; TLS, a credential provider, health
    checks, maintenance notifications turned on, a custom parser, encoder or connect
    callback, or a setting it does not know keep redis-py's connection.
    """
    kwargs = pool.connection_kwargs
    cls = pool.connection_class
    if cls not in (Connection, UnixDomainSocketConnection) or not kwargs.keys() <= _KNOWN_SETTINGS:
        return None
    try:
        probe = cls(**kwargs)  # never opened: it resolves redis-py's defaults
    except TypeError:
        return None  # a setting redis-py's class does not take: it says so itself
    maint = kwargs.get("maint_notifications_config")
    if (
        probe.encoder.encoding != "utf-8"
        or probe.encoder.encoding_errors != "strict"
        or probe.health_check_interval
        or (probe.username and probe.password is None)
        or (maint is not None and maint.enabled is True)
        or kwargs.get("socket_type", 0) != 0
    ):
        return None
    return WireSettings(
        host=getattr(probe, "host", ""),
        port=getattr(probe, "port", 0),
        path=getattr(probe, "path", None),
        handshake=_handshake(probe),
        keepalive=(
            getattr(probe, "socket_keepalive_options", {})
            if getattr(probe, "socket_keepalive", False)
            else None
        ),
        connect_timeout=probe.socket_connect_timeout,
        timeout=probe.socket_timeout,
        decode=probe.encoder.decode_responses,
        retry=probe.retry,
    )


def _handshake(probe: AbstractConnection) -> tuple[tuple[str | int, ...], ...]:
    """The commands redis-py's ``on_connect`` sends first, in its order."""
    credentials: tuple[str, ...] = ()
    if probe.username or probe.password:  # (a user without a password keeps redis-py's)
        password = str(probe.password)
        credentials = (str(probe.username), password) if probe.username else (password,)
    commands: list[tuple[str | int, ...]] = []
    protocol = int(probe.protocol)
    if protocol == 3:
        auth = ("AUTH", *(credentials if len(credentials) == 2 else ("default", *credentials)))
        commands.append(("HELLO", 3, *(auth if credentials else ())))
    elif credentials:
        commands.append(("AUTH", *credentials))
    if probe.client_name:
        commands.append(("CLIENT", "SETNAME", probe.client_name))
    info = probe.driver_info
    if info is not None and info.formatted_name:
        commands.append(("CLIENT", "SETINFO", "LIB-NAME", str(info.formatted_name)))
    if info is not None and info.lib_version:
        commands.append(("CLIENT", "SETINFO", "LIB-VER", str(info.lib_version)))
    if probe.db:
        commands.append(("SELECT", probe.db))
    return tuple(commands)


class Wire(asyncio.Protocol):
    """Replies matched to calls in order; a silence of ``timeout`` while one is awaited
    aborts the connection."""

    def __init__(self, settings: WireSettings) -> None:
        self.loop = asyncio.get_running_loop()
        self._settings = settings
        self._timeout = settings.timeout
        self._replies = hiredis.Reader(
            protocolError=RedisConnectionError,
            replyError=error_reply,
            **({"encoding": "utf-8", "errors": "strict"} if settings.decode else {}),
        )
        self._transport: asyncio.Transport | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._heard_at = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports (uvicorn runs on uvloop) do not derive from asyncio.Transport.
        self._transport = cast("asyncio.Transport", transport)
        sock = self._transport.get_extra_info("socket")
        keepalive = self._settings.keepalive
        if sock is not None and keepalive is not None and self._settings.path is None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in keepalive.items():
                sock.setsockopt(socket.SOL_TCP, option, value)

    def call(self, packed: bytes) -> asyncio.Future[Any]:
        """Write one packed command; the future gets its reply (or error)."""
        if self.lost is not None or self._transport is None:
            raise RedisConnectionError(f"Connection lost: {self.lost}")
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
        self._replies.feed(data)
        waiting = self._waiting
        try:
            while (reply := self._replies.gets()) is not False:
                if isinstance(reply, hiredis.PushNotification):
                    continue  # out of band (RESP3): no call's reply
                future = waiting.popleft()
                if future.done():
                    continue  # its caller was cancelled: the reply is dropped
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except (RedisConnectionError, IndexError) as exc:
            # Bytes that are not RESP, or a reply nobody asked for: the stream is unusable.
            self.abort(RedisConnectionError(f"Protocol error: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Connection closed by server: {exc or 'EOF'}"))

    def eof_received(self) -> bool | None:
        return False  # closes the transport, which calls connection_lost

    def abort(self, error: Exception) -> None:
        """Fail the calls in flight with ``error`` and drop the connection."""
        self._fail(error)
        if self._transport is not None:
            # Opened in an event loop that is closed now: nothing is left to close.
            with contextlib.suppress(RuntimeError):
                self._transport.abort()

    def _check_silence(self) -> None:
        self._watchdog = None
        timeout = self._timeout
        if not self._waiting or self.lost is not None or not timeout:
            return
        silent = self.loop.time() - self._heard_at
        if silent >= timeout:
            self.abort(RedisTimeoutError("Timeout reading from socket"))
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


def pack(*command: str | int | bytes) -> bytes:
    """``command`` in RESP, as redis-py packs it with strict utf-8."""
    # (hiredis's stub types its argument as a one-element tuple)
    packed: bytes = hiredis.pack_command(command)  # type: ignore[arg-type]
    return packed


async def open_wire(settings: WireSettings) -> Wire:
    """A connection to the Redis of ``settings``, greeted as redis-py greets it.

    Raises:
        redis.exceptions.ConnectionError: (or ``TimeoutError``, ``AuthenticationError``)
            as redis-py's connection raises them.
    """
    loop = asyncio.get_running_loop()
    where = settings.path or f"{settings.host}:{settings.port}"
    try:
        async with asyncio.timeout(settings.connect_timeout):
            if settings.path is not None:
                _, wire = await loop.create_unix_connection(lambda: Wire(settings), settings.path)
            else:
                host, port = settings.host, settings.port
                _, wire = await loop.create_connection(lambda: Wire(settings), host, port)
    except TimeoutError:
        raise RedisTimeoutError("Timeout connecting to server") from None
    except OSError as exc:
        raise RedisConnectionError(f"Error {exc.errno} connecting to {where}. {exc}") from exc
    try:
        await _greet(wire, settings.handshake)
    except BaseException as exc:
        wire.abort(RedisConnectionError(f"Handshake failed: {exc!r}"))
        raise
    return wire


async def _greet(wire: Wire, handshake: tuple[tuple[str | int, ...], ...]) -> None:
    """Send the handshake in one write and check its replies as redis-py does."""
    if not handshake:
        return
    futures = [(command, wire.call(pack(*command))) for command in handshake]
    try:
        for command, future in futures:
            _check(command, await _reply(command, future))
    finally:
        for _, future in futures:  # the replies not read: a failed handshake's
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()


async def _reply(command: tuple[str | int, ...], future: asyncio.Future[Any]) -> Any:
    try:
        return await future
    except ResponseError:
        if command[:2] == ("CLIENT", "SETINFO"):
            return None  # an older Redis: redis-py ignores it too
        raise


def _check(command: tuple[str | int, ...], reply: Any) -> None:
    if command[0] == "HELLO":
        if not isinstance(reply, dict) or 3 not in (reply.get(b"proto"), reply.get("proto")):
            raise RedisConnectionError("Invalid RESP version")
    elif command[:2] != ("CLIENT", "SETINFO") and reply not in (b"OK", "OK"):
        raise {
            "AUTH": AuthenticationError("Invalid Username or Password"),
            "SELECT": RedisConnectionError("Invalid Database"),
        }.get(str(command[0]), RedisConnectionError("Error setting client name"))
