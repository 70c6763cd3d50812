"""on_conflict="replace": a waiting task gets the new body and due time atomically (debounce);
a reserved one is left alone and the send says so."""

from __future__ import annotations

import asyncio
import re

import pytest
import redis.asyncio

from delayq import InvalidInputError, Queue, SendResult
from tests.fixtures_delayq import StartWorker
from tests.helpers import (
    assert_only_earlier_wakes,
    queue_keys,
    redis_now_ms,
    reserve,
    stored,
    wait_for,
)

PRODUCERS = 10
REPLACEMENTS = 1_000
DEBOUNCE_S = 3.0
"""The debounced task's delay: far longer than any pause between two of the replacements."""


async def test_replace_gives_a_delayed_task_the_new_body_due_time_and_options(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    first = await queue.send_delayed("t", {"v": 1}, delay=600, task_id="d", max_attempts=7)
    assert (first, first.outcome) == ("d", "created")
    before = await redis_now_ms(redis_client)
    second = await queue.send_delayed(
        "t", {"v": 2}, delay=60, task_id="d", on_conflict="replace", ttr=9
    )
    assert isinstance(second, SendResult) and (second, second.outcome) == ("d", "replaced")
    info = await stored(queue, "t", "d")
    # The replacement's options replace the first send's: its max_attempts=7 is gone, so
    # the topic's default applies, and its ttr is the new one.
    assert (info.state, info.body, info.max_attempts) == ("delayed", {"v": 2}, 5)
    assert info.ttr == 9
    due_ms = info.due_at.timestamp() * 1000
    assert before + 60_000 <= due_ms <= await redis_now_ms(redis_client) + 60_000
    assert (await queue.stats())["t"].delayed == 1  # the old schedule entry is gone

    kept = await queue.send_delayed("t", {"v": 3}, delay=1, task_id="d")
    assert kept.outcome == "kept"
    assert (await stored(queue, "t", "d")).body == {"v": 2}


async def test_replace_starts_a_retried_task_afresh(queue: Queue) -> None:
    await queue.send("t", {"v": 1}, task_id="r")
    _, _, [(_, token, attempts)] = await reserve(queue, "t")
    assert attempts == 1
    await queue.scripts.nack(
        queue.keys("t"), "r", token, mode="retry", delay_ms=60_000, error="boom", max_attempts=5
    )
    waiting = await stored(queue, "t", "r")
    assert (waiting.state, waiting.attempts, waiting.last_error) == ("delayed", 1, "boom")

    replaced = await queue.send("t", {"v": 2}, task_id="r", on_conflict="replace")
    assert replaced.outcome == "replaced"
    info = await stored(queue, "t", "r")
    assert (info.state, info.attempts, info.last_error, info.body) == ("ready", 0, None, {"v": 2})
    _, _, leased = await reserve(queue, "t")
    assert [(task_id, attempts) for task_id, _, attempts in leased] == [("r", 1)]


async def test_a_reserved_task_is_not_replaced_and_the_send_says_so(queue: Queue) -> None:
    await queue.send("t", {"v": 1}, task_id="busy")
    await reserve(queue, "t")
    refused = await queue.send_delayed("t", {"v": 2}, 5, task_id="busy", on_conflict="replace")
    assert (refused, refused.outcome) == ("busy", "reserved")
    info = await stored(queue, "t", "busy")
    assert (info.state, info.body, info.attempts) == ("reserved", {"v": 1}, 1)


async def test_replace_of_an_unknown_or_dead_id_creates_it(queue: Queue) -> None:
    created = await queue.send("t", {"v": 1}, task_id="new", on_conflict="replace")
    assert created.outcome == "created"
    await queue.send("u", {"v": 1}, task_id="gone", max_attempts=1)
    _, _, [(_, token, _)] = await reserve(queue, "u", limit=1)
    await queue.scripts.nack(
        queue.keys("u"), "gone", token, mode="retry", error="x", max_attempts=1
    )
    assert (await stored(queue, "u", "gone")).state == "dead"
    revived = await queue.send_delayed("u", {"v": 2}, 60, task_id="gone", on_conflict="replace")
    assert revived.outcome == "created"
    assert (await stored(queue, "u", "gone")).state == "delayed"


async def test_replace_earlier_wakes_the_workers(
    queue: Queue, redis_client: redis.asyncio.Redis
) -> None:
    await queue.send_delayed("t", {}, delay=600, task_id="w")
    await assert_only_earlier_wakes(
        redis_client, queue.keys("t").wake,
        later=lambda: queue.send_delayed("t", {}, delay=700, task_id="w", on_conflict="replace"),
        earlier=lambda: queue.send("t", {}, task_id="w", on_conflict="replace"),
    )  # fmt: skip


@pytest.mark.parametrize("value", ["Replace", "update", None, 1])
async def test_a_bad_on_conflict_writes_nothing(
    queue: Queue, redis_client: redis.asyncio.Redis, value: object
) -> None:
    with pytest.raises(InvalidInputError, match="on_conflict"):
        await queue.send("t", {}, task_id="x", on_conflict=value)  # type: ignore[arg-type]
    assert await queue_keys(redis_client, queue.name) == []


async def test_debounce_from_concurrent_producers_fires_once_with_the_last_body(
    queue: Queue, redis_url: str, start_worker: StartWorker
) -> None:
    """The issue's figure: 1,000 replacements of one id from 10 concurrent producers."""
    fired: list[str] = []

    @queue.topic("digest")
    async def digest(body: dict[str, str]) -> None:
        fired.append(body["w"])

    await start_worker(queue)
    producers = [Queue.from_url(redis_url, name=queue.name) for _ in range(PRODUCERS)]
    monitor = redis.asyncio.Redis.from_url(redis_url)
    written: list[str] = []  # bodies, in the order Redis ran the sends

    async def watch() -> None:
        async with monitor.monitor() as m:
            ready.set()
            async for command in m.listen():
                written.extend(re.findall(r"p\d+-\d+", command["command"]))

    async def produce(p: int, producer: Queue) -> list[str]:
        outcomes = []
        for n in range(REPLACEMENTS // PRODUCERS):
            sent = await producer.send_delayed(
                "digest", {"w": f"p{p}-{n}"}, DEBOUNCE_S, task_id="digest-user-7",
                on_conflict="replace",
            )  # fmt: skip
            outcomes.append(sent.outcome)
        return outcomes

    ready = asyncio.Event()
    watching = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(10):
            await ready.wait()
        results = await asyncio.gather(*(produce(p, q) for p, q in enumerate(producers)))
        # MONITOR's stream trails the replies: wait until it has shown every send
        await wait_for(lambda: len(set(written)) == REPLACEMENTS, 10, "MONITOR to show every send")
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        await monitor.aclose()
        for producer in producers:
            await producer.close()
    outcomes = [outcome for result in results for outcome in result]
    assert sorted(set(outcomes)) == ["created", "replaced"]
    assert outcomes.count("created") == 1 and len(outcomes) == REPLACEMENTS
    last = written[-1]
    assert len(set(written)) == REPLACEMENTS  # every send was seen, the last one ran last
    stats = await queue.stats()
    assert (stats["digest"].delayed, stats["digest"].ready) == (1, 0)
    assert (await stored(queue, "digest", "digest-user-7")).body == {"w": last}

    await wait_for(lambda: fired, DEBOUNCE_S + 10, "the debounced task to fire")
    await asyncio.sleep(0.5)  # a second firing would show up by now
    assert fired == [last]
