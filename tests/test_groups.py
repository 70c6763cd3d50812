"""Groups: a grouped topic leases round-robin over groups, at most max_running_per_group of a
group at once and rate_limit_per_group starts a window, fleet-wide; ungrouped topics pay
nothing (real Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from pydantic import BaseModel

from delayq import InvalidInputError, Queue
from tests.helpers import expire_lease, queue_keys, reserve, stored


class Sync(BaseModel):
    account_id: int


async def ack(queue: Queue, topic: str, leased: list[tuple[str, str, int]]) -> list[bool]:
    return await queue.scripts.ack(queue.keys(topic), [(i, t) for i, t, _ in leased])


def grouped(queue: Queue, name: str = "t", **options: Any) -> None:
    """Register a grouped topic ``name`` whose worker declared ``options`` (the declaration
    a worker's start writes to the controls hash, done here without a worker)."""

    @queue.topic(name, **options)
    async def handler(body: Any) -> None: ...


async def declare(queue: Queue, name: str = "t") -> None:
    from delayq.worker.declare import declared

    await queue.scripts.control(queue.keys(name), declared(queue.topics[name]))


async def group_of(queue: Queue, task_id: str, topic: str = "t") -> str | None:
    return (await stored(queue, topic, task_id)).group


# --- derivation and validation -------------------------------------------------------


async def test_group_from_a_field_a_callable_or_explicit(queue: Queue) -> None:
    @queue.topic("sync", group_by="account_id")
    async def sync(body: Sync) -> None: ...

    @queue.topic("call", group_by=lambda b: b["tenant"])
    async def call(body: dict[str, str]) -> None: ...

    await sync.send(Sync(account_id=7), task_id="a")
    await queue.send("sync", {"account_id": 8}, task_id="b")
    await queue.send("sync", {"account_id": 9}, task_id="c", group="explicit")
    await call.send({"tenant": "acme"}, task_id="d")
    await queue.send("plain", {}, task_id="e", group=5)  # a topic not registered grouped
    await queue.send("plain", {}, task_id="f")
    assert await group_of(queue, "a", "sync") == "7"
    assert await group_of(queue, "b", "sync") == "8"
    assert await group_of(queue, "c", "sync") == "explicit"
    assert await group_of(queue, "d", "call") == "acme"
    assert await group_of(queue, "e", "plain") == "5"
    assert await group_of(queue, "f", "plain") is None


async def test_a_grouped_topic_without_group_by_puts_tasks_in_group_empty(queue: Queue) -> None:
    grouped(queue, max_running_per_group=1)
    await queue.send("t", {}, task_id="x")
    assert await group_of(queue, "x") == ""
    _, _, leased = await reserve(queue, "t")
    assert [i for i, _, _ in leased] == ["x"]


@pytest.mark.parametrize(
    ("group", "message"),
    [("", "1 to 128 bytes"), ("x" * 129, "1 to 128 bytes"), ("a,b", "comma"),
     ("a\nb", "control"), (1.5, "str or an int"), (True, "str or an int")],
)  # fmt: skip
async def test_bad_groups_write_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, group: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await queue.send("t", {}, group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=message):
        await queue.send_many("t", [{}, {}], group=group)  # type: ignore[arg-type]
    assert await queue_keys(redis_client, queue.name) == []


async def test_group_by_failures_name_the_field(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    @queue.topic("sync", group_by="account_id")
    async def sync(body: dict[str, Any]) -> None: ...

    @queue.topic("call", group_by=lambda b: b["tenant"])
    async def call(body: dict[str, Any]) -> None: ...

    with pytest.raises(InvalidInputError, match="group_by field 'account_id'"):
        await queue.send("sync", {"other": 1})
    with pytest.raises(InvalidInputError, match="group_by field 'account_id'"):
        await queue.send("sync", {"account_id": None})
    with pytest.raises(InvalidInputError, match="group_by failed"):
        await queue.send("call", {})
    with pytest.raises(InvalidInputError, match="group_by"):
        await queue.send_many("sync", [{"account_id": 1}, {"account_id": [1]}])
    assert await queue_keys(redis_client, queue.name) == []


def test_bad_topic_options(queue: Queue) -> None:
    with pytest.raises(InvalidInputError, match="max_running_per_group"):
        queue.topic("a", max_running_per_group=0)
    with pytest.raises(InvalidInputError, match="rate_limit_per_group"):
        queue.topic("b", rate_limit_per_group="10/d")
    with pytest.raises(InvalidInputError, match="group_by"):
        queue.topic("c", group_by=3)  # type: ignore[arg-type]


# --- the cap, the rate and fairness ----------------------------------------------------


async def test_fairness_round_robin_over_groups(queue: Queue) -> None:
    grouped(queue, group_by="g")
    await queue.send_many("t", [{"g": "big"}] * 30, task_ids=[f"big-{n:02}" for n in range(30)])
    for n in range(5):
        await queue.send_many("t", [{"g": f"s{n}"}] * 2, task_ids=[f"s{n}-0", f"s{n}-1"])
    _, _, first = await reserve(queue, "t", limit=6)
    # One task of each of the 6 groups before any group's second.
    assert sorted(i.split("-")[0] for i, _, _ in first) == ["big", "s0", "s1", "s2", "s3", "s4"]
    _, _, second = await reserve(queue, "t", limit=6)
    assert sorted(i.split("-")[0] for i, _, _ in second) == ["big", "s0", "s1", "s2", "s3", "s4"]
    _, _, rest = await reserve(queue, "t", limit=100)
    assert [i for i, _, _ in rest] == [f"big-{n:02}" for n in range(2, 30)]  # due order


async def test_cap_holds_and_each_ending_frees_the_slot(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    grouped(queue, group_by="g", max_running_per_group=1)
    await declare(queue)
    await queue.send_many("t", [{"g": "a"}] * 6, task_ids=[f"a{n}" for n in range(6)])
    await queue.send("t", {"g": "b"}, task_id="b0")

    async def lease() -> list[tuple[str, str, int]]:
        return (await reserve(queue, "t", limit=10))[2]

    first = await lease()
    assert sorted(i for i, _, _ in first) == ["a0", "b0"]
    assert await lease() == []  # a is at its cap, b is empty
    a0 = next(x for x in first if x[0] == "a0")
    assert await ack(queue, "t", [a0]) == [True]  # ack frees it
    [a1] = await lease()
    assert a1[0] == "a1" and await lease() == []
    keys = queue.keys("t")
    assert (await queue.scripts.nack(keys, "a1", a1[1], mode="retry", delay_ms=0,
                                     max_attempts=5))[0] == 1  # fmt: skip
    [again] = await lease()  # retry frees it; the retried task waits in its group's queue
    assert again[0] in ("a1", "a2")
    assert (await queue.scripts.nack(keys, again[0], again[1], mode="dead", max_attempts=5))[0] == 2
    [nxt] = await lease()  # dead-lettering frees it
    await expire_lease(redis_client, keys, nxt[0])
    reclaimed = await lease()  # an expired lease frees it (and its task waits again)
    assert len(reclaimed) == 1
    assert await redis_client.hget(keys.prefix + "grp:run", "a") == b"1"


async def test_cap_across_consumers_never_exceeded(queue: Queue, queues: Any) -> None:
    """Four queues (their own connections) lease and ack concurrently: at no moment does a
    group hold more than its cap of leases, and every task runs."""
    grouped(queue, group_by="g", max_running_per_group=2)
    await declare(queue)
    await queue.send_many("t", [{"g": f"g{n % 5}"} for n in range(100)])
    running: dict[str, int] = {}
    worst, finished = 0, 0

    async def consume(q: Queue) -> None:
        nonlocal worst, finished
        while finished < 100:
            _, _, leased = await reserve(q, "t", limit=3)
            groups = [str((await stored(q, "t", task_id)).group) for task_id, _, _ in leased]
            for g in groups:
                running[g] = running.get(g, 0) + 1
                worst = max(worst, running[g])
            await asyncio.sleep(0.001)  # hold the leases while the others lease
            for g in groups:
                running[g] -= 1
            await ack(q, "t", leased)
            finished += len(leased)

    await asyncio.gather(*(consume(q) for q in [queue, queues(), queues(), queues()]))
    assert finished == 100
    assert worst == 2


async def test_rate_per_group(queue: Queue) -> None:
    grouped(queue, group_by="g", rate_limit_per_group="3/h")
    await declare(queue)
    await queue.send_many("t", [{"g": "a"}] * 5 + [{"g": "b"}] * 5)
    now, next_ms, leased = await reserve(queue, "t", limit=100)
    # 3/h paces at ceil(3/20) = 1 a sub-window (3 minutes): one start of each group now,
    # then none until the next sub-window, which the worker is told to wait for.
    assert sorted([str(await group_of(queue, i)) for i, _, _ in leased]) == ["a", "b"]
    assert (await reserve(queue, "t", limit=100))[2] == []
    assert now < next_ms <= now + 180_000
    keys = queue.keys("t")
    assert (await queue.scripts.stats(keys)).ready == 8


async def test_a_blocked_group_is_not_scanned(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """With a group at its cap holding many ready tasks, a reserve looks at it not at all:
    it sits in grp:full (not in the ring), and its queue is untouched."""
    grouped(queue, group_by="g", max_running_per_group=1)
    await declare(queue)
    await queue.send_many("t", [{"g": "big"}] * 10_000, batch_size=1000)
    _, _, [held] = await reserve(queue, "t", limit=5)
    keys = queue.keys("t")
    assert await redis_client.zscore(keys.prefix + "grp:full", "big") is not None
    assert await redis_client.zcard(keys.prefix + "grp:ring") == 0
    await queue.send("t", {"g": "small"}, task_id="small")
    await redis_client.config_resetstat()
    _, _, leased = await reserve(queue, "t", limit=5)
    assert [i for i, _, _ in leased] == ["small"]
    stats = await redis_client.info("commandstats")
    # The blocked group's 9,999 ready tasks were never read: a handful of ZSET calls in all.
    zcalls = sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_z"))
    assert zcalls < 40
    assert await redis_client.zcard(keys.prefix + "grp:q:big") == 9_999
    assert held[0] != "small"


# --- other transitions -------------------------------------------------------------------


async def test_cancel_reschedule_get_stats_replay(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    grouped(queue, group_by="g", max_running_per_group=1)
    await declare(queue)
    await queue.send_delayed("t", {"g": "a"}, 60, task_id="later")
    await queue.send("t", {"g": "a"}, task_id="now")
    assert (await stored(queue, "t", "later")).state == "delayed"
    assert (await stored(queue, "t", "now")).state == "ready"
    stats = (await queue.stats())["t"]
    assert (stats.delayed, stats.ready) == (1, 1)
    assert await queue.reschedule("t", "later", delay=0)
    assert (await stored(queue, "t", "later")).state == "ready"
    assert await queue.cancel("t", "now")
    assert await queue.get("t", "now") is None
    _, _, [leased] = await reserve(queue, "t")
    assert leased[0] == "later"
    assert (await stored(queue, "t", "later")).state == "reserved"
    keys = queue.keys("t")
    await queue.scripts.nack(keys, "later", leased[1], mode="dead", max_attempts=5)
    assert (await stored(queue, "t", "later")).state == "dead"
    assert await queue.replay("t", "later")
    info = await stored(queue, "t", "later")
    assert (info.state, info.group) == ("ready", "a")
    _, _, [again] = await reserve(queue, "t")
    await ack(queue, "t", [again])
    stats = await queue.scripts.stats(keys)
    assert (stats.delayed, stats.ready, stats.reserved) == (0, 0, 0)
    assert await redis_client.exists(keys.prefix + "grp:run") == 0


async def test_replace_moves_a_grouped_task(queue: Queue) -> None:
    await queue.send_delayed("t", {}, 60, task_id="x", group="a")
    result = await queue.send("t", {"v": 2}, task_id="x", group="b", on_conflict="replace")
    assert result.outcome == "replaced"
    info = await stored(queue, "t", "x")
    assert (info.state, info.group, info.body) == ("ready", "b", {"v": 2})
    _, _, leased = await reserve(queue, "t")
    assert [i for i, _, _ in leased] == ["x"]


async def test_ungrouped_topic_has_no_group_keys(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send("t", {}, task_id="x")
    _, _, leased = await reserve(queue, "t")
    await ack(queue, "t", leased)
    assert not [k for k in await queue_keys(redis_client, queue.name) if ":grp:" in k]


async def test_priority_orders_within_a_due_ms(queue: Queue) -> None:
    await queue.send_many("t", [{}] * 3, task_ids=["lo", "zero", "hi"], group="a", priority=0)
    # (send_many's tasks share one due ms: priority then id orders them)
    await queue.send_many("t", [{}], task_ids=["p"], group="b", priority=5)
    _, _, leased = await reserve(queue, "t", limit=10)
    assert {i for i, _, _ in leased} == {"lo", "zero", "hi", "p"}


async def test_raising_the_cap_lets_a_full_group_lease_at_once(queue: Queue) -> None:
    grouped(queue, group_by="g", max_running_per_group=1)
    await declare(queue)
    await queue.send_many("t", [{"g": "a"}] * 3)
    assert len((await reserve(queue, "t"))[2]) == 1
    assert (await reserve(queue, "t"))[2] == []
    await queue.scripts.control(queue.keys("t"), {"group_max_running": "3"})
    assert len((await reserve(queue, "t"))[2]) == 2


async def test_upcoming_timeline_dead_bulk_and_forget(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send("t", {}, task_id="plain-now")
    await queue.send("t", {}, task_id="grouped-now", group="a")
    await queue.send_delayed("t", {}, 30, task_id="grouped-later", group="b")
    page = await queue.upcoming("t", limit=10)
    assert [t.id for t in page.tasks] == ["plain-now", "grouped-now", "grouped-later"]
    timeline = await queue.timeline("t", window=60, windows=1)
    assert (timeline.due, timeline.windows[0].count) == (2, 1)
    # Dead-letter both grouped tasks (the ready one and, rescheduled to now, the later one).
    assert await queue.reschedule("t", "grouped-later", delay=0)
    keys = queue.keys("t")
    _, _, leased = await reserve(queue, "t", limit=10)
    for task_id, token, _ in leased:
        await queue.scripts.nack(keys, task_id, token, mode="dead", max_attempts=5)
    assert await queue.admin.replay_dead("t") == 3
    assert {t.id for t in (await queue.upcoming("t", limit=10)).tasks} == {
        "plain-now",
        "grouped-now",
        "grouped-later",
    }
    assert not await queue.admin.forget("t")  # it holds tasks
    _, _, leased = await reserve(queue, "t", limit=10)
    await ack(queue, "t", leased)
    assert await queue.admin.forget("t")
    assert await queue_keys(redis_client, queue.name) == []


async def test_a_released_lease_frees_its_place_and_waits_again(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    """A graceful stop releases its leases (nack 'release'): the place frees and the task
    is due again in its group, its attempt not counted."""
    grouped(queue, group_by="g", max_running_per_group=1)
    await declare(queue)
    await queue.send_many("t", [{"g": "a"}] * 2, task_ids=["first", "second"])
    [(task_id, token, _)] = (await reserve(queue, "t"))[2]
    assert task_id == "first"
    keys = queue.keys("t")
    status, _ = await queue.scripts.nack(keys, task_id, token, mode="release", max_attempts=5)
    assert status == 1
    assert await redis_client.hget(keys.prefix + "grp:run", "a") is None
    info = await stored(queue, "t", "first")
    assert (info.state, info.attempts, info.group) == ("ready", 0, "a")
    [(again, _, _)] = (await reserve(queue, "t"))[2]
    assert again in ("first", "second")
