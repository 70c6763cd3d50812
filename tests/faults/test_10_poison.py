"""Scenario 10: poison and garbage written by hand into every key the queue uses.

* Poisoned tasks (bad JSON body, a body missing a model's field, a truncated header, a
  pickle blob, an oversized body, a schedule entry without a task, garbage on the wake-up
  channel): each is dead-lettered with its reason, or skipped; the worker process keeps
  running and every good task is delivered.  Nothing stored is ever unpickled: the pickle
  blob is just an unreadable envelope.
* A key of the wrong Redis type, for each key of a topic and for the queue's topic set:
  the worker logs the failing call and keeps running, other topics keep flowing, and once
  the key is repaired the topic's tasks are all delivered.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from pathlib import Path

import pytest

from delayq import Queue
from delayq.redis.keys import BODY_FIELD_SUFFIX
from delayq.redis.scripts import lua_source, waiting_keys
from tests.faults.apps.plan import OTHER_TOPIC, TYPED_TOPIC, WORK_TOPIC, install
from tests.faults.checker import assert_no_loss, check, read_log
from tests.faults.harness import Producer, consistency_problems
from tests.helpers import redis_time_passes, wait_for


def _envelope(body: bytes, attempts: int = 0, ms: int = 0) -> bytes:
    return b"%d,0,0,0,%d,%d," % (attempts, ms, ms) + body


def _plant(admin, queue: Queue, topic: str, task_id: str, stored: bytes | None) -> None:
    """Write a task by hand: due now, with ``stored`` as its envelope (None = no envelope).

    send.lua schedules it (the slot layout is the scripts' business); then its stored
    header and body are replaced by the two parts of ``stored`` (a string without six
    commas is all header, with no body), in one MULTI so that no worker sees it between."""
    keys = queue.keys(topic)
    bucket = keys.bucket(task_id)
    with admin.pipeline(transaction=True) as pipe:
        pipe.eval(lua_source("send"), 4, *waiting_keys(keys),
                  task_id, "d", 0, 0, 0, b"{}", 0, keys.wake)  # fmt: skip
        pipe.hdel(bucket, task_id, task_id + BODY_FIELD_SUFFIX)
        if stored is not None:
            parts = stored.split(b",", 6)
            header, body = (b",".join(parts[:6]), parts[6]) if len(parts) == 7 else (stored, None)
            pipe.hset(bucket, task_id, header)
            if body is not None:
                pipe.hset(bucket, task_id + BODY_FIELD_SUFFIX, body)
        pipe.execute()
    admin.sadd(f"delayq:{{{queue.name}}}:topics", topic)


def _done(log_dir: Path) -> set[str]:
    return {d.task_id for d in read_log(log_dir) if d.event == "done"}


async def test_10_poisoned_tasks(
    make_redis_server, spawn_worker, make_queue, log_dir, queue_name, record_property
) -> None:
    server = make_redis_server()
    queue = make_queue(server.url, max_body_bytes=1024)
    worker = await spawn_worker(server, concurrency=5, env={}).started()
    admin = server.client()
    too_big = b'"' + b"x" * 600_000 + b'"'  # over the worker's default 512 KiB limit
    poison = {
        (WORK_TOPIC, "bad-json"): (_envelope(b"{not json"), "BodyValidationError"),
        (TYPED_TOPIC, "missing-field"): (_envelope(b'{"other": 1}'), "BodyValidationError"),
        (TYPED_TOPIC, "wrong-type-field"): (_envelope(b'{"order_id": []}'), "BodyValidation"),
        (WORK_TOPIC, "short-header"): (b"1,2,3", "CorruptTask"),
        (WORK_TOPIC, "letters-header"): (b"a,b,c,d,e,f,{}", "CorruptTask"),
        (WORK_TOPIC, "pickle-blob"): (pickle.dumps({"order_id": 1}), "CorruptTask"),
        (WORK_TOPIC, "empty"): (b"", "CorruptTask"),
        (WORK_TOPIC, "too-big"): (_envelope(too_big), "BodyTooLargeError"),
    }
    producer = Producer(queue)
    for i in range(10):
        await producer.send(f"good-before-{i}")
    for (topic, task_id), (stored, _) in poison.items():
        _plant(admin, queue, topic, task_id, stored)
    _plant(admin, queue, WORK_TOPIC, "no-envelope", None)  # an index entry without a task
    admin.publish(queue.keys(WORK_TOPIC).wake, b"\x80garbage\x00")
    for i in range(10):
        await producer.send(f"good-after-{i}")

    await wait_for(lambda: producer.returned <= _done(log_dir), 10, "good tasks delivered")

    async def buried() -> bool:
        dead = {(t, info.id) for t in (WORK_TOPIC, TYPED_TOPIC)
                for info in await queue.dead_letters(t)}  # fmt: skip
        return set(poison) <= dead

    await wait_for(buried, 10, "poison dead-lettered")
    for (topic, task_id), (_, reason) in poison.items():
        info = await queue.get(topic, task_id)
        assert info is not None and info.state == "dead", (task_id, info)
        assert info.last_error and info.last_error.startswith(reason), (task_id, info.last_error)
    assert await queue.get(WORK_TOPIC, "no-envelope") is None  # skipped: nothing to run
    assert not consistency_problems(admin, queue_name, [WORK_TOPIC, TYPED_TOPIC])
    report = check("10 poisoned tasks", sent=producer.sent, returned=producer.returned,
                   deliveries=read_log(log_dir))  # fmt: skip
    report.extra["dead_lettered"] = len(poison)
    report.publish(record_property)
    admin.close()
    assert_no_loss(report, allow_duplicates=False)
    assert worker.alive
    assert "Traceback" not in worker.output()
    assert "dead-letter" in worker.output()  # body errors are logged with their reason


async def test_10_dropped_and_buried_entries_are_logged_with_their_ids(
    make_redis_server, make_queue, start_worker, log_dir, caplog
) -> None:
    """reserve.lua drops an entry whose envelope is missing and buries an unreadable one;
    neither reaches a handler, so the worker must say so, naming (a bounded list of) ids."""
    server = make_redis_server()
    queue = make_queue(server.url)
    install(queue, log_dir, ttr=1.0)
    keys = queue.keys(WORK_TOPIC)
    admin = server.client()
    missing = [f"gone-{i:02}" for i in range(12)]
    for task_id in missing:
        _plant(admin, queue, WORK_TOPIC, task_id, None)
    admin.zadd(keys.reserved, {"gone-lease": 1})  # an expired lease without its task
    _plant(admin, queue, WORK_TOPIC, "corrupt-a", b"1,2,3")
    _plant(admin, queue, WORK_TOPIC, "corrupt-b", pickle.dumps(object))
    await queue.send(WORK_TOPIC, {}, task_id="good")

    caplog.set_level(logging.WARNING, logger="delayq")
    await start_worker(queue, concurrency=20)  # one reserve call sees every entry
    await wait_for(lambda: "good" in _done(log_dir), 5, "the good task delivered")
    await wait_for(lambda: "CorruptTask" in caplog.text, 5, "the corrupt tasks logged")
    admin.close()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    dropped = [m for m in warnings if "stored task is missing" in m]
    buried = [m for m in warnings if "CorruptTask" in m]
    assert len(dropped) == 1 and len(buried) == 1, warnings
    assert "13 task(s) dropped" in dropped[0]
    assert dropped[0].endswith("and 3 more")  # at most 10 ids per message
    assert dropped[0].count("'gone-") == 10
    assert "'corrupt-a', 'corrupt-b'" in buried[0] and "2 task(s)" in buried[0]
    for task_id in ("corrupt-a", "corrupt-b"):
        info = await queue.get(WORK_TOPIC, task_id)
        assert info is not None and info.state == "dead"
    assert await queue.get(WORK_TOPIC, "gone-00") is None


# Regressions: with `dead`, `errors` or `seq` of the wrong type, reserve.lua removed ids from
# schedule/reserved and then failed on that key; Redis does not roll a script back, so those
# tasks were orphaned (lost).  With `topics` of the wrong type, a worker could not start and
# a producer could not send (the set only feeds stats()).  `slot` is the schedule slot that
# holds the victims, `bucket` the task bucket of the last victim, `slots` the slot counter.
WRONG_TYPE_KEYS = ["wheel", "slot", "reserved", "dead", "bucket", "errors", "seq", "slots",
                   "topics"]  # fmt: skip


def _victim_key(admin, queue: Queue, key: str, victims: list[str]) -> str:
    keys = queue.keys(WORK_TOPIC)
    named = {
        "topics": f"delayq:{{{queue.name}}}:topics",
        "bucket": keys.bucket(victims[-1]),
        "slots": keys.prefix + "slots",
    }
    if key == "slot":
        return keys.slot(admin.zrange(keys.wheel, 0, 0)[0])
    return named.get(key) or getattr(keys, key)


@pytest.mark.parametrize("key", WRONG_TYPE_KEYS)
async def test_10_key_of_the_wrong_type(
    key, make_redis_server, make_queue, start_worker, log_dir, caplog, record_property
) -> None:
    server = make_redis_server()
    queue = make_queue(server.url)
    install(queue, log_dir, ttr=1.0)
    keys = queue.keys(WORK_TOPIC)
    producer = Producer(queue)
    victims = [f"victim-{i}" for i in range(5)]
    for task_id in victims:
        await producer.send(task_id)
    # Two leases of a worker that died: expired, waiting to be reclaimed.
    await queue.scripts.reserve(keys, limit=2, reclaim=10, ttr_ms=1, max_attempts=50)
    admin = server.client()
    _plant(admin, queue, WORK_TOPIC, "corrupt", b"1,2,3")  # must be buried
    await redis_time_passes(queue.redis, 1)  # the two leases have run out
    victim_key = _victim_key(admin, queue, key, victims)

    admin.delete(victim_key)
    if key in ("seq", "slots"):  # a string counter: garbage of another type
        admin.hset(victim_key, "a", 1)
    else:
        admin.set(victim_key, "not the right type")
    caplog.set_level(logging.WARNING, logger="delayq")
    worker = await start_worker(queue, concurrency=4)
    others = [f"other-{i}" for i in range(5)]
    for task_id in others:
        await queue.send(OTHER_TOPIC, {}, task_id=task_id)
    await wait_for(lambda: set(others) <= _done(log_dir), 5, "another topic to keep flowing")
    await asyncio.sleep(0.5)  # the broken topic's fetch loop fails and retries meanwhile
    assert "WRONGTYPE" in caplog.text or key == "topics"

    admin.delete(victim_key)  # repaired by an operator
    # Garbage that replaced a key destroyed what the key held: those tasks are gone by hand.
    if key in ("wheel", "slot"):
        victims = []
    elif key == "bucket":
        victims = [v for v in victims if keys.bucket(v) != victim_key]
    elif key == "reserved":
        victims = victims[2:]  # the two leased ones were only referenced from `reserved`
    await producer.send("after-repair")
    expected = {*victims, "after-repair"}
    try:
        await wait_for(lambda: expected <= _done(log_dir), 3, "the topic to recover")
    except AssertionError as exc:
        problems = consistency_problems(admin, queue.name, [WORK_TOPIC])
        missing = sorted(expected - _done(log_dir))
        raise AssertionError(f"never delivered: {missing}; {problems}") from exc
    report = check(f"10 wrong type: {key}", sent=[*victims, "after-repair"],
                   returned=expected, deliveries=read_log(log_dir))  # fmt: skip
    report.publish(record_property)
    admin.close()
    assert_no_loss(report)
    # Leases of the last deliveries may still be settling on a loaded host: held drains.
    await wait_for(lambda: worker.held <= 4, 5, "the worker's leases to settle")
