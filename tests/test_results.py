"""Task results (``@queue.topic(..., results=...)``), against a real Redis and the cluster."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from delayq import (
    Backoff,
    DelayqError,
    InvalidInputError,
    Queue,
    ResultNotReadyError,
    Task,
    TaskResult,
)
from delayq.task import Envelope
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease, queue_keys, wait_for

HOUR = timedelta(hours=1)


class Link(BaseModel):
    url: str
    pages: int


def result_keys(keys: list[str]) -> list[str]:
    return [k for k in keys if ":result:" in k]


async def test_an_acked_task_keeps_its_typed_value_for_the_topic_duration(
    queue: Queue, start_worker: StartWorker
) -> None:
    @queue.topic("render", results=HOUR)
    async def render(body: dict[str, int]) -> Link:
        return Link(url=f"/r/{body['n']}", pages=body["n"])

    await start_worker(queue)
    sent = await render.send({"n": 3}, task_id="r1")
    res = await render.result(sent, wait=5)
    assert res is not None and res.outcome == "acked"
    assert res.value == Link(url="/r/3", pages=3)  # validated into the return type
    assert (res.id, res.topic, res.attempts, res.error) == ("r1", "render", 1, None)
    assert res.finished_at.tzinfo is not None
    assert abs(res.finished_at - datetime.now(UTC)) < timedelta(seconds=30)
    raw = await queue.result("render", "r1")  # decoded JSON
    assert isinstance(raw, TaskResult) and raw.value == {"url": "/r/3", "pages": 3}
    ttl = await queue.redis.pttl(queue.keys("render").result("r1"))
    assert 3_590_000 < ttl <= 3_600_000


async def test_a_dead_task_keeps_its_last_error_and_a_cancelled_one_its_outcome(
    queue: Queue, queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    @queue.topic("t", results=60, max_attempts=2, backoff=Backoff(initial=0.01))
    async def handler(body: dict[str, str]) -> str:
        raise ValueError(f"boom {body['x']}")

    await start_worker(queue)
    await queue.send("t", {"x": "1"}, task_id="bad")
    dead = await queue.result("t", "bad", wait=10)
    assert dead is not None and dead.outcome == "dead" and dead.value is None
    assert dead.attempts == 2 and dead.error == "ValueError: boom 1"
    # A dead letter counts as finished until replayed; then it is to finish again.
    assert await queue.replay("t", "bad")
    await queue.pause("t")
    with pytest.raises(ResultNotReadyError):
        await queue.result("t", "bad")
    # Cancelled from a process that did not register the topic (the CLI, delayq web): the
    # worker recorded the topic's results setting in Redis.
    other = queues()
    await other.send_delayed("t", {"x": "2"}, 60, task_id="gone")
    assert await other.cancel("t", "gone")
    gone = await other.result("t", "gone")
    assert gone is not None and (gone.outcome, gone.attempts, gone.error) == ("cancelled", 0, None)
    assert await other.cancel("t", "bad")  # a ready task: cancelled too
    assert (await queue.result("t", "bad")).outcome == "cancelled"  # type: ignore[union-attr]


async def test_a_dead_letter_of_an_expired_lease_stores_its_result(queue: Queue) -> None:
    @queue.topic("t", results=60, max_attempts=1)
    async def handler(body: Any) -> None: ...

    keys = queue.keys("t")
    await queue.send("t", {}, task_id="a")
    ms = handler.options.results_ms
    _, _, items = await queue.scripts.reserve(
        keys, limit=1, reclaim=10, ttr_ms=60_000, max_attempts=1, results=ms
    )
    assert [i for i, _ in items] == ["a"]
    await expire_lease(queue.redis, keys, "a")
    await queue.scripts.reserve(
        keys, limit=1, reclaim=10, ttr_ms=60_000, max_attempts=1, results=ms
    )
    res = await handler.result("a")
    assert res is not None and res.outcome == "dead" and res.attempts == 1
    assert res.error is not None and res.error.startswith("LeaseExpired")


async def test_results_expire(queue: Queue, start_worker: StartWorker) -> None:
    @queue.topic("t", results=0.3)
    async def handler(body: Any) -> int:
        return 7

    await start_worker(queue)
    await queue.send("t", {}, task_id="a")
    assert (await handler.result("a", wait=5)).value == 7  # type: ignore[union-attr]
    await wait_for(lambda: _is_none(handler.result("a")), 5, "the result to expire")


async def _is_none(found: Any) -> bool:
    return (await found) is None


async def test_a_topic_without_results_stores_nothing_and_answers_none(
    queue: Queue, start_worker: StartWorker
) -> None:
    @queue.topic("plain", max_attempts=1)
    async def plain(body: dict[str, bool]) -> int:
        if body["fail"]:
            raise ValueError("no")
        return 1

    await start_worker(queue)
    await queue.send("plain", {"fail": False}, task_id="ok")
    await queue.send("plain", {"fail": True}, task_id="bad")
    await queue.send_delayed("plain", {"fail": False}, 60, task_id="later")
    await queue.cancel("plain", "later")
    await wait_for(lambda: _stats_dead(queue, "plain"), 5, "the dead letter")
    assert result_keys(await queue_keys(queue.redis, queue.name)) == []
    assert await queue.result("plain", "ok") is None
    assert await queue.result("plain", "bad", wait=1) is None  # no wait: keeps nothing
    assert await plain.result("ok") is None
    meta = await queue.redis.hgetall(queue.keys("plain").meta)
    assert b"results" not in meta


async def _stats_dead(queue: Queue, topic: str) -> bool:
    stats = await queue.stats([topic])
    return topic in stats and stats[topic].dead == 1


async def test_unknown_ids_none_and_pending_tasks_not_ready(queue: Queue) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> None: ...

    assert await queue.result("t", "nobody") is None
    assert await queue.result("t", "nobody", wait=5) is None  # unknown: no wait
    await queue.send_delayed("t", {}, 60, task_id="later")
    with pytest.raises(ResultNotReadyError) as caught:
        await queue.result("t", "later")
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, DelayqError)
    started = time.monotonic()
    with pytest.raises(ResultNotReadyError):
        await handler.result("later", wait=0.2)
    assert time.monotonic() - started >= 0.2
    with pytest.raises(InvalidInputError, match="wait"):
        await queue.result("t", "later", wait=-1)
    with pytest.raises(InvalidInputError, match="task_id"):
        await queue.result("t", "")
    with pytest.raises(InvalidInputError, match="results"):
        queue.topic("u", results=-1)


async def test_a_wait_is_woken_by_the_ack(queue: Queue, start_worker: StartWorker) -> None:
    go = asyncio.Event()
    acked_at: list[float] = []

    @queue.topic("t", results=60)
    async def handler(body: Any, task: Task) -> dict[str, str]:
        await go.wait()
        return {"id": task.id}

    def note(event: Any) -> None:
        if event.kind == "acked":
            acked_at.append(time.monotonic())

    queue.hooks.add_listener(note)
    await start_worker(queue)
    await queue.send("t", {}, task_id="a")
    waits = [asyncio.create_task(queue.result("t", "a", wait=10)) for _ in range(3)]
    await wait_for(lambda: _subscribed(queue), 5, "the result subscription")
    await asyncio.sleep(0)  # the waits read the result: still running
    go.set()
    found = await asyncio.gather(*waits)
    woken = time.monotonic()
    assert all(r is not None and r.value == {"id": "a"} for r in found)
    # Loosely: woken by the notice, not by a poll or the deadline.
    assert acked_at and woken - acked_at[0] < 5


def _subscribed(queue: Queue) -> bool:
    hub = queue._parts.results._hub.current  # the test peeks at delayq's own wait hub
    return hub is not None and hub.subscribed.is_set()


async def test_a_wait_reads_once_and_once_more_when_woken(
    queue: Queue, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> int:
        return 1

    reads: list[str] = []
    read = queue.scripts.result

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[1])
        return await read(*args, **kwargs)

    monkeypatch.setattr(queue.scripts, "result", counted)
    await queue.send_delayed("t", {}, 0.5, task_id="a")
    await start_worker(queue)
    res = await queue.result("t", "a", wait=10)
    assert res is not None and res.value == 1
    # One read before waiting and one after the notice: no poll while it waits (a
    # renewed subscription could add one).
    assert 2 <= len(reads) <= 3, reads


@pytest.fixture
async def small_queue(redis_url: str, queue_name: str) -> AsyncIterator[Queue]:
    """A queue whose bodies (and results) may be 100 bytes at most."""
    queue = Queue.from_url(redis_url, name=queue_name, max_body_bytes=100)
    yield queue
    await queue.close()


async def test_unstorable_values_ack_the_task_and_say_why(
    small_queue: Queue, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    queue = small_queue

    @queue.topic("t", results=60)
    def handler(body: dict[str, str]) -> Any:  # a plain def, run in a thread
        return object() if body["kind"] == "object" else "x" * 200

    await start_worker(queue)
    with caplog.at_level(logging.WARNING, logger="delayq"):
        await queue.send("t", {"kind": "object"}, task_id="obj")
        await queue.send("t", {"kind": "big"}, task_id="big")
        obj = await queue.result("t", "obj", wait=5)
        big = await queue.result("t", "big", wait=5)
    assert obj is not None and obj.outcome == "acked" and obj.value is None
    assert obj.error is not None and obj.error.startswith("result not stored: not JSON")
    assert big is not None and big.outcome == "acked" and big.value is None
    assert big.error is not None and "over the queue's max_body_bytes of 100" in big.error
    assert sum("is not stored" in r.getMessage() for r in caplog.records) == 2
    assert await queue.get("t", "obj") is None and await queue.get("t", "big") is None


async def test_middleware_and_sync_handlers_pass_the_value_on(
    queue: Queue, start_worker: StartWorker
) -> None:
    seen: list[str] = []

    @queue.middleware
    async def around(task: Task, call_next: Any) -> None:
        seen.append(task.id)
        await call_next()

    @queue.topic("t", results=60)
    def handler(body: int) -> list[int]:
        return [body, body * 2]

    await start_worker(queue)
    await queue.send("t", 4, task_id="a")
    res = await handler.result("a", wait=5)
    assert res is not None and res.value == [4, 8] and seen == ["a"]


async def test_an_http_style_consumer_acks_with_a_result(
    queue: Queue, queues: Callable[[], Queue], start_worker: StartWorker
) -> None:
    @queue.topic("t", results=60)
    async def handler(body: Any) -> None: ...

    # The topic's setting reaches Redis when a worker starts (the consumer below is in a
    # process that did not register the topic).
    worker = await start_worker(queue, topics=["t"])
    worker.stop()
    await queue.send_delayed("t", {}, 60, task_id="later")
    other = queues()
    await other.send("t", {"n": 1}, task_id="c")
    (lease,) = await other.consumer.lease("t")
    await other.consumer.ack(lease.lease_token, {"ok": True})
    res = await other.result("t", "c")
    assert res is not None and res.value == {"ok": True} and res.outcome == "acked"


@pytest.fixture
async def cq(cluster: Any, queue_name: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    yield queue
    await queue.close()


async def test_results_and_waits_on_a_cluster(cq: Queue, start_worker: StartWorker) -> None:
    go = asyncio.Event()

    @cq.topic("t", results=60, shards=3, max_attempts=1)
    async def handler(body: dict[str, int]) -> int:
        await go.wait()
        if body["n"] < 0:
            raise ValueError("negative")
        return body["n"] * 10

    await start_worker(cq)
    ids = [f"c{i}" for i in range(6)]
    for n, task_id in enumerate(ids):
        await cq.send("t", {"n": n if task_id != "c5" else -1}, task_id=task_id)
    waits = [asyncio.create_task(handler.result(i, wait=15)) for i in ids]
    await wait_for(lambda: _subscribed(cq), 10, "the sharded result subscription")
    go.set()
    found = await asyncio.gather(*waits)
    assert [r.value for r in found[:5]] == [0, 10, 20, 30, 40]  # type: ignore[union-attr]
    assert found[5] is not None and found[5].outcome == "dead"
    await cq.send_delayed("t", {"n": 1}, 60, task_id="later")
    assert await cq.cancel("t", "later")
    assert (await cq.result("t", "later")).outcome == "cancelled"  # type: ignore[union-attr]
    with pytest.raises(ResultNotReadyError):
        await cq.send_delayed("t", {"n": 1}, 60, task_id="later2")
        await cq.result("t", "later2", wait=0.3)


def test_encoding_a_result() -> None:
    from delayq.results import encode_result, parse_result

    assert encode_result("t", "a", None, 100) == b""
    assert encode_result("t", "a", {"x": float("nan")}, 100) == b'v{"x":null}'
    assert encode_result("t", "a", [1], 2).startswith(b"e")
    at = datetime(2030, 1, 1, tzinfo=UTC)
    stored = b"acked,2,%d,3,abc[1,2]" % (at.timestamp() * 1000)
    res = parse_result("t", "a", stored)
    assert (res.outcome, res.attempts, res.error, res.value, res.finished_at) == (
        "acked", 2, "abc", [1, 2], at,
    )  # fmt: skip
    # An error holding commas is cut by its length, not at a comma.
    assert parse_result("t", "a", b"dead,1,0,4,a,b,").error == "a,b,"
    assert Envelope  # imported for type checks of the helpers above


async def test_the_result_command_exits_0_1_or_3(
    queue: Queue, redis_url: str, start_worker: StartWorker
) -> None:
    import json

    from tests.apps.runner import app_env, module_command, run_cli

    @queue.topic("t", results=60)
    async def handler(body: Any) -> dict[str, int]:
        return {"n": 1}

    await start_worker(queue)  # records the topic's results setting for the CLI
    await queue.send("t", {}, task_id="done")
    await queue.result("t", "done", wait=5)
    await queue.send_delayed("t", {}, 60, task_id="later")
    env = app_env(redis_url, queue.name)
    args = ("result", "--url", redis_url, "--name", queue.name, "t")
    found, missing, waiting = await asyncio.gather(
        run_cli(module_command(*args, "done"), env),
        run_cli(module_command(*args, "nobody"), env),
        run_cli(module_command(*args, "later", "--wait", "0.2"), env),
    )
    assert found.returncode == 0, found.stderr
    shown = json.loads(found.stdout)
    assert shown["outcome"] == "acked" and shown["value"] == {"n": 1}
    assert missing.returncode == 1 and "no result for t/nobody" in missing.stderr
    assert waiting.returncode == 3 and "has not finished yet" in waiting.stderr
    assert "Traceback" not in waiting.stderr + missing.stderr


async def test_a_sharded_topic_keeps_results_in_each_shard(
    queue: Queue, start_worker: StartWorker
) -> None:
    @queue.topic("t", results=60, shards=4)
    async def handler(body: int) -> int:
        return body + 1

    ids = [f"s{i}" for i in range(12)]
    for n, task_id in enumerate(ids):
        await queue.send("t", n, task_id=task_id)
    waits = [asyncio.create_task(handler.result(i, wait=10)) for i in ids]
    await wait_for(lambda: _subscribed(queue), 5, "the result subscription")
    await start_worker(queue)
    found = await asyncio.gather(*waits)
    assert [r.value if r else None for r in found] == [n + 1 for n in range(12)]
    shards = {k.split("}")[0] for k in result_keys(await queue_keys(queue.redis, queue.name))}
    assert len(shards) > 1  # the results live in their tasks' shards
