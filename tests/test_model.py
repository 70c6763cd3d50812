"""Model-based test: the real Lua scripts on the session Redis against a plain-Python model.

Hypothesis drives send and send_many (keeping or replacing a live id, with or without a
priority, so that some tasks wait in the priority structures and leases interleave them with
the schedule; a batch may repeat an id and span several script calls) / cancel / reschedule / reserve /
ack / nack (retry, dead, release) / extend / lease expiry / replay over two topics and a
few fixed task ids, so ids collide (idempotent sends, replacements, re-sending a dead id,
stale fencing tokens).  After every
step, each task the model knows is in exactly one Redis structure, and ``get()`` and
``stats()`` agree with the model.

Timing is kept out of the model:

- delays are 0 (ready at once) or an hour (delayed for the whole run), so "delayed" vs
  "ready" never depends on how fast the test runs;
- the scripts run with a one-hour default lease, and a lease ends only when the
  ``expire_lease`` rule moves its deadline to the epoch with ``ZADD XX`` (what Redis
  would hold once the deadline passed).  ``extend`` may then give it a new deadline a
  minute away (or two hours), which no run lasts long enough to reach;
- due times and lease deadlines are learned from the scripts' replies (checked against
  Redis TIME read around each call) and then predicted exactly.

The async API runs on a private event loop (``loop.run_until_complete``) owned by each
state machine instance, so pytest-asyncio's loop is not involved.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import pytest
import redis.asyncio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from delayq import Queue, TaskInfo, TopicStats
from delayq.task import Envelope
from delayq.testing import PrivateRedis
from delayq.topic import TopicOptions
from tests.helpers import (
    DEFAULT_MAX_ATTEMPTS,
    LONG_TTR_MS,
    assert_counts_exact,
    counted,
    expire_lease,
    queue_keys,
    schedule_entries,
)

pytestmark = pytest.mark.slow  # the Hypothesis model test: the slow tier

T = TypeVar("T")
Key = tuple[str, str]  # (topic, task id)

TOPICS = ("a", "b")
IDS = ("t0", "t1", "t2")
HOUR = 3_600
TASK_TTR_S = 7_200

topics = st.sampled_from(TOPICS)
task_ids = st.sampled_from(IDS)
delays = st.sampled_from([0, 0, HOUR])
ALL_KEYS = [(topic, task_id) for topic in TOPICS for task_id in IDS]
# One lease operation in four uses an old token, to exercise fencing.
stale_tokens = st.integers(0, 3).map(lambda n: n == 3)


async def waiting_entries(client: redis.asyncio.Redis, keys: Any) -> dict[str, int]:
    """Every waiting id -> due ms: the schedule's (priority 0) and the priority index's, which
    never share an id; and the priority lease order agrees with the index up to its mark."""
    entries = await schedule_entries(client, keys)
    index = {m.decode(): int(s) for m, s in await client.zrange(keys.prio, 0, -1, withscores=True)}
    assert not set(entries) & set(index), "an id waits in the schedule and the priority index"
    mark = int(await client.get(keys.prio_mark) or -1)
    ready = {
        m.decode(): -int(s) for m, s in await client.zrange(keys.prio_ready, 0, -1, withscores=True)
    }
    promoted = {f"{due:013d}{task_id}" for task_id, due in index.items() if due <= mark}
    assert promoted <= set(ready), "an entry due by the mark is missing from the lease order"
    assert set(ready) <= {f"{due:013d}{task_id}" for task_id, due in index.items()}
    return entries | index


def pick_from(keys: Sequence[Key], data: st.DataObject) -> Key:
    """One of ``keys`` (not empty), drawn with the same shape however many there are.

    The model's state follows Redis's clock, so the same choices can meet a different
    number of keys in another run; hypothesis rejects a draw whose bounds change between
    runs (``FlakyStrategyDefinition``), so the index is drawn over every possible key.
    """
    return keys[data.draw(st.integers(0, len(ALL_KEYS) - 1), label="key") % len(keys)]


@dataclass
class ModelTask:
    """What the model believes about one task."""

    body: int
    max_attempts: int | None
    ttr_ms: int | None
    priority: int = 0
    state: Literal["scheduled", "reserved", "dead"] = "scheduled"
    attempts: int = 0
    due: int = 0
    """Schedule score (ms) while scheduled."""
    lease: int = 0
    """Lease deadline (ms) while reserved."""
    token: str = "0"
    stale: list[str] = field(default_factory=list)
    last_error: str | None = None
    reclaimed: bool = False
    """Rescheduled by a lease reclaim, which moves the score but not the envelope's due."""

    @property
    def limit(self) -> int:
        return self.max_attempts or DEFAULT_MAX_ATTEMPTS


