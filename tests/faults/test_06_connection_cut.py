"""Scenario 6: the connection is cut in the middle of a script call, before or after Redis
executed it.

Part 1 (``test_06_cut_mid_script_never_half_applied``) drives every state transition
through the proxy itself, 1,000 times: before each call it arms a cut — *before* the request
reaches Redis, or *after* Redis executed it and before the reply arrives — once (redis-py's
single retry on a fresh connection hides it) or twice (the caller sees
``RedisUnavailableError``: the outcome is unknown).  After every call the stored state must
be exactly the state before or the state after the transition, never a mixture, and the
indexes must agree.  A send whose outcome is unknown is retried with the same id, which is
safe because the id is fixed client-side before the first attempt: the retry either stores
the task or finds it already there.

Part 2 (``test_06_connections_cut_under_load``) runs producer and two worker processes
through the proxy and cuts every connection at random moments for a few seconds: none
lost, and no lease is left in ``reserved`` past its deadline.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from delayq import Queue, RedisUnavailableError, TaskInfo
from tests.faults.apps.plan import WORK_TOPIC, real_now
from tests.faults.checker import Delivery, assert_no_loss, check, read_log
from tests.faults.harness import Producer, consistency_problems, expired_leases, leases, sized
from tests.faults.proxy import FaultProxy
from tests.helpers import wait_for

CUTS = sized(1_000, 3_000)
LEASE_MS = 300  # short, so that leases orphaned by a lost reserve reply expire quickly
MAX_ATTEMPTS = 1_000


@dataclass
class Ledger:
    """What the test, playing producer and worker, knows for sure."""

    producer: Producer
    leased: dict[str, str] = field(default_factory=dict)  # id -> token we hold
    gone: set[str] = field(default_factory=set)  # acked or cancelled by us
    acked: list[Delivery] = field(default_factory=list)
    unknown: int = 0


async def _state(queue: Queue, task_id: str) -> tuple[str, int, float | None, float] | None:
    info: TaskInfo | None = await queue.get(WORK_TOPIC, task_id)
    if info is None:
        return None
    lease = info.lease_deadline.timestamp() if info.lease_deadline else None
    return info.state.replace("ready", "delayed"), info.attempts, lease, info.due_at.timestamp()


async def _step(
    rng: random.Random, proxy: FaultProxy, queue: Queue, direct: Queue, ledger: Ledger, i: int
) -> str:
    """Run one transition through the (armed) proxy; check it is all-or-nothing."""
    keys = queue.keys(WORK_TOPIC)
    if not ledger.leased and rng.random() < 0.5:
        # Hold some leases (leased directly, no cut) so that ack/nack/extend get their turn.
        _, _, items = await direct.scripts.reserve(
            keys, limit=3, reclaim=100, ttr_ms=LEASE_MS, max_attempts=MAX_ATTEMPTS
        )
        ledger.leased.update((task_id, raw.split(b",")[1].decode()) for task_id, raw in items)
    choices = ["send", "send", "reserve", "cancel", "reschedule"]
    if ledger.leased:
        choices += ["ack", "ack", "ack", "nack", "extend"]
    op = rng.choice(choices)
    waiting = sorted(set(ledger.producer.returned) - ledger.gone - set(ledger.leased))
    target = (
        f"cut-{i}" if op == "send"
        else rng.choice(sorted(ledger.leased)) if op in ("ack", "nack", "extend")
        else rng.choice(waiting) if waiting else None
    )  # fmt: skip
    if target is None:
        return "skip"
    before = await _state(direct, target) if op != "reserve" else None
    token = ledger.leased.get(target, "")
    try:
        if op == "send":
            ok = await ledger.producer.send(target)
            if not ok:
                raise RedisUnavailableError("send failed")
        elif op == "reserve":
            _, _, items = await queue.scripts.reserve(
                keys, limit=3, reclaim=100, ttr_ms=LEASE_MS, max_attempts=MAX_ATTEMPTS
            )
            for task_id, raw in items:
                ledger.leased[task_id] = raw.split(b",")[1].decode()
        elif op == "ack":
            await queue.scripts.ack(keys, [(target, token)])
            # Whether it took effect is read from Redis, not from the reply: after a retry
            # the reply describes the second attempt, which finds the task already acked.
            _settle_ack(target, await _state(direct, target), ledger)
        elif op == "nack":
            await queue.scripts.nack(keys, target, token, mode="retry", delay_ms=0,
                                     error="cut test", max_attempts=MAX_ATTEMPTS)  # fmt: skip
            del ledger.leased[target]
        elif op == "extend":
            await queue.scripts.extend(keys, target, token, 1_000)
        elif op == "cancel":
            await queue.cancel(WORK_TOPIC, target)
            if await _state(direct, target) is None:  # as for ack: ask Redis
                ledger.gone.add(target)
        elif op == "reschedule":
            await queue.reschedule(WORK_TOPIC, target, delay=0)
        return f"{op}:ok"
    except RedisUnavailableError:
        ledger.unknown += 1
        proxy.disarm()  # the cut happened; look at the outcome without further faults
        await _settle_unknown(op, target, before, queue, direct, ledger)
        return f"{op}:unknown"


def _settle_ack(target: str, after: object, ledger: Ledger) -> None:
    """Record an ack whose effect was read back from Redis (``after`` None = acked)."""
    if after is None and target not in ledger.gone:
        ledger.gone.add(target)
        now = real_now()  # acked by the test itself: no lateness to speak of
        ledger.acked.append(Delivery(target, now, now, event="done"))
    ledger.leased.pop(target, None)


async def _settle_unknown(
    op: str,
    target: str,
    before: tuple[str, int, float | None, float] | None,
    queue: Queue,
    direct: Queue,
    ledger: Ledger,
) -> None:
    """After an error the transition happened entirely or not at all; find out which."""
    after = await _state(direct, target) if op != "reserve" else None
    if op == "send":
        assert after is None or after[0] == "delayed", after
        assert await ledger.producer.send_until_returned(target)  # same id: safe to retry
    elif op == "ack":
        assert after is None or after == before, (before, after)
        _settle_ack(target, after, ledger)
    elif op == "nack":
        assert after == before or (after is not None and after[0] == "delayed"), (before, after)
        ledger.leased.pop(target, None)
    elif op in ("extend", "reschedule"):  # state and attempts unchanged, times may move
        assert (after is None) == (before is None), (before, after)
        assert after is None or after[:2] == before[:2], (before, after)  # type: ignore[index]
    elif op == "cancel":
        assert after is None or after == before, (before, after)
        if after is None:
            ledger.gone.add(target)
    # "reserve": leases whose reply was lost are orphaned; they expire after LEASE_MS.


async def test_06_cut_mid_script_never_half_applied(
    make_redis_server, make_proxy, make_queue, spawn_worker, log_dir, queue_name,
    record_property,
) -> None:  # fmt: skip
    server = make_redis_server()
    proxy = make_proxy(server)
    queue, direct = make_queue(proxy.url()), make_queue(server.url)
    ledger = Ledger(Producer(queue))
    rng = random.Random(6)
    outcomes: dict[str, int] = {}
    with server.client() as admin:
        for i in range(CUTS):
            proxy.cut_next(rng.choice(["request", "reply"]), rng.choice([1, 1, 2]))
            outcome = await _step(rng, proxy, queue, direct, ledger, i)
            proxy.disarm()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            problems = consistency_problems(admin, queue_name, [WORK_TOPIC])
            assert not problems, f"after {outcome} (step {i}): {problems}"

        # The leases the test still holds go back; whatever else is queued (including leases
        # orphaned by lost replies) is drained by a worker once those leases expire.
        keys = direct.keys(WORK_TOPIC)
        for task_id, token in ledger.leased.items():
            await direct.scripts.nack(keys, task_id, token, mode="release",
                                      max_attempts=MAX_ATTEMPTS)  # fmt: skip
        worker = await spawn_worker(server, concurrency=20).started()
        expected = ledger.producer.returned - ledger.gone
        delivered = lambda: {d.task_id for d in read_log(log_dir) if d.event == "done"}  # noqa: E731
        try:
            await wait_for(lambda: expected <= delivered(), 15, "the rest to be delivered")
        except AssertionError as exc:
            missing = sorted(expected - delivered())[:5]
            states = [await _state(direct, task_id) for task_id in missing]
            raise AssertionError(f"missing {missing}: {states}") from exc
        # Tasks whose send outcome was unknown may have been stored and reserved by an
        # orphaned lease; they are not in ``expected``, so wait for the worker to finish
        # them too: what must never happen is a lease that stays in ``reserved``.
        reserved_key = queue.keys(WORK_TOPIC).reserved
        await wait_for(lambda: leases(admin, reserved_key) == 0, 10, "reserved to empty")
    cancelled = {t for t in ledger.gone if t not in {d.task_id for d in ledger.acked}}
    report = check("06 connection cut mid-script (each transition)",
                   sent=ledger.producer.sent, returned=ledger.producer.returned - cancelled,
                   deliveries=[*ledger.acked, *read_log(log_dir)])  # fmt: skip
    report.extra.update(
        cuts=proxy.stats.cuts,
        cut_before_executed=proxy.stats.cut_requests,
        cut_after_executed=proxy.stats.cut_replies,
        outcome_unknown=ledger.unknown,
    )
    report.publish(record_property)
    print(sorted(outcomes.items()))
    assert_no_loss(report)
    assert proxy.stats.cut_requests > CUTS // 4 and proxy.stats.cut_replies > CUTS // 4
    assert worker.alive


async def test_06_connections_cut_under_load(
    make_redis_server, make_proxy, make_queue, spawn_worker, log_dir, queue_name,
    record_property,
) -> None:  # fmt: skip
    server = make_redis_server()
    proxy = make_proxy(server)
    ttr = 2.0
    workers = [
        await spawn_worker(server, url=proxy.url(), concurrency=20, ttr=ttr).started()
        for _ in range(2)
    ]
    producer = Producer(make_queue(proxy.url()))
    rng = random.Random(66)
    ids = [f"load-{i:05d}" for i in range(sized(1_500, 5_000))]
    sending = asyncio.create_task(
        producer.send_many(ids, lambda i: rng.uniform(0, 0.5), concurrency=10)
    )
    worst_overdue = 0
    # Cuts go on for a few seconds even when the producer is done sooner (it is, since
    # sends pipeline on the script lane), so that the workers' leases and acks are cut too.
    cut_until = time.monotonic() + sized(3, 6)
    with server.client() as admin:
        while not sending.done() or time.monotonic() < cut_until:
            await asyncio.sleep(rng.uniform(0.05, 0.2))
            if rng.random() < 0.5:
                proxy.cut()
            else:
                proxy.cut_next(rng.choice(["request", "reply"]), rng.randint(1, 5))
            # A lease may outlive its deadline only until a worker's next reserve call.
            worst_overdue = max(worst_overdue, expired_leases(admin, queue_name, WORK_TOPIC,
                                                              slack_ms=2_500))  # fmt: skip
        await sending
        proxy.disarm()
        await wait_for(
            lambda: producer.returned <= _done(log_dir), ttr + 15, "every task delivered"
        )
        await wait_for(
            lambda: leases(admin, f"delayq:{{{queue_name}:{WORK_TOPIC}}}:reserved") == 0,
            ttr + 5,
            "reserved to empty",
        )
    report = check("06 connections cut at random under load", sent=producer.sent,
                   returned=producer.returned, deliveries=read_log(log_dir),
                   not_before=producer.not_before)  # fmt: skip
    report.extra.update(cuts=proxy.stats.cuts, send_errors=dict(producer.errors))
    report.publish(record_property)
    assert_no_loss(report)
    assert proxy.stats.cuts >= 20, "too few connections were cut to test anything"
    assert worst_overdue == 0, "a lease stayed in reserved long past its deadline"
    assert all(w.alive for w in workers)


@pytest.mark.parametrize("point", ["request", "reply"])
async def test_06_one_cut_is_retried_on_a_fresh_connection(
    point, make_redis_server, make_proxy, make_queue
) -> None:
    """Queue.from_url promises one transparent retry on a fresh connection; after a cut
    *after* Redis executed the send, the retry finds the task stored and returns its id.

    Regression: the synchronous ``redis.retry.Retry`` given to the asyncio client retried
    nothing.
    """
    server = make_redis_server()
    proxy = make_proxy(server)
    queue = make_queue(proxy.url())
    await queue.send(WORK_TOPIC, {}, task_id="warm-up")
    proxy.cut_next(point)
    assert await queue.send(WORK_TOPIC, {}, task_id="cut-once") == "cut-once"
    assert proxy.stats.cuts == 1
    assert (await queue.stats())[WORK_TOPIC].ready == 2


def _done(log_dir: Path) -> set[str]:
    return {d.task_id for d in read_log(log_dir) if d.event == "done"}
