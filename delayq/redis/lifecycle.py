"""The scripts of a task's life, on the hot path: send, lease, ack, nack, extend.

Each method runs one script with EVALSHA (redis-py's ``AsyncScript`` falls back to
SCRIPT LOAD on NOSCRIPT, e.g. after a Redis restart) and translates Redis errors into
delayq's exceptions in one place, :func:`redis_errors`.  :class:`~delayq.redis.scripts.Scripts`
adds the scripts that read and manage tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from delayq.redis.cluster import after_failure, is_cluster
from delayq.redis.durability import DurableWrite
from delayq.redis.replies import Reservation
from delayq.redis.source import lua_source, test_clock_on, watch
from delayq.redis.translate import TRANSLATED

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

    from delayq.redis.durability import DurableSender
    from delayq.redis.keys import TopicKeys
    from delayq.redis.lane import ScriptLane
    from delayq.task import SendOutcome

NackMode = Literal["retry", "dead", "release"]
TickMode = Literal["advance", "claim"]
MAX_UNPACK = 2000
"""Most ids one script call passes through Lua's unpack() (its limit is ~8,000 values)."""


_READ_CLOCK = "local READ_CLOCK = false\n"


def waiting_keys(keys: TopicKeys) -> tuple[str, str, str, str]:
    """The KEYS of the scripts that store or remove a waiting task (send, send_many, cancel,
    replay)."""
    return (keys.prefix, keys.wheel, keys.dead, keys.errors)


def send_keys(keys: TopicKeys) -> tuple[str, ...]:
    """The KEYS of send.lua and send_many.lua replacing tasks (``on_conflict="replace"``)."""
    return (*waiting_keys(keys), keys.reserved)


def reserve_keys(keys: TopicKeys) -> tuple[str, ...]:
    """The KEYS of reserve.lua (also for anything that runs it bare)."""
    return (keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.errors, keys.seq,
            keys.controls, keys.starts)  # fmt: skip


def ack_keys(keys: TopicKeys) -> tuple[str, ...]:
    """The KEYS of ack.lua (also for anything that runs it bare; its ARGV start with the
    topic's wake channel)."""
    return (keys.prefix, keys.reserved, keys.errors, keys.controls)


SEND_STATUS: dict[int, SendOutcome] = {1: "created", 0: "kept", 2: "replaced", 3: "reserved"}
"""What send.lua's status codes mean, as :class:`delayq.SendResult` names them (-1, a time
too far in the past, is raised instead)."""


def _written(status: int) -> int:
    """A send status as the durable sender reads it: 1 wrote, 0 wrote nothing, < 0 refused."""
    return {2: 1, 3: 0}.get(status, status)