class QueueMachine(RuleBasedStateMachine):
    redis_url: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.client = redis.asyncio.Redis.from_url(self.redis_url)
        self.queue = Queue(self.client, name=f"m{uuid.uuid4().hex[:12]}")
        self.tasks: dict[Key, ModelTask] = {}
        self.seq = dict.fromkeys(TOPICS, 0)

    def teardown(self) -> None:
        async def close() -> None:
            keys = await queue_keys(self.client, self.queue.name)
            if keys:
                await self.client.delete(*keys)
            await self.client.aclose()

        self.run(close())
        self.loop.close()

    # -- plumbing ---------------------------------------------------------------------------

    def run(self, step: Awaitable[T]) -> T:
        return self.loop.run_until_complete(step)

    def now(self) -> int:
        seconds, micros = self.run(self.client.time())
        return int(seconds) * 1000 + int(micros) // 1000

    def due(self, topic: str, task_id: str) -> int:
        """The task's due time as its schedule slot (or the priority index) holds it."""
        entries = self.run(waiting_entries(self.client, self.queue.keys(topic)))
        assert task_id in entries
        return entries[task_id]

    def pick(self, data: st.DataObject, state: str | None = None) -> Key:
        """A key in ``state`` four times in five, else any key (possibly unknown)."""
        matching = sorted(k for k, t in self.tasks.items() if state is None or t.state == state)
        in_state = data.draw(st.integers(0, 4), label="in state") > 0
        return pick_from(matching if in_state and matching else ALL_KEYS, data)

    def token_for(self, key: Key, stale: bool) -> str:
        task = self.tasks.get(key)
        if task is None:
            return "1"
        if stale:
            return task.stale[-1] if task.stale else "0"
        return task.token

    def holds_a_lease(self) -> bool:
        return any(task.state == "reserved" for task in self.tasks.values())

    def lease_is_current(self, key: Key, token: str) -> bool:
        task = self.tasks.get(key)
        return task is not None and task.state == "reserved" and token == task.token

    # -- producer rules ---------------------------------------------------------------------

    @initialize(keys=st.lists(st.tuples(topics, task_ids), min_size=1, max_size=4, unique=True))
    def start_with_ready_tasks(self, keys: list[Key]) -> None:
        """Every run starts with some ready tasks, so that reserve has work from step one."""
        for n, (topic, task_id) in enumerate(keys):
            self.send(topic, task_id, 0, None, None, n, replace=False, priority=0)

    @rule(
        topic=topics,
        task_id=task_ids,
        delay=delays,
        max_attempts=st.sampled_from([None, 1, 2]),
        ttr=st.sampled_from([None, TASK_TTR_S]),
        body=st.integers(0, 99),
        replace=st.sampled_from([False, False, True]),
        priority=st.sampled_from([0, 0, 0, 3, -2]),
    )
    def send(
        self,
        topic: str,
        task_id: str,
        delay: int,
        max_attempts: int | None,
        ttr: int | None,
        body: int,
        replace: bool,
        priority: int,
    ) -> None:
        key = (topic, task_id)
        before = self.now()
        on_conflict = "replace" if replace else "keep"
        sending = self.queue.send_delayed(
            topic, {"v": body}, delay, task_id=task_id, max_attempts=max_attempts, ttr=ttr,
            on_conflict=on_conflict, priority=priority,
        )  # fmt: skip
        sent = self.run(sending)
        after = self.now()
        assert sent == task_id
        current = self.tasks.get(key)
        live = current is not None and current.state != "dead"
        expected = "created"
        if live and current is not None:
            expected = "kept" if not replace else current.state  # "scheduled" or "reserved"
        assert sent.outcome == {"scheduled": "replaced"}.get(expected, expected)
        if expected in ("kept", "reserved"):
            return  # the live task is untouched (the invariant checks it)
        task = ModelTask(body, max_attempts, None if ttr is None else ttr * 1000, priority)
        task.due = self.due(topic, task_id)
        assert before + delay * 1000 <= task.due <= after + delay * 1000
        self.tasks[key] = task

    @rule(
        topic=topics,
        sends=st.lists(st.tuples(task_ids, delays, st.integers(0, 99)), min_size=1, max_size=4),
        max_attempts=st.sampled_from([None, 2]),
        ttr=st.sampled_from([None, TASK_TTR_S]),
        replace=st.booleans(),
        priority=st.sampled_from([0, 0, 3, -2]),
        batch_size=st.sampled_from([500, 2, 1]),
    )
    def send_many(
        self,
        topic: str,
        sends: list[tuple[str, int, int]],
        max_attempts: int | None,
        ttr: int | None,
        replace: bool,
        priority: int,
        batch_size: int,
    ) -> None:
        """A batch (ids may repeat) acts as its sends one by one, in the order given."""
        before = self.now()
        sending = self.queue.send_many(
            topic, [{"v": body} for _, _, body in sends], delay=[d for _, d, _ in sends],
            task_ids=[task_id for task_id, _, _ in sends], ttr=ttr, max_attempts=max_attempts,
            on_conflict="replace" if replace else "keep", priority=priority,
            batch_size=batch_size,
        )  # fmt: skip
        results = self.run(sending)
        after = self.now()
        assert results == [task_id for task_id, _, _ in sends]
        stored_with: dict[str, int] = {}  # id -> the delay of the send that stored it last
        for (task_id, delay, body), sent in zip(sends, results, strict=True):
            current = self.tasks.get((topic, task_id))
            expected = "created"
            if current is not None and current.state != "dead":
                expected = "kept" if not replace else current.state  # "scheduled" or "reserved"
            assert sent.outcome == {"scheduled": "replaced"}.get(expected, expected)
            if expected in ("created", "scheduled"):
                ttr_ms = None if ttr is None else ttr * 1000
                self.tasks[topic, task_id] = ModelTask(body, max_attempts, ttr_ms, priority)
                stored_with[task_id] = delay
        for task_id, delay in stored_with.items():
            task = self.tasks[topic, task_id]
            task.due = self.due(topic, task_id)
            assert before + delay * 1000 <= task.due <= after + delay * 1000

    @precondition(lambda self: self.tasks)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        key = self.pick(data)
        task = self.tasks.get(key)
        expected = task is not None and task.state in ("scheduled", "dead")
        assert self.run(self.queue.cancel(*key)) is expected
        if expected:
            del self.tasks[key]

    @precondition(lambda self: self.tasks)
    @rule(data=st.data(), delay=delays)
    def reschedule(self, data: st.DataObject, delay: int) -> None:
        key = self.pick(data, "scheduled")
        task = self.tasks.get(key)
        before = self.now()
        moved = self.run(self.queue.reschedule(*key, delay=delay))
        after = self.now()
        assert moved is (task is not None and task.state == "scheduled")
        if task is not None and moved:
            task.due = self.due(*key)
            assert before + delay * 1000 <= task.due <= after + delay * 1000
            task.reclaimed = False

    @precondition(lambda self: any(task.state == "dead" for task in self.tasks.values()))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        key = self.pick(data, "dead")
        task = self.tasks.get(key)
        before = self.now()
        replayed = self.run(self.queue.replay(*key))
        after = self.now()
        assert replayed is (task is not None and task.state == "dead")
        if task is not None and replayed:
            task.state, task.attempts, task.last_error, task.reclaimed = "scheduled", 0, None, False
            task.due = self.due(*key)
            assert before <= task.due <= after

    # -- consumer rules (the scripts a worker runs) -----------------------------------------

    @rule(topic=topics, limit=st.integers(1, 3))
    def reserve(self, topic: str, limit: int) -> None:
        now_us, wake, items = self.run(
            self.queue.scripts.reserve(
                self.queue.keys(topic),
                limit=limit,
                reclaim=100,
                ttr_ms=LONG_TTR_MS,
                max_attempts=DEFAULT_MAX_ATTEMPTS,
            )
        )
        now = now_us // 1000
        mine = {task_id: t for (top, task_id), t in self.tasks.items() if top == topic}
        self.reclaim(mine, now)

        # Highest priority first, each priority (0: the schedule) oldest due first, then by id.
        due = sorted(
            (-t.priority, t.due, task_id)
            for task_id, t in mine.items()
            if t.state == "scheduled" and t.due <= now
        )
        expected = [task_id for _, _, task_id in due][:limit]
        assert [task_id for task_id, _ in items] == expected
        for n, (task_id, raw) in enumerate(items, start=1):
            task, envelope = mine[task_id], Envelope.parse(raw)
            task.state, task.attempts = "reserved", task.attempts + 1
            task.stale.append(task.token)
            task.token = str(self.seq[topic] + n)
            task.lease = now + (task.ttr_ms or LONG_TTR_MS)
            assert (envelope.attempts, envelope.token) == (task.attempts, task.token)
            assert envelope.body == b'{"v":%d}' % task.body
        self.seq[topic] += len(items)

        pending = [t.due for t in mine.values() if t.state == "scheduled"]
        pending += [t.lease for t in mine.values() if t.state == "reserved"]
        assert wake == (min(pending) if pending else -1)

    def reclaim(self, mine: dict[str, ModelTask], now: int) -> None:
        """Step 1 of reserve.lua: a lease past its deadline is a failed attempt."""
        for task in mine.values():
            if task.state == "reserved" and task.lease <= now:
                task.last_error = (
                    "LeaseExpired: no ack within the lease "
                    f"(attempt {task.attempts} of {task.limit})"
                )
                if task.attempts >= task.limit:
                    task.state = "dead"
                else:
                    task.state, task.due, task.reclaimed = "scheduled", now, True

    @precondition(lambda self: self.holds_a_lease())
    @rule(data=st.data(), stale=stale_tokens)
    def ack(self, data: st.DataObject, stale: bool) -> None:
        key = self.pick(data, "reserved")
        token = self.token_for(key, stale)
        expected = self.lease_is_current(key, token)
        assert self.run(self.queue.scripts.ack(self.queue.keys(key[0]), [(key[1], token)])) == [
            expected
        ]
        if expected:
            del self.tasks[key]

    @precondition(lambda self: self.holds_a_lease())
    @rule(
        data=st.data(),
        stale=stale_tokens,
        mode=st.sampled_from(["retry", "dead", "release"]),
        delay=delays,
        error=st.sampled_from(["", "ValueError: boom"]),
    )
    def nack(
        self,
        data: st.DataObject,
        stale: bool,
        mode: Literal["retry", "dead", "release"],
        delay: int,
        error: str,
    ) -> None:
        key = self.pick(data, "reserved")
        token = self.token_for(key, stale)
        current = self.lease_is_current(key, token)
        before = self.now()
        outcome, due = self.run(
            self.queue.scripts.nack(
                self.queue.keys(key[0]),
                key[1],
                token,
                mode=mode,
                delay_ms=delay * 1000,
                error=error,
                max_attempts=DEFAULT_MAX_ATTEMPTS,
            )
        )
        after = self.now()
        if not current:
            assert outcome == 0
            return
        task = self.tasks[key]
        task.last_error = error or task.last_error
        if mode == "dead" or (mode == "retry" and task.attempts >= task.limit):
            assert outcome == 2
            task.state = "dead"
            return
        assert outcome == 1
        if mode == "release":
            task.attempts, delay = max(task.attempts - 1, 0), 0
        assert before + delay * 1000 <= due <= after + delay * 1000
        task.state, task.due, task.reclaimed = "scheduled", due, False

    @precondition(lambda self: self.holds_a_lease())
    # The short extension is a minute, not a second: a lease that could run out for real
    # while the machine is slow would make what later rules draw depend on timing, which
    # Hypothesis reports as inconsistent data when it replays the example.
    @rule(data=st.data(), stale=stale_tokens, ms=st.sampled_from([60_000, 2 * LONG_TTR_MS]))
    def extend(self, data: st.DataObject, stale: bool, ms: int) -> None:
        key = self.pick(data, "reserved")
        token = self.token_for(key, stale)
        before = self.now()
        deadline = self.run(self.queue.scripts.extend(self.queue.keys(key[0]), key[1], token, ms))
        after = self.now()
        if not self.lease_is_current(key, token):
            assert deadline == 0
            return
        task = self.tasks[key]
        if deadline == task.lease:  # never shortened: the wanted deadline was not later
            assert before + ms <= task.lease
        else:
            assert max(task.lease, before + ms) <= deadline <= after + ms
            task.lease = deadline

    @precondition(lambda self: self.holds_a_lease())
    @rule(data=st.data())
    def expire_lease(self, data: st.DataObject) -> None:
        reserved = sorted(k for k, t in self.tasks.items() if t.state == "reserved")
        topic, task_id = pick_from(reserved, data)
        self.run(expire_lease(self.client, self.queue.keys(topic), task_id))
        self.tasks[topic, task_id].lease = 1

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        now, rows, stats = self.run(self.read_everything())
        for key, (structures, info) in rows.items():
            self.check_task(self.tasks.get(key), structures, info, now)
        assert stats == self.expected_stats(now)
        for topic in TOPICS:
            self.run(assert_counts_exact(self.client, self.queue.keys(topic)))

    async def read_everything(
        self,
    ) -> tuple[int, dict[Key, tuple[list[Any], TaskInfo | None]], dict[str, TopicStats]]:
        """Redis's clock, each known id's raw structures and ``get()``, and ``stats()``."""
        seconds, micros = await self.client.time()
        every = [(topic, task_id) for topic in TOPICS for task_id in IDS]
        schedules = {t: await waiting_entries(self.client, self.queue.keys(t)) for t in TOPICS}
        async with self.client.pipeline(transaction=False) as pipe:
            for topic, task_id in every:
                keys = self.queue.keys(topic)
                pipe.zscore(keys.reserved, task_id)
                pipe.zscore(keys.dead, task_id)
                pipe.hexists(keys.bucket(task_id), task_id)
            flat: list[Any] = await pipe.execute()
        infos = await asyncio.gather(*(self.queue.get(*key) for key in every))
        rows = {
            key: ([schedules[key[0]].get(key[1]), *flat[3 * n : 3 * n + 3]], infos[n])
            for n, key in enumerate(every)
        }
        return int(seconds) * 1000 + int(micros) // 1000, rows, counted(await self.queue.stats())

    @staticmethod
    def check_task(
        task: ModelTask | None, structures: list[Any], info: TaskInfo | None, now: int
    ) -> None:
        scheduled, reserved, dead, stored = structures
        if task is None:
            assert (scheduled, reserved, dead, stored, info) == (None, None, None, False, None)
            return
        where = {"scheduled": scheduled, "reserved": reserved, "dead": dead}
        assert [state for state, score in where.items() if score is not None] == [task.state]
        assert stored
        assert info is not None
        expected_state: str = task.state
        if task.state == "scheduled":
            assert scheduled == task.due
            expected_state = "ready" if task.due <= now else "delayed"
            if not task.reclaimed:
                assert round(info.due_at.timestamp() * 1000) == task.due
        assert info.state == expected_state
        # No process registered the topics: the task's own limit, else the default.
        limit = task.max_attempts or TopicOptions().max_attempts
        assert (info.attempts, info.max_attempts) == (task.attempts, limit)
        assert (info.body, info.last_error) == ({"v": task.body}, task.last_error)
        if task.state == "reserved":
            assert reserved == task.lease
            assert info.lease_deadline is not None
            assert round(info.lease_deadline.timestamp() * 1000) == task.lease
        else:
            assert info.lease_deadline is None
        assert (info.dead_at is not None) == (task.state == "dead")

    def expected_stats(self, now: int) -> dict[str, TopicStats]:
        expected: dict[str, TopicStats] = {}
        for topic in TOPICS:
            mine = [t for (top, _), t in self.tasks.items() if top == topic]
            if mine:
                waiting = [t for t in mine if t.state == "scheduled"]
                expected[topic] = TopicStats(
                    delayed=sum(t.due > now for t in waiting),
                    ready=sum(t.due <= now for t in waiting),
                    reserved=sum(t.state == "reserved" for t in mine),
                    dead=sum(t.state == "dead" for t in mine),
                )
        return expected


# Passing takes ~15 s; the larger timeout leaves Hypothesis room to shrink a failure.
@pytest.mark.timeout(600)
def test_scripts_agree_with_the_model(redis_server: PrivateRedis) -> None:
    machine = type("Machine", (QueueMachine,), {"redis_url": redis_server.url})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=50,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
