"""Operating a topic as a whole: every dead letter at once, forgetting a topic, and a
cancel that carries this process's history setting, against a real Redis."""

from __future__ import annotations

import asyncio

import pytest

from delayq import Queue, admin
from delayq.topic import TopicOptions
from delayq.worker.rollup import record_settings


async def _bury(queue: Queue, topic: str, count: int) -> list[str]:
    """``count`` dead letters of ``topic``, oldest first."""
    ids = [f"d{n}" for n in range(count)]
    for task_id in ids:
        await queue.send(topic, {"id": task_id}, task_id=task_id)
    for task in await queue.consumer.lease(topic, limit=count):
        await queue.consumer.nack(task.lease_token, dead=True, error="boom")
    assert (await queue.stats([topic]))[topic].dead == count
    return ids


async def test_replay_dead_moves_every_letter_back_in_batches(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "DEAD_BATCH", 2)  # five letters: three script calls
    ids = await _bury(queue, "t", 5)
    assert await queue.admin.replay_dead("t") == 5
    counts = (await queue.stats(["t"]))["t"]
    assert (counts.ready, counts.dead) == (5, 0)
    for task_id in ids:
        info = await queue.get("t", task_id)
        assert info is not None and info.attempts == 0 and info.last_error is None
    assert await queue.admin.replay_dead("t") == 0


async def test_delete_dead_records_each_as_cancelled_when_the_topic_keeps_history(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin, "DEAD_BATCH", 2)

    @queue.topic("h", history=50)
    async def handler(body: object) -> None: ...

    ids = await _bury(queue, "h", 3)
    await queue.send_delayed("h", {}, 60, task_id="alive")
    assert await queue.admin.delete_dead("h") == 3
    assert "h" in await queue.stats(["h"])  # the delayed task stays
    assert (await queue.stats(["h"]))["h"].dead == 0
    records = await queue.history("h")  # each died, then was deleted
    assert sorted(r.id for r in records if r.outcome == "cancelled") == ids
    assert sorted(r.id for r in records if r.outcome == "dead") == ids
    assert [await queue.get("h", i) for i in ids] == [None] * 3


async def test_a_cancel_carries_the_history_setting_of_the_process_that_registered_it(
    queue: Queue,
) -> None:
    # No worker ever started, so nothing recorded the setting in Redis.
    @queue.topic("c", history=10)
    async def handler(body: object) -> None: ...

    await queue.send_delayed("c", {"n": 1}, 60, task_id="x")
    assert await queue.cancel("c", "x")
    (record,) = await queue.history("c")
    assert (record.id, record.outcome, record.body) == ("x", "cancelled", {"n": 1})


async def test_forget_cleans_a_topic_that_holds_no_task(queue: Queue) -> None:
    await queue.send_delayed("typo", {}, 60, task_id="a")
    await queue.pause("typo")
    assert not await queue.admin.forget("typo")  # it holds a task
    assert await queue.cancel("typo", "a")
    assert await queue.admin.forget("typo")
    assert "typo" not in await queue.topic_names()
    keys = queue.keys("typo")
    assert await queue.redis.exists(*keys.stored()) == 0
    assert await queue.stats(["typo"]) == {}  # the pause went too


async def test_an_idle_sweep_forgets_only_what_stayed_idle_that_long(
    queue: Queue, redis_url: str
) -> None:
    await queue.send("quiet", {}, task_id="a")
    (task,) = await queue.consumer.lease("quiet")
    await queue.consumer.ack(task.lease_token)
    await queue.pause("held")
    idle = 0.2
    assert not await queue.admin.forget("quiet", idle=idle)  # first seen idle now
    assert not await queue.admin.forget("held", idle=idle)  # controls keep a topic
    # A lease since the last look starts the wait again.
    await queue.send("quiet", {}, task_id="b")
    (task,) = await queue.consumer.lease("quiet")
    await queue.consumer.ack(task.lease_token)
    loop = asyncio.get_running_loop()
    restarted = loop.time()
    assert not await queue.admin.forget("quiet", idle=idle)
    async with asyncio.timeout(5):
        while not await queue.admin.forget("quiet", idle=idle):
            await asyncio.sleep(0.02)
    assert loop.time() - restarted >= idle * 0.9  # Redis's clock against ours
    assert "quiet" not in await queue.topic_names()
    assert "held" in await queue.topic_names()
    # Sent to again (by a producer that last named it a while ago), it comes back.
    producer = Queue.from_url(redis_url, name=queue.name)
    try:
        await producer.send("quiet", {}, task_id="c")
    finally:
        await producer.close()
    assert "quiet" in await queue.topic_names()


async def test_a_consumer_that_never_registered_the_topic_records_its_history(
    queue: Queue, redis_url: str
) -> None:
    # What a worker of the topic records when it starts (its topic has history=10).
    await record_settings(queue.redis, {queue.keys("h"): TopicOptions(history=10)})
    consumer = Queue.from_url(redis_url, name=queue.name)  # as `delayq web` with no app
    try:
        await consumer.send("h", {"n": 1}, task_id="ok")
        await consumer.send("h", {"n": 2}, task_id="bad")
        leases = {t.id: t for t in await consumer.consumer.lease("h", limit=2)}
        await consumer.consumer.ack(leases["ok"].lease_token)
        await consumer.consumer.nack(leases["bad"].lease_token, dead=True, error="boom")
        assert await consumer.cancel("h", "bad")
        await consumer.send("plain", {}, task_id="x")  # a topic without history
        (task,) = await consumer.consumer.lease("plain")
        await consumer.consumer.ack(task.lease_token)
    finally:
        await consumer.close()
    records = [(r.id, r.outcome) for r in await queue.history("h")]
    assert records == [("bad", "cancelled"), ("bad", "dead"), ("ok", "acked")]
    assert await queue.history("plain") == []
