"""The Lua scripts, loaded from ``delayq/redis/lua/`` and wrapped in typed methods.

Each method runs one script with EVALSHA (redis-py's ``AsyncScript`` falls back to
SCRIPT LOAD on NOSCRIPT, e.g. after a Redis restart) and translates Redis errors into
delayq's exceptions in one place, :func:`redis_errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from delayq.redis.cluster import after_failure, is_cluster
from delayq.redis.replies import Counts, Found, Reservation
from delayq.redis.source import lua_source, test_clock_on, watch
from delayq.redis.translate import TRANSLATED

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

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
    replay), also for anything that runs them bare (the benchmark's ceiling)."""
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


class Scripts:
    """Typed wrappers around delayq's Lua scripts for one Redis client.

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
                 "tick", "tick_state", "tick_look", "rollup", "shards", "clock", "dead_bulk",
                 "forget", "running")  # fmt: skip
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
            return sender.run(
                self._scripts[name], keys, args, ids=ids, touch_key=touch_key,
                statuses=lambda reply: [_written(_int(v)) for v in reply[: len(ids)]],
            )  # fmt: skip

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
    ) -> tuple[int, int]:
        """Run send.lua. Returns (status, due or now ms): 1 stored, 0 id already live (kept),
        2 replaced (``replace``), 3 not replaced: reserved, -1 too far past."""
        args: tuple[str | int | bytes, ...] = (
            task_id, "a" if absolute else "d", value_ms, max_attempts, ttr_ms, body,
            tolerance_ms, keys.wake_publish,
        )  # fmt: skip
        if replace or priority:  # a plain send carries neither (see send.lua)
            args += ("replace" if replace else "keep", priority)
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
    ) -> list[int]:
        """Run send_many.lua on three fields per task (id, delay ms, body), every task with
        the same ``max_attempts``, ``ttr_ms`` (0 = the topic's default) and ``priority``;
        ``replace`` passes the reserved key, which asks the script to replace live tasks.
        Returns a status per task (as ``send``)."""
        reply = await self._write(
            "send_many",
            send_keys(keys) if replace else waiting_keys(keys),
            (tolerance_ms, keys.wake_publish, "d", max_attempts, ttr_ms, priority, *fields),
            durable,
            ids=[str(v) for v in fields[::3]],  # ids are str (checked by the queue)
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
    ) -> tuple[int, int, list[tuple[str, bytes]]]:
        """Run reserve.lua. Returns (now µs, next wake ms or -1, [(id, envelope), ...]);
        :meth:`reserve_reporting` also returns what could not be leased."""
        found = await self.reserve_reporting(
            keys, limit=limit, reclaim=reclaim, ttr_ms=ttr_ms, max_attempts=max_attempts,
            history=history,
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
    ) -> Reservation:
        """Run reserve.lua. Returns the leased tasks and the entries it dropped or buried."""
        reply = await self._run(
            "reserve",
            reserve_keys(keys),
            (limit, reclaim, ttr_ms, max_attempts, history),
        )
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
        self, keys: TopicKeys, leases: Sequence[tuple[str, ...]], *, history: int = 0
    ) -> list[bool]:
        """Run ack.lua for (id, token) pairs, or (id, token, "started,ended ms") triples for
        a topic keeping ``history`` records. Returns, per lease, whether the ack took effect."""
        applied: list[bool] = []
        # Chunks, because Lua's unpack() takes at most ~8,000 values.
        for start in range(0, len(leases), MAX_UNPACK):
            args: list[str | int | bytes] = [keys.wake_publish, history]
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
    ) -> tuple[int, int]:
        """Run nack.lua. Returns (0 lease lost | 1 rescheduled | 2 dead, due or now ms).
        A dead-lettered task of a topic keeping ``history`` records is recorded with ``times``
        (``"started,ended"`` ms)."""
        reply = await self._run(
            "nack",
            (keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.errors, keys.controls),
            (task_id, token, mode, delay_ms, error, max_attempts, keys.wake_publish, history,
             times),
        )  # fmt: skip
        return _int(reply[0]), _int(reply[1]) if len(reply) > 1 else 0

    async def rollup(self, keys: TopicKeys, counts: Sequence[str | int]) -> int:
        """Run rollup.lua: add (field, count, ...) to the topic's current window."""
        return _int(await self._run("rollup", (keys.prefix,), counts))

    async def extend(self, keys: TopicKeys, task_id: str, token: str, ms: int) -> int:
        """Run extend.lua. Returns the new lease deadline in ms, or 0 when the lease was lost."""
        return _int(await self._run("extend", (keys.prefix, keys.reserved), (task_id, token, ms)))

    async def cancel(self, keys: TopicKeys, task_id: str, history: int = 0) -> bool:
        """Run cancel.lua. Returns whether a delayed, ready or dead task was removed; a
        topic this process registered with ``history`` records it (0: as its workers say)."""
        args: tuple[str | int, ...] = (task_id, history) if history else (task_id,)
        return bool(_int(await self._run("cancel", waiting_keys(keys), args)))

    async def dead_bulk(
        self, keys: TopicKeys, mode: Literal["replay", "delete"], most: int, history: int = 0
    ) -> int:
        """Run dead_bulk.lua: replay or delete up to ``most`` dead letters. Returns how many."""
        args = (mode, most, keys.wake_publish, history)
        return _int(await self._run("dead_bulk", waiting_keys(keys), args))

    async def forget(self, keys: TopicKeys, idle_ms: int | None = None) -> bool:
        """Run forget.lua: delete the keys of a topic that holds no task (``idle_ms``: only
        once a sweep has seen it idle, with no controls, that long). Returns whether it did."""
        args = ("now", 0) if idle_ms is None else ("idle", idle_ms)
        return bool(_int(await self._run("forget", keys.stored(), args)))

    async def reschedule(
        self, keys: TopicKeys, task_id: str, *, absolute: bool, value_ms: int, tolerance_ms: int
    ) -> tuple[int, int]:
        """Run reschedule.lua. Returns (1 moved | 0 not waiting | -1 too far past, due or now ms)."""
        reply = await self._run(
            "reschedule",
            (keys.prefix, keys.wheel),
            (task_id, "a" if absolute else "d", value_ms, tolerance_ms, keys.wake_publish),
        )
        return _int(reply[0]), _int(reply[1]) if len(reply) > 1 else 0

    async def replay(self, keys: TopicKeys, task_id: str) -> bool:
        """Run replay.lua. Returns whether a dead task was moved back to the schedule."""
        keyset = waiting_keys(keys)
        return bool(_int(await self._run("replay", keyset, (task_id, keys.wake_publish))))

    async def get(self, keys: TopicKeys, task_id: str) -> Found | None:
        """Run get.lua. Returns what it found, or None for an unknown id."""
        reply = await self._run(
            "get",
            (keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.errors, keys.controls),
            (task_id,),
        )
        if reply is None:
            return None
        state, raw, error, now, score, paused = reply
        return Found(
            state=_text(state), raw=raw, error=_text(error) if error else None,
            now_ms=_int(now), score_ms=int(float(score)), paused=bool(_int(paused)),
        )  # fmt: skip

    async def stats(self, keys: TopicKeys) -> Counts:
        """Run stats.lua. Returns the topic's counts by state and its controls."""
        reply = await self._run(
            "stats",
            (keys.prefix, keys.wheel, keys.reserved, keys.dead, keys.controls),
            (),
        )
        delayed, ready, reserved, dead = (_int(v) for v in reply[:4])
        paused, rate_limit, max_running = reply[4]
        return Counts(
            delayed=delayed, ready=ready, reserved=reserved, dead=dead, paused=bool(paused),
            rate_limit=_text(rate_limit) if rate_limit else None,
            max_running=_int(max_running) if max_running else None,
            now_ms=_int(reply[5]), oldest_ready_ms=_int(reply[6]),
        )  # fmt: skip

    async def shards(self, keys: TopicKeys, seen: int = 0, wanted: int = 0) -> int:
        """Run shards.lua on shard 0's ``keys``: the shard count the topic records (1 when
        none), after recording ``wanted`` if it still was ``seen`` (0: only read)."""
        return _int(await self._run("shards", (keys.meta,), (seen, wanted) if seen else ()))

    async def control(self, keys: TopicKeys, fields: Mapping[str, str]) -> int:
        """Run control.lua: set the topic's control ``fields`` ('' deletes one) and wake its
        workers when anything changed.  Returns how many fields changed."""
        args = [part for field, value in fields.items() for part in (field, value)]
        return _int(await self._run("control", (keys.controls,), (keys.wake_publish, *args)))

    async def dead_letters(
        self, keys: TopicKeys, *, offset: int, limit: int
    ) -> tuple[int, list[tuple[str, bytes | None, str | None, int]]]:
        """Run dead_letters.lua. Returns (now ms, [(id, envelope, error, died ms), ...])."""
        reply = await self._run(
            "dead_letters", (keys.prefix, keys.dead, keys.errors), (offset, limit)
        )
        rows = [
            (
                _text(reply[i]),
                reply[i + 1] or None,
                _text(reply[i + 2]) if reply[i + 2] else None,
                int(float(reply[i + 3])),
            )
            for i in range(1, len(reply), 4)
        ]
        return _int(reply[0]), rows

    async def running(
        self, keys: TopicKeys, *, offset: int, limit: int
    ) -> tuple[int, int, list[tuple[str, bytes | None, str | None, int]]]:
        """Run running.lua. Returns (now ms, leases held, [(id, envelope, error, lease
        deadline ms), ...]) in deadline order."""
        reply = await self._run(
            "running", (keys.prefix, keys.reserved, keys.errors), (offset, limit)
        )
        rows = [
            (_text(reply[i]), reply[i + 1] or None, _text(reply[i + 2]) if reply[i + 2] else None,
             int(float(reply[i + 3])))
            for i in range(2, len(reply), 4)
        ]  # fmt: skip
        return _int(reply[0]), _int(reply[1]), rows

    async def upcoming(
        self, keys: TopicKeys, *, limit: int, after: tuple[int, str] | None
    ) -> tuple[int, bool, list[tuple[str, int, str | None]]]:
        """Run upcoming.lua. Returns (now ms, whether more follow, [(id, due ms, header or
        None), ...]) for up to ``limit`` tasks after the cursor ``after`` (due ms, id)."""
        due, task_id = after if after is not None else ("", "")
        reply = await self._run("upcoming", (keys.prefix, keys.wheel), (limit, due, task_id))
        rows = [
            (
                _text(reply[i]),
                int(float(reply[i + 1])),
                _text(reply[i + 2]) if reply[i + 2] else None,
            )
            for i in range(2, len(reply), 3)
        ]
        return _int(reply[0]), bool(_int(reply[1])), rows

    async def timeline(
        self, keys: TopicKeys, *, width_ms: int, windows: int, exact_slots: int
    ) -> tuple[int, tuple[int, bool], list[tuple[int, bool]]]:
        """Run timeline.lua. Returns (now ms, (due now, estimated), [(count, estimated) per
        window of ``width_ms`` from now])."""
        reply = await self._run(
            "timeline", (keys.prefix, keys.wheel), (width_ms, windows, exact_slots)
        )
        counts = [(_int(reply[i]), bool(_int(reply[i + 1]))) for i in range(1, len(reply), 2)]
        return _int(reply[0]), counts[0], counts[1:]

    async def tick(
        self,
        keys: TopicKeys,
        *,
        mode: TickMode,
        fingerprint: str,
        tick_ms: int,
        task_id: str,
        body: bytes,
        drop_missed: bool = False,
    ) -> tuple[int, int, int]:
        """Run tick.lua (``drop_missed``: first drop the chain's last tick if it was judged
        missed and still waits). Returns (1 scheduled | 0 not later than the last tick | -1
        another schedule owns the chain, now ms, last tick ms or -1)."""
        reply = await self._run(
            "tick",
            (keys.prefix, keys.wheel, keys.dead, keys.errors, keys.periodic),
            (mode, fingerprint, tick_ms, task_id, body, keys.wake_publish, "1" if drop_missed else ""),
        )  # fmt: skip
        return _int(reply[0]), _int(reply[1]), _int(reply[2])

    async def tick_state(self, keys: TopicKeys) -> tuple[int, str | None, int]:
        """Run tick_state.lua. Returns (now ms, the chain's fingerprint or None, last tick
        ms or -1)."""
        now, fingerprint, last = await self._run("tick_state", (keys.periodic, keys.clock), ())
        return _int(now), _text(fingerprint) if fingerprint else None, _int(last)

    async def tick_look(
        self, keys: TopicKeys, fingerprint: str, slack_ms: int
    ) -> tuple[int, str | None, int, bool]:
        """Run tick_look.lua. Returns (now ms, the chain's fingerprint or None, last tick ms
        or -1, whether that tick was missed)."""
        reply = await self._run("tick_look", (keys.periodic, keys.clock), (fingerprint, slack_ms))
        return (
            _int(reply[0]),
            _text(reply[1]) if reply[1] else None,
            _int(reply[2]),
            _int(reply[3]) == 1,
        )

    async def clock(self, keys: TopicKeys, offset_ms: int | None = None) -> tuple[int, int]:
        """Run clock.lua: set the topic's test clock offset (when given; a change wakes the
        topic's workers). Returns (the topic's time, its offset), ms."""
        args = () if offset_ms is None else (offset_ms, keys.wake_publish)
        now, offset = await self._run("clock", (keys.clock,), args)
        return _int(now), _int(offset)