def _int(value: Any) -> int:
    return int(value)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class TaskScripts:
    """Typed wrappers around the scripts of a task's life (send, lease, ack, nack, extend)
    for one Redis client, and the way every script call runs.

    Args:
        client: runs the scripts.
        lane: optionally, a :class:`~delayq.redis.lane.ScriptLane` to the same Redis, which then
            runs every call but durable sends (their ``WAIT`` blocks the connection it runs
            on, so they go through ``client``): concurrent calls through it are pipelined.
    """

    def __init__(self, client: Redis, lane: ScriptLane | None = None) -> None:
        self._client = client
        self._lane = lane
        self._cluster = client if is_cluster(client) else None
        self._scripts: dict[str, AsyncScript] = {}
        self.load()
        watch(self)

    def load(self) -> None:
        """Register the scripts with the client: production's, or under a test clock the
        copies that read it (:func:`delayq.redis.source.use_test_clock`)."""
        names = ("send", "send_many", "reserve", "ack", "nack", "extend", "cancel", "reschedule",
                 "replay", "get", "stats", "dead_letters", "upcoming", "timeline", "control",
                 "tick", "tick_state", "tick_look", "rollup", "shards", "clock", "archived",
                 "dead_bulk", "forget", "running", "result")  # fmt: skip
        self._scripts = {
            name: self._client.register_script(lua_source(name, test_clock=test_clock_on()))
            for name in names
        }

    async def aclose(self) -> None:
        """Close the lane, if any (``client`` is the caller's to close)."""
        if self._lane is not None:
            await self._lane.aclose()

    def use_lane(self, lane: ScriptLane | None) -> None:
        """Run the calls through ``lane`` from now on (``None``: through ``client``)."""
        self._lane = lane

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[str | int | bytes]) -> Any:
        # The hot path: a bare try costs nothing until something fails, unlike entering
        # an async context manager per call.
        script = self._scripts[name]
        try:
            if self._lane is not None:
                return await self._lane.evalsha(script.sha, script.script, keys, args)
            return await script(keys=keys, args=args)
        except (*TRANSLATED, AttributeError) as exc:
            return await self._retry(lambda: script(keys=keys, args=args), exc)

    async def _retry(self, call: Callable[[], Awaitable[Any]], exc: Exception) -> Any:
        """On a cluster: repeat ``call`` while slots move or a master is replaced.  Raises
        ``exc`` (or the last error) as delayq's error; an ``AttributeError`` that is not
        redis-py's race (:func:`~delayq.redis.cluster.is_disconnect_race`) as it is."""
        return await after_failure(self._cluster, call, exc)

    async def _write(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        durable: DurableSender | None,
        *,
        ids: Sequence[str],
        touch_key: str,
    ) -> Any:
        """Run a send script, through ``durable`` when given (the script then waits for
        replicas).  Its reply must be, or start with, one status per task."""
        if durable is None:
            return await self._run(name, keys, args)
        sender = durable

        def run() -> Awaitable[Any]:
            return sender.run(DurableWrite(
                self._scripts[name], keys, args, ids=ids, touch_key=touch_key,
                statuses=lambda reply: [_written(_int(v)) for v in reply[: len(ids)]],
            ))  # fmt: skip

        try:
            return await run()
        except TRANSLATED as exc:
            return await self._retry(run, exc)

    async def send(
        self,
        keys: TopicKeys,
        task_id: str,
        *,
        absolute: bool,
        value_ms: int,
        max_attempts: int,
        ttr_ms: int,
        body: bytes,
        tolerance_ms: int,
        replace: bool = False,
        priority: int = 0,
        durable: DurableSender | None = None,
        group: str | None = None,
    ) -> tuple[int, int]:
        """Run send.lua. Returns (status, due or now ms): 1 stored, 0 id already live (kept),
        2 replaced (``replace``), 3 not replaced: reserved, -1 too far past.  A task of a
        ``group`` waits in its group (``_groups.lua``)."""
        args: tuple[str | int | bytes, ...] = (
            task_id, "a" if absolute else "d", value_ms, max_attempts, ttr_ms, body,
            tolerance_ms, keys.wake_publish,
        )  # fmt: skip
        if replace or priority or group is not None:  # a plain send carries none (send.lua)
            args += ("replace" if replace else "keep", priority)
        if group is not None:
            args += (group,)
        reply = await self._write(
            "send",
            send_keys(keys) if replace else waiting_keys(keys),
            args,
            durable,
            ids=(task_id,),
            touch_key=keys.seq,
        )
        return _int(reply[0]), _int(reply[1])

    async def send_many(
        self,
        keys: TopicKeys,
        fields: Sequence[str | int | bytes],
        *,
        max_attempts: int,
        ttr_ms: int,
        tolerance_ms: int,
        priority: int = 0,
        replace: bool = False,
        durable: DurableSender | None = None,
        grouped: bool = False,
    ) -> list[int]:
        """Run send_many.lua on three fields per task (id, delay ms, body), or four with
        ``grouped`` (the group last), every task with the same ``max_attempts``, ``ttr_ms``
        (0 = the topic's default) and ``priority``; ``replace`` passes the reserved key,
        which asks the script to replace live tasks.  Returns a status per task (as ``send``)."""
        width, mode = (4, "dg") if grouped else (3, "d")
        reply = await self._write(
            "send_many",
            send_keys(keys) if replace else waiting_keys(keys),
            (tolerance_ms, keys.wake_publish, mode, max_attempts, ttr_ms, priority, *fields),
            durable,
            ids=[str(v) for v in fields[::width]],  # ids are str (checked by the queue)
            touch_key=keys.seq,
        )
        return [_int(status) for status in reply]

    async def reserve(
        self,
        keys: TopicKeys,
        *,
        limit: int,
        reclaim: int,
        ttr_ms: int,
        max_attempts: int,
        history: int = 0,
        results: int = 0,
    ) -> tuple[int, int, list[tuple[str, bytes]]]:
        """Run reserve.lua. Returns (now µs, next wake ms or -1, [(id, envelope), ...]);
        :meth:`reserve_reporting` also returns what could not be leased."""
        found = await self.reserve_reporting(
            keys, limit=limit, reclaim=reclaim, ttr_ms=ttr_ms, max_attempts=max_attempts,
            history=history, results=results,
        )  # fmt: skip
        return found.now_us, found.next_ms, found.items

    async def reserve_reporting(
        self,
        keys: TopicKeys,
        *,
        limit: int,
        reclaim: int,
        ttr_ms: int,
        max_attempts: int,
        history: int = 0,
        results: int = 0,
    ) -> Reservation:
        """Run reserve.lua. Returns the leased tasks and the entries it dropped or buried
        (a topic keeping ``results`` ms stores the result of each it dead-letters)."""
        args: tuple[str | int, ...] = (limit, reclaim, ttr_ms, max_attempts, history)
        if results:
            args += (results, keys.wake_publish)
        reply = await self._run("reserve", reserve_keys(keys), args)
        notes = reply[2]
        skipped, reclaimed = [], []
        for i in range(0, len(notes), 2):
            task_id, reason = _text(notes[i]), _text(notes[i + 1])
            if reason.startswith("expired"):
                reclaimed.append((task_id, reason == "expired-dead"))
            else:
                skipped.append((task_id, reason))
        return Reservation(
            now_us=_int(reply[0]),
            next_ms=_int(reply[1]),
            items=[(_text(reply[i]), reply[i + 1]) for i in range(3, len(reply), 2)],
            skipped=skipped,
            reclaimed=reclaimed,
        )

    async def ack(
        self, keys: TopicKeys, leases: Sequence[tuple[str | bytes, ...]], *, history: int = 0,
        results: int = 0,
    ) -> list[bool]:  # fmt: skip
        """Run ack.lua for (id, token) pairs, with "started,ended ms" after the token for a
        topic keeping ``history`` records, and the result last for one keeping ``results``
        ms (``b""``, ``b"v"`` + JSON or ``b"e"`` + why not stored; ``-1`` as its workers
        say). Returns, per lease, whether the ack took effect."""
        applied: list[bool] = []
        # Chunks, because Lua's unpack() takes at most ~8,000 values.
        for start in range(0, len(leases), MAX_UNPACK):
            args: list[str | int | bytes] = [keys.wake_publish, history, results]
            args += (part for lease in leases[start : start + MAX_UNPACK] for part in lease)
            reply = await self._run("ack", ack_keys(keys), args)
            applied += (bool(_int(flag)) for flag in reply)
        return applied

    async def nack(
        self,
        keys: TopicKeys,
        task_id: str,
        token: str,
        *,
        mode: NackMode,
        delay_ms: int = 0,
        error: str = "",
        max_attempts: int,
        history: int = 0,
        times: str = ",",
        results: int = 0,
    ) -> tuple[int, int]:
        """Run nack.lua. Returns (0 lease lost | 1 rescheduled | 2 dead, due or now ms).
        A dead-lettered task of a topic keeping ``history`` records is recorded with ``times``
        (``"started,ended"`` ms); one keeping ``results`` ms gets its result stored."""
        reply = await self._run(
            "nack",
            (keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.errors, keys.controls),
            (task_id, token, mode, delay_ms, error, max_attempts, keys.wake_publish, history,
             times, results),
        )  # fmt: skip
        return _int(reply[0]), _int(reply[1]) if len(reply) > 1 else 0

    async def rollup(self, keys: TopicKeys, counts: Sequence[str | int]) -> int:
        """Run rollup.lua: add (field, count, ...) to the topic's current window."""
        return _int(await self._run("rollup", (keys.prefix,), counts))

    async def extend(self, keys: TopicKeys, task_id: str, token: str, ms: int) -> int:
        """Run extend.lua. Returns the new lease deadline in ms, or 0 when the lease was lost."""
        return _int(await self._run("extend", (keys.prefix, keys.reserved), (task_id, token, ms)))
