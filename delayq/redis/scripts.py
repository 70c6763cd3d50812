"""The Lua scripts, loaded from ``delayq/redis/lua/`` and wrapped in typed methods.

:class:`Scripts` is the scripts of a task's life (:class:`~delayq.redis.lifecycle.TaskScripts`)
plus those that look tasks up and manage them: cancel, reschedule, replay, get, stats, dead
letters, the upcoming schedule, a grouped topic's groups, controls and periodic ticks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from delayq.redis.lifecycle import (
    MAX_UNPACK,
    SEND_STATUS,
    NackMode,
    TaskScripts,
    TickMode,
    _int,
    _text,
    ack_keys,
    reserve_keys,
    send_keys,
    waiting_keys,
)
from delayq.redis.replies import Counts, Found
from delayq.redis.source import lua_source, test_clock_on

if TYPE_CHECKING:
    from collections.abc import Mapping

    from delayq.redis.keys import TopicKeys

__all__ = [
    "MAX_UNPACK",
    "SEND_STATUS",
    "NackMode",
    "Scripts",
    "TickMode",
    "ack_keys",
    "reserve_keys",
    "send_keys",
    "waiting_keys",
]


class Scripts(TaskScripts):
    """Typed wrappers around delayq's Lua scripts for one Redis client.

    Args:
        client: runs the scripts.
        lane: optionally, a :class:`~delayq.redis.lane.ScriptLane` to the same Redis, which then
            runs every call but durable sends (their ``WAIT`` blocks the connection it runs
            on, so they go through ``client``): concurrent calls through it are pipelined.
    """

    async def cancel(
        self, keys: TopicKeys, task_id: str, history: int = 0, results: int = 0, *,
        running: bool = False,
    ) -> int:  # fmt: skip
        """Run cancel.lua. Returns 1 when a delayed, ready or dead task was removed, 2 when
        ``running`` and a reserved one was (its lease ended, its worker told: an abort), 0
        when nothing was; a topic this process registered with ``history`` records it, and
        with ``results`` (ms) stores its result (0: as its workers say)."""
        args = (task_id, history, results, keys.wake_publish)
        if running:
            return _int(
                await self._run("cancel", (*waiting_keys(keys), keys.reserved, keys.controls), args)
            )
        return _int(await self._run("cancel", waiting_keys(keys), args))

    async def result(
        self, keys: TopicKeys, task_id: str, kept: int = 1
    ) -> tuple[int, bytes | None]:
        """Run result.lua. Returns (0 no result | 1 not finished | 2 finished, its stored
        result); ``kept`` -1: the topic is not registered here (its workers' setting says
        whether it keeps results)."""
        reply = await self._run("result", (keys.prefix, keys.dead), (task_id, min(kept, 1)))
        return _int(reply[0]), reply[1] if len(reply) > 1 else None

    MANAGEMENT = ("groups",)
    """The scripts registered here rather than in ``TaskScripts.load`` (read by operators)."""

    def load(self) -> None:
        """Register the task scripts, then :attr:`MANAGEMENT`'s (under a test clock, the copies
        that read it)."""
        super().load()
        clocked = test_clock_on()
        for name in self.MANAGEMENT:
            self._scripts[name] = self._client.register_script(lua_source(name, test_clock=clocked))

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

    async def groups(
        self, keys: TopicKeys, *, limit: int, visit: int
    ) -> tuple[bool, list[tuple[str, int, int, int, bool]]]:
        """Run groups.lua: visit at most ``visit`` groups of the topic and return the ``limit``
        with the most ready tasks.  Returns (whether every group was visited, [(group, ready,
        delayed, running, limited), ...]), most ready first."""
        reply = await self._run("groups", (keys.prefix, keys.controls), (limit, visit))
        rows = [
            (_text(reply[i]), _int(reply[i + 1]), _int(reply[i + 2]), _int(reply[i + 3]),
             bool(_int(reply[i + 4])))
            for i in range(2, len(reply), 5)
        ]  # fmt: skip
        return bool(_int(reply[1])), rows

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

    async def archived(self, keys: TopicKeys, destination: str, seq: int) -> int:
        """Run archived.lua: move ``destination``'s archive cursor of this shard forward to
        ``seq`` (never back).  Returns the cursor after the call."""
        return _int(await self._run("archived", (keys.archive,), (destination, seq)))
