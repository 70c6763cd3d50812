"""History (a topic's last finished tasks) and its rolling activity, against a real Redis."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio

from delayq import Backoff, InvalidInputError, Queue, Task, Worker
from delayq.task import Envelope
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease, reserve


async def _drain(queue: Queue, topic: str, history: int, count: int) -> None:
    """Lease and ack ``count`` tasks one call each, as a worker of a history topic would."""
    keys = queue.keys(topic)
    for _ in range(count):
        _, _, items = await queue.scripts.reserve(
            keys, limit=1, reclaim=10, ttr_ms=60_000, max_attempts=3, history=history
        )
        leases = [
            (i, Envelope.parse(raw).token, "1000,2000")[: 3 if history else 2] for i, raw in items
        ]
        assert await queue.scripts.ack(keys, leases, history=history) == [True] * len(items)


async def test_a_worker_records_acked_dead_and_cancelled_tasks(
    queue: Queue, redis_url: str, start_worker: StartWorker
) -> None:
    @queue.topic("t", history=100, max_attempts=1, backoff=Backoff(initial=0.01))
    async def handler(body: dict[str, str], task: Task) -> None:
        await asyncio.sleep(0.01)
        if body["do"] == "fail":
            raise ValueError("boom")

    worker = await start_worker(queue)
    ok = await queue.send("t", {"do": "ok"}, task_id="ok", headers={"k": "v"})
    await queue.send("t", {"do": "fail"}, task_id="bad")
    # Cancelled from another process that has no handler for the topic (as the CLI does):
    # the worker recorded the topic's history setting in Redis when it started.
    other = Queue.from_url(redis_url, name=queue.name)
    try:
        await other.send_delayed("t", {"do": "never"}, 60, task_id="gone")
        assert await other.cancel("t", "gone")
    finally:
        await other.close()
    async with asyncio.timeout(5):
        while len(await queue.history("t")) < 3:
            await asyncio.sleep(0.02)
    worker.stop()

    records = {r.id: r for r in await queue.history("t")}
    acked, dead, gone = records[ok], records["bad"], records["gone"]
    assert (acked.outcome, dead.outcome, gone.outcome) == ("acked", "dead", "cancelled")
    assert acked.body == {"do": "ok"} and acked.headers == {"k": "v"} and acked.error is None
    assert acked.attempts == 1 and acked.started_at is not None and acked.lateness is not None
    assert 0 <= acked.lateness < 5
    assert 0.005 <= (acked.finished_at - acked.started_at).total_seconds() < 5
    assert dead.error == "ValueError: boom" and dead.attempts == 1
    assert (gone.attempts, gone.started_at, gone.lateness) == (0, None, None)
    seqs = [r.seq for r in await queue.history("t")]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == 3  # newest first


async def test_history_keeps_about_its_size_and_pages_backwards(queue: Queue) -> None:
    await queue.send_many(
        "t", [{"n": n} for n in range(12)], task_ids=[f"t{n:02}" for n in range(12)]
    )
    await _drain(queue, "t", history=5, count=12)
    records = await queue.history("t", limit=100)
    assert [r.id for r in records] == [f"t{n:02}" for n in range(11, 6, -1)]  # one per call
    assert [r.seq for r in records] == list(range(12, 7, -1))
    page = await queue.history("t", limit=2, before=records[1].seq)
    assert [r.seq for r in page] == [10, 9]
    assert (page[0].started_at.timestamp(), page[0].finished_at.timestamp()) == (1.0, 2.0)  # type: ignore[union-attr]


async def test_a_topic_without_history_writes_none(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send("t", {})
    await _drain(queue, "t", history=0, count=1)
    assert await queue.history("t") == []
    assert not await redis_client.exists(queue.keys("t").history, queue.keys("t").rollup)


async def test_an_expired_lease_out_of_attempts_is_recorded_dead(queue: Queue) -> None:
    await queue.send("t", {"x": 1}, task_id="a")
    await reserve(queue, "t", max_attempts=1)
    await expire_lease(queue.redis, queue.keys("t"), "a")
    await queue.scripts.reserve(
        queue.keys("t"), limit=10, reclaim=10, ttr_ms=60_000, max_attempts=1, history=10
    )
    [record] = await queue.history("t")
    assert (record.id, record.outcome, record.started_at) == ("a", "dead", None)
    assert record.error is not None and record.error.startswith("LeaseExpired")


async def test_numbers_continue_when_the_meta_hash_was_deleted(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_many("t", [{}] * 3)
    await _drain(queue, "t", history=10, count=2)
    await redis_client.delete(queue.keys("t").meta)  # the record numbers with it
    await _drain(queue, "t", history=10, count=1)
    assert [r.seq for r in await queue.history("t")] == [3, 2, 1]


async def test_activity_counts_what_workers_did_per_window(queue: Queue) -> None:
    @queue.topic("t", history=100)
    async def handler(body: dict[str, int]) -> None:
        return None

    await queue.send_many("t", [{"n": n} for n in range(20)])
    worker = Worker(queue)
    running = asyncio.create_task(worker.run(handle_signals=False))
    async with asyncio.timeout(5):
        while len(await queue.history("t", limit=100)) < 20:
            await asyncio.sleep(0.02)
    worker.stop()
    await running  # a stopping worker adds what it counted
    windows = await queue.history.activity("t")
    assert sum(w.acked for w in windows) == 20 and sum(w.started for w in windows) == 20
    assert all(w.lateness_p50 is not None and w.lateness_p50 <= 60 for w in windows if w.started)
    assert await queue.history.activity("other") == []


@pytest.mark.parametrize("bad", [0, 10_001, True, "5"])
async def test_bad_limits_are_refused(queue: Queue, bad: object) -> None:
    with pytest.raises(InvalidInputError):
        await queue.history("t", limit=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        queue.topic("t", history=-1)


async def test_the_cli_lists_history(queue: Queue, redis_url: str) -> None:
    from tests.apps.runner import module_command, run_cli

    await queue.send_many("t", [{"n": n} for n in range(3)], task_ids=["a", "b", "c"])
    await _drain(queue, "t", history=10, count=3)
    base = ("history", "--url", redis_url, "--name", queue.name, "t")
    plain = await run_cli(module_command(*base, "--limit", "2"), {})
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert [line.split("\t")[3] for line in lines] == ["c", "b"]
    assert "acked" in lines[0] and "attempts=1" in lines[0]
    as_json = await run_cli(module_command(*base, "--json", "--before", "3"), {})
    assert [json.loads(line)["id"] for line in as_json.stdout.splitlines()] == ["b", "a"]


async def test_a_task_with_a_priority_is_recorded(queue: Queue) -> None:
    await queue.send("t", {"n": 1}, task_id="urgent", priority=5, headers={"k": "v"})
    await _drain(queue, "t", history=10, count=1)
    [record] = await queue.history("t")
    assert (record.id, record.body, record.headers, record.attempts) == (
        "urgent",
        {"n": 1},
        {"k": "v"},
        1,
    )


async def test_find_picks_a_record_out_of_a_batch_and_stops_within_its_bound(queue: Queue) -> None:
    await queue.send_many("t", [{"n": n} for n in range(4)], task_ids=["a", "b", "c", "d"])
    keys = queue.keys("t")
    _, _, items = await queue.scripts.reserve(
        keys, limit=4, reclaim=10, ttr_ms=60_000, max_attempts=3, history=10
    )
    leases = [(i, Envelope.parse(raw).token, "1000,2000") for i, raw in items]
    await queue.scripts.ack(keys, leases, history=10)  # one stream entry, four records
    by_id = {r.id: r for r in await queue.history("t")}
    for task_id in "abcd":
        found = await queue.history.find("t", task_id)
        assert found == by_id[task_id]
    newest = (await queue.history("t", limit=1))[0]
    assert await queue.history.find("t", newest.id, within=1) == newest
    oldest = (await queue.history("t"))[-1]
    assert await queue.history.find("t", oldest.id, within=3) is None
    assert await queue.history.find("t", "nope") is None
    with pytest.raises(InvalidInputError):
        await queue.history.find("t", "a", within=0)


async def test_throughput_counts_the_last_minute_of_each_topic(queue: Queue) -> None:
    await queue.scripts.rollup(queue.keys("a"), ["acked", 50, "retried", 5, "dead", 5])
    rates = await queue.history.throughput(["a", "b"])
    assert set(rates) == {"a", "b"} and rates["b"] == 0
    assert 60 / 70 <= rates["a"] <= 60 / 60
    with pytest.raises(InvalidInputError):
        await queue.history.throughput(["a"], seconds=5)


async def test_find_pages_back_through_many_entries(queue: Queue) -> None:
    await queue.send_many(
        "t", [{"n": n} for n in range(130)], task_ids=[f"t{n}" for n in range(130)]
    )
    await _drain(queue, "t", history=1000, count=130)  # 130 entries of one record each
    records = await queue.history("t", limit=1000)
    oldest, newest = records[-1], records[0]
    assert await queue.history.find("t", oldest.id) == oldest  # past the first page of 100
    assert await queue.history.find("t", oldest.id, within=129) is None
    assert await queue.history.find("t", records[128].id, within=129) == records[128]
    assert await queue.history.find("t", newest.id, within=1) == newest
