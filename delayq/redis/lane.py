"""The script lane: concurrent script calls from one process pipelined automatically.

A send awaited one by one is a round trip; fifty sends awaited at once need not be fifty.
Where the lane can open its own connection (:mod:`delayq.redis.wire`: asyncio's and
hiredis's public APIs; plain TCP or a unix socket, password or ACL credentials, opened
exactly as redis-py would open it), every call is written to it at once and the replies
come back in order, like ioredis's auto-pipelining: one connection carries any number of
calls in flight, each caller getting its own reply or error.  Otherwise (TLS, a credential
provider, ...) a call made while none is in flight goes on a redis-py connection the lane
holds, and calls made while others are in flight wait for the end of their event-loop
turn and go out together, one write and one read on one pooled connection, as redis-py's
``pipeline(transaction=False)`` does, through the same public connection methods
(``send_packed_command``, ``read_response``).

Everything else is redis-py's, so the two cannot disagree: the pool and its connections,
the retry policy after a lost connection, ``socket_timeout`` and the error classes.  A
script unknown to Redis (after a restart or ``SCRIPT FLUSH``) is loaded and its calls run
again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from delayq.redis.wire import Wire, open_wire, pack, wire_settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis
    from redis.asyncio.connection import AbstractConnection


@dataclass(slots=True)
class _Call:
    sha: str
    source: str | bytes | memoryview
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    future: asyncio.Future[Any] | None = None  # a pipelined call's, for its reply


class ScriptLane:
    """Runs ``EVALSHA`` calls on ``client``, pipelining the ones made in the same turn.

    Args:
        client: the Redis client (and so the pool, with its settings) the calls run on.
        owned: whether :meth:`aclose` closes ``client`` too.
    """

    def __init__(self, client: Redis, *, owned: bool = False) -> None:
        self.client = client
        self._owned = owned
        self._batch: list[_Call] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._alone = 0  # lone calls in flight
        # The connection of calls made while none is in flight: outside the pool, since
        # borrowing a pooled one costs a call as much as the rest of its client work.
        self._held: AbstractConnection | None = None
        self._held_loop: asyncio.AbstractEventLoop | None = None
        # A lone call's own connection (:mod:`delayq.redis.wire`) where it can be opened
        # as redis-py would open it; else a redis-py connection held outside the pool.
        self._wire_settings = wire_settings(client.connection_pool)
        self._wire: Wire | None = None
        self._opening: asyncio.Future[Wire] | None = None
        settings = client.connection_pool.connection_kwargs
        self._silence: float | None = settings.get("socket_timeout")
        self._hiredis = (
            settings.get("encoding", "utf-8") == "utf-8"
            and settings.get("encoding_errors", "strict") == "strict"
        )

    async def evalsha(
        self,
        sha: str,
        source: str | bytes | memoryview,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
    ) -> Any:
        """Run a script by its sha, loading ``source`` on NOSCRIPT and running it again.

        A call whose connection fails is tried again as redis-py's client retries (the
        pool's retry policy), so it may run twice.

        Raises:
            redis.exceptions.ConnectionError: (or ``TimeoutError``) no try got a reply.
            redis.exceptions.ResponseError: (and subclasses) the error Redis replied with.
        """
        call = _Call(sha, source, keys, args)
        if self._wire_settings is not None:
            # delayq's own connection pipelines by itself: each call is written at once and
            # the replies come back in order, so concurrent calls need no batching.
            return await self._on_wire(call)
        batch = self._batch
        if batch is not None:  # another call of this turn leads: ride along
            call.future = asyncio.get_running_loop().create_future()
            batch.append(call)
            return await call.future
        if not self._alone and not self._running:
            # Nothing in flight: this call starts a burst, if any, and need not wait for
            # the rest of it (they follow it as one pipeline).
            return await self._one(call, held=True)
        batch = self._batch = []
        try:
            await asyncio.sleep(0)  # let the other calls of this turn join
        except BaseException:
            self._batch = None
            if batch:
                self._spawn(batch)  # cancelled while gathering: the others still run
            raise
        self._batch = None
        if not batch:
            return await self._one(call)
        call.future = asyncio.get_running_loop().create_future()
        batch.insert(0, call)
        self._spawn(batch)
        return await call.future

    async def _on_wire(self, call: _Call) -> Any:
        assert self._wire_settings is not None
        command = pack("EVALSHA", call.sha, len(call.keys), *call.keys, *call.args)
        self._alone += 1
        try:
            return await self._wire_settings.retry.call_with_retry(
                lambda: self._wire_call(command, call.source), self._drop_wire
            )
        finally:
            self._alone -= 1

    async def _wire_call(self, command: bytes, source: str | bytes | memoryview) -> Any:
        wire = self._wire
        if wire is None or wire.lost is not None or wire.loop is not asyncio.get_running_loop():
            wire = await self._open_wire()  # (a transport serves only the loop it was opened in)
        try:
            return await wire.call(command)
        except NoScriptError:
            script = bytes(source) if isinstance(source, memoryview) else source
            await wire.call(pack("SCRIPT", "LOAD", script))
            return await wire.call(command)

    async def _open_wire(self) -> Wire:
        """The one connection attempt that calls share (a caller cancelled while it
        opens leaves it opening for the next)."""
        assert self._wire_settings is not None
        opening = self._opening
        if (
            opening is None
            or opening.get_loop() is not asyncio.get_running_loop()
            or (opening.done() and (opening.cancelled() or opening.exception() is not None))
        ):
            opening = self._opening = asyncio.ensure_future(open_wire(self._wire_settings))
            # (its failure is its callers'; one that none awaits any more is not logged)
            opening.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            self._wire = await asyncio.shield(opening)
            return self._wire
        finally:
            if opening.done() and self._opening is opening:
                self._opening = None

    async def _drop_wire(self, _error: Exception) -> None:
        """Between tries: forget the connection if it failed, so that the next try opens
        a new one, as redis-py disconnects."""
        wire = self._wire
        if wire is not None and wire.lost is not None:
            self._wire = None

    async def _one(self, call: _Call, *, held: bool = False) -> Any:
        self._alone += 1
        try:
            (reply,) = await self._run([call], held=held)
        finally:
            self._alone -= 1
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _spawn(self, batch: list[_Call]) -> None:
        # The batch runs in a task of its own, so a caller cancelled while waiting leaves
        # the others' calls running; the set holds it until it ends.
        task = asyncio.ensure_future(self._pipeline(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _pipeline(self, batch: list[_Call]) -> None:
        try:
            replies = await self._run(batch)
        except BaseException as exc:
            # Cancelled by aclose(): the callers' calls fail as on a closed connection.
            error = exc if isinstance(exc, Exception) else RedisConnectionError("Lane closed")
            for call in batch:
                if call.future is not None and not call.future.done():
                    call.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        for call, reply in zip(batch, replies, strict=True):
            if call.future is None or call.future.done():
                continue  # its caller was cancelled: the reply is dropped
            if isinstance(reply, Exception):
                call.future.set_exception(reply)
            else:
                call.future.set_result(reply)

    async def _run(self, calls: list[_Call], *, held: bool = False) -> list[Any]:
        """Each call's reply or error reply; a script Redis does not know (NOSCRIPT, e.g.
        after a restart or ``SCRIPT FLUSH``) is loaded once and its calls run again."""
        replies = await self._execute(calls, held=held)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            for source in {calls[i].sha: calls[i].source for i in missing}.values():
                await self.client.script_load(source)
            again = await self._execute([calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _execute(self, calls: list[_Call], *, held: bool = False) -> list[Any]:
        """Send ``calls`` in one write on one connection (the held one, else a pooled one)
        and read their replies, as redis-py's own pipeline does; tried again on a new
        connection under the pool's retry policy when the connection fails or times out."""
        pool = self.client.connection_pool
        if held:
            return await self._exchange_retried(self._held_connection(), calls, self._silence)
        connection: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            return await self._exchange_retried(connection, calls)
        finally:
            await pool.release(connection)

    def _held_connection(self) -> AbstractConnection:
        loop = asyncio.get_running_loop()
        if self._held is None or self._held_loop is not loop:
            # (a connection serves only the event loop it was opened in)  Its socket_timeout
            # is kept by the lane, one timer per call: redis-py's times each write with
            # asyncio.wait_for, a Task per command on Python 3.11.
            pool = self.client.connection_pool
            settings = {**pool.connection_kwargs, "socket_timeout": None}
            self._held = pool.connection_class(**settings)
            self._held_loop = loop
        return self._held

    async def _exchange_retried(
        self, connection: AbstractConnection, calls: list[_Call], silence: float | None = None
    ) -> list[Any]:
        async def exchange() -> list[Any]:
            if not silence:
                return await self._exchange(connection, calls)
            try:
                async with asyncio.timeout(silence):
                    return await self._exchange(connection, calls)
            except TimeoutError:
                # As redis-py: the connection, cut short, is closed (read_response already
                # did when the timer cancelled it), and the call fails with its TimeoutError.
                await connection.disconnect(nowait=True)
                raise RedisTimeoutError("Timeout reading from socket") from None

        replies: list[Any] = await connection.retry.call_with_retry(
            exchange, lambda _error: connection.disconnect()
        )
        return replies

    async def _exchange(self, connection: AbstractConnection, calls: list[_Call]) -> list[Any]:
        commands = [("EVALSHA", c.sha, len(c.keys), *c.keys, *c.args) for c in calls]
        if self._hiredis:
            # The same bytes redis-py packs (utf-8, strict), packed in C.
            # (hiredis's stub types its argument as a one-element tuple)
            packed: bytes | list[bytes] = b"".join(map(hiredis.pack_command, commands))  # type: ignore[arg-type]
        else:
            packed = connection.pack_commands(commands)
        await connection.send_packed_command(packed)
        replies: list[Any] = []
        for _ in calls:
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:  # the connection stays aligned: read on
                replies.append(error)
        return replies

    async def aclose(self) -> None:
        """Cancel the batches in flight, close the held connection and, if the lane owns
        its client, close it."""
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        if self._opening is not None:
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
            self._opening = None
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.abort(RedisConnectionError("Lane closed"))
        held, self._held = self._held, None
        if held is not None and self._held_loop is asyncio.get_running_loop():
            await held.disconnect()
        if self._owned:
            await self.client.aclose()
