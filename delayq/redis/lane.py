"""The script lane: concurrent script calls from one process pipelined automatically.

A send awaited one by one is a round trip; fifty sends awaited at once need not be fifty.
Like ioredis's auto-pipelining, the lane gathers the calls made in one turn of the event
loop: a call alone in its turn goes straight to redis-py (``EVALSHA``); calls that arrive
together go to Redis as one ``pipeline(transaction=False)``, one write and one read for
all of them, and each caller gets its own reply or error.

Everything else is redis-py's, through its public API, so the two cannot disagree: the
connection (TCP, TLS, unix sockets, credentials, SELECT, the client name), the retry
policy after a lost connection, ``socket_timeout`` and the error classes.  A script
unknown to Redis (after a restart or ``SCRIPT FLUSH``) is loaded and its call run again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError, NoScriptError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from redis.asyncio import Redis


def _new_future() -> asyncio.Future[Any]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True)
class _Call:
    sha: str
    source: str | bytes | memoryview
    keys: Sequence[str]
    args: Sequence[str | int | bytes]
    future: asyncio.Future[Any] = field(default_factory=_new_future)


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
        batch = self._batch
        if batch is not None:  # another call of this turn leads: ride along
            call = _Call(sha, source, keys, args)
            batch.append(call)
            return await call.future
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
            return await self._one(sha, source, keys, args)
        call = _Call(sha, source, keys, args)
        batch.insert(0, call)
        self._spawn(batch)
        return await call.future

    async def _one(
        self,
        sha: str,
        source: str | bytes | memoryview,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
    ) -> Any:
        client = self.client
        try:
            return await client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(source)
            return await client.evalsha(sha, len(keys), *keys, *args)

    def _spawn(self, batch: list[_Call]) -> None:
        # The batch runs in a task of its own, so a caller cancelled while waiting leaves
        # the others' calls running; the set holds it until it ends.
        task = asyncio.ensure_future(self._pipeline(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _pipeline(self, batch: list[_Call]) -> None:
        try:
            replies = await self._execute(batch)
        except BaseException as exc:
            # Cancelled by aclose(): the callers' calls fail as on a closed connection.
            error = exc if isinstance(exc, Exception) else ConnectionError("Script lane closed")
            for call in batch:
                if not call.future.done():
                    call.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            # A flushed script: load each once, then run its calls again, in order.
            try:
                for source in {batch[i].sha: batch[i].source for i in missing}.values():
                    await self.client.script_load(source)
                again = await self._execute([batch[i] for i in missing])
            except Exception as exc:
                again = [exc] * len(missing)
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        for call, reply in zip(batch, replies, strict=True):
            if call.future.done():
                continue  # its caller was cancelled: the reply is dropped
            if isinstance(reply, Exception):
                call.future.set_exception(reply)
            else:
                call.future.set_result(reply)

    async def _execute(self, batch: list[_Call]) -> list[Any]:
        async with self.client.pipeline(transaction=False) as pipe:
            for call in batch:
                pipe.evalsha(call.sha, len(call.keys), *call.keys, *call.args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    async def aclose(self) -> None:
        """Cancel the batches in flight and, if the lane owns its client, close it."""
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        if self._owned:
            await self.client.aclose()
