"""send_many(on_conflict=...): each task of a batch is sent as ``send`` sends it (debounce for
a whole batch in one script call), and each gets its outcome back."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue, SendResult
from delayq.redis.scripts import send_keys, waiting_keys
from tests.helpers import (
    assert_counts_exact,
    assert_only_earlier_wakes,
    queue_keys,
    redis_now_ms,
    reserve,
    schedule_entries,
    stored,
    task_fields,
)

HOUR = 3_600


async def kill(queue: Queue, topic: str, task_id: str) -> None:
    """Send ``task_id`` and dead-letter it with a last error."""
    await queue.send(topic, {"v": "dead"}, task_id=task_id, max_attempts=1)
    _, _, leased = await reserve(queue, topic)
    [token] = [token for leased_id, token, _ in leased if leased_id == task_id]
    await queue.scripts.nack(
        queue.keys(topic), task_id, token, mode="retry", error="x", max_attempts=1
    )
    assert (await stored(queue, topic, task_id)).state == "dead"


async def outcomes(sent: list[SendResult]) -> list[tuple[str, str]]:
    return [(str(s), s.outcome) for s in sent]


async def test_a_mixed_batch_replaces_waiting_tasks_and_leaves_a_running_one(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {"v": "old"}, HOUR, task_id="delayed", max_attempts=7)
    await queue.send("t", {"v": "old"}, task_id="running")
    await reserve(queue, "t")  # leases "running" (the only ready task)
    await kill(queue, "t", "dead")
    await queue.send("t", {"v": "old"}, task_id="ready", ttr=30)
    before = await redis_now_ms(redis_client)

    sent = await queue.send_many(
        "t",
        [{"v": n} for n in range(6)],
        delay=[60, 0, 0, 5, 0, 120],
        task_ids=["delayed", "new-1", "running", "ready", "dead", "new-2"],
        on_conflict="replace",
    )

    assert all(isinstance(s, SendResult) for s in sent)
    assert await outcomes(sent) == [
        ("delayed", "replaced"), ("new-1", "created"), ("running", "reserved"),
        ("ready", "replaced"), ("dead", "created"), ("new-2", "created"),
    ]  # fmt: skip
    after = await redis_now_ms(redis_client)
    for task_id, body, delay_s in (("delayed", 0, 60), ("ready", 3, 5), ("new-2", 5, 120)):
        info = await stored(queue, "t", task_id)
        assert (info.state, info.body, info.attempts) == ("delayed", {"v": body}, 0)
        assert (info.max_attempts, info.ttr, info.last_error) == (5, 30, None)  # the defaults
        header, _ = await task_fields(redis_client, queue.keys("t"), task_id)
        assert header is not None and header.split(b",")[3] == b"0"  # the topic's ttr again
        due_ms = info.due_at.timestamp() * 1000
        assert before + delay_s * 1000 <= due_ms <= after + delay_s * 1000
    running = await stored(queue, "t", "running")
    assert (running.state, running.body, running.attempts) == ("reserved", {"v": "old"}, 1)
    revived = await stored(queue, "t", "dead")
    assert (revived.state, revived.body, revived.last_error) == ("ready", {"v": 4}, None)
    stats = (await queue.stats())["t"]
    assert (stats.delayed, stats.ready, stats.reserved, stats.dead) == (3, 2, 1, 0)
    await assert_counts_exact(redis_client, queue.keys("t"))


async def test_keep_is_the_default_and_reports_each_outcome(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {"v": "old"}, HOUR, task_id="live")
    sent = await queue.send_many("t", [{"v": 1}, {"v": 2}], task_ids=["live", "new"])
    assert await outcomes(sent) == [("live", "kept"), ("new", "created")]
    assert sent == ["live", "new"]  # still usable as the ids
    assert (await stored(queue, "t", "live")).body == {"v": "old"}
    generated = await queue.send_many("t", [{}, {}])
    assert [s.outcome for s in generated] == ["created", "created"]
    await assert_counts_exact(redis_client, queue.keys("t"))


@pytest.mark.parametrize("batch_size", [500, 1], ids=["one-batch", "batch-per-task"])
async def test_an_id_sent_twice_acts_as_two_sends_in_order(
    queue: Queue, redis_client: redis.asyncio.Redis, batch_size: int
) -> None:
    """With "replace" the last of an id's sends wins; with "keep" the first (as before)."""
    ids = ["a", "b", "a", "a", "b"]
    delays = [10, 20, 30, 40, 70]
    sent = await queue.send_many(
        "t", [{"v": n} for n in range(5)], delay=delays, task_ids=ids,
        on_conflict="replace", batch_size=batch_size,
    )  # fmt: skip
    assert [s.outcome for s in sent] == ["created", "created", "replaced", "replaced", "replaced"]
    a, b = await stored(queue, "t", "a"), await stored(queue, "t", "b")
    assert (a.body, b.body) == ({"v": 3}, {"v": 4})
    assert round(b.due_at.timestamp() - a.due_at.timestamp()) == 30  # 70 s and 40 s
    schedule = await schedule_entries(redis_client, queue.keys("t"))
    assert schedule == {
        "a": round(a.due_at.timestamp() * 1000),
        "b": round(b.due_at.timestamp() * 1000),
    }
    assert (await queue.stats())["t"].delayed == 2
    await assert_counts_exact(redis_client, queue.keys("t"))

    kept = await queue.send_many(
        "u", [{"v": n} for n in range(5)], delay=delays, task_ids=ids, batch_size=batch_size
    )
    assert [s.outcome for s in kept] == ["created", "created", "kept", "kept", "kept"]
    assert (await stored(queue, "u", "a")).body == {"v": 0}
    await assert_counts_exact(redis_client, queue.keys("u"))


async def test_repeated_sends_of_a_running_task_all_say_reserved(queue: Queue) -> None:
    await queue.send("t", {"v": "old"}, task_id="busy")
    await reserve(queue, "t")
    sent = await queue.send_many(
        "t", [{"v": 1}, {"v": 2}], task_ids=["busy", "busy"], on_conflict="replace"
    )
    assert [s.outcome for s in sent] == ["reserved", "reserved"]
    info = await stored(queue, "t", "busy")
    assert (info.state, info.body) == ("reserved", {"v": "old"})


async def test_a_retried_task_starts_afresh(queue: Queue) -> None:
    await queue.send("t", {"v": 1}, task_id="r")
    _, _, [(_, token, _)] = await reserve(queue, "t")
    await queue.scripts.nack(
        queue.keys("t"), "r", token, mode="retry", delay_ms=60_000, error="boom", max_attempts=5
    )
    [sent] = await queue.send_many("t", [{"v": 2}], task_ids=["r"], on_conflict="replace")
    assert sent.outcome == "replaced"
    info = await stored(queue, "t", "r")
    assert (info.state, info.attempts, info.last_error, info.body) == ("ready", 0, None, {"v": 2})


@pytest.mark.parametrize(("old", "new"), [(3, 0), (0, 5), (-2, 4)])
async def test_replacing_moves_a_task_between_schedule_and_priorities(
    queue: Queue, redis_client: redis.asyncio.Redis, old: int, new: int
) -> None:
    """The schedule's count, prio and prio:ready stay exact when the priority changes."""
    await queue.send_many("t", [{}, {}], task_ids=["due", "later"], delay=[0, HOUR], priority=old)
    await reserve(queue, "t", limit=0)  # promotes the due priority task into prio:ready
    sent = await queue.send_many(
        "t", [{"v": 1}, {"v": 2}], task_ids=["due", "later"], delay=[HOUR, 0],
        priority=new, on_conflict="replace",
    )  # fmt: skip
    assert [s.outcome for s in sent] == ["replaced", "replaced"]
    keys = queue.keys("t")
    index = await redis_client.zrange(keys.prio, 0, -1)
    assert sorted(index) == ([b"due", b"later"] if new else [])
    lease_order = await redis_client.zrange(keys.prio_ready, 0, -1)
    assert not any(member.endswith(b"due") for member in lease_order)  # the old entry went
    await assert_counts_exact(redis_client, keys)
    stats = (await queue.stats())["t"]
    assert (stats.delayed, stats.ready) == (1, 1)
    _, _, leased = await reserve(queue, "t")
    assert [(task_id, attempts) for task_id, _, attempts in leased] == [("later", 1)]
    assert (await stored(queue, "t", "later")).body == {"v": 2}


async def test_replacing_earlier_wakes_the_workers(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_many("t", [{}, {}], task_ids=["w", "x"], delay=600)
    await assert_only_earlier_wakes(
        redis_client, queue.keys("t").wake,
        later=lambda: queue.send_many("t", [{}], task_ids=["w"], delay=700, on_conflict="replace"),
        earlier=lambda: queue.send_many("t", [{}], task_ids=["x"], delay=0, on_conflict="replace"),
    )  # fmt: skip


@pytest.mark.parametrize("value", ["Replace", "update", None, 1])
async def test_a_bad_on_conflict_writes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, value: object
) -> None:
    with pytest.raises(InvalidInputError, match="on_conflict") as raised:
        await queue.send_many("t", [{}], task_ids=["x"], on_conflict=value)  # type: ignore[arg-type]
    assert isinstance(raised.value, ValueError)
    assert await queue_keys(redis_client, queue.name) == []


async def test_only_a_replacing_batch_carries_the_reserved_key(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain batch costs Redis what it did before on_conflict existed: the same KEYS and
    ARGV (the reserved key is the flag)."""
    calls: list[tuple[str, tuple[str, ...], int]] = []
    # The topic's shard count is read once per process, before its first use (shards.lua,
    # docs/cluster.md); what a batch costs is compared after that.
    assert await queue.shards.count("t") == 1
    run = queue.scripts._run

    async def spy(name: str, keys: Any, args: Any) -> Any:
        calls.append((name, tuple(keys), len(args)))
        return await run(name, keys, args)

    monkeypatch.setattr(queue.scripts, "_run", spy)
    await queue.send_many("t", [{}, {}], delay=5)
    await queue.send_many("t", [{}, {}], delay=5, on_conflict="replace")
    keys = queue.keys("t")
    assert calls == [
        ("send_many", waiting_keys(keys), 6 + 2 * 3),
        ("send_many", send_keys(keys), 6 + 2 * 3),
    ]
