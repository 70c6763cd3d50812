"""Batch listeners (``add_listener(..., batches=True)``): a worker's starts and acks as one
event per batch, and what the metrics and the history's activity make of them."""

from __future__ import annotations

import random
from typing import Any

from delayq import Queue, Task, TaskEvent
from delayq.metrics import DURATION_BUCKETS, LATENESS_BUCKETS, Tally
from delayq.worker.rollup import Rollup
from tests.fixtures_delayq import StartWorker
from tests.helpers import wait_for
from tests.test_events import Events


async def test_a_batch_listener_hears_starts_and_acks_in_batches(
    queue: Queue, start_worker: StartWorker
) -> None:
    each, batches = Events(), Events()
    queue.hooks.add_listener(each)
    queue.hooks.add_listener(batches, batches=True)
    assert queue.hooks.listeners == [each, batches]

    @queue.topic("t", max_attempts=1)
    async def handler(body: dict[str, int], task: Task[Any]) -> None:
        if body["i"] == 7:
            raise ValueError("seven")

    ids = [f"id{i:02d}" for i in range(60)]
    await queue.send_many("t", [{"i": i} for i in range(60)], task_ids=ids)
    await start_worker(queue, concurrency=20)
    await wait_for(lambda: sum(e.count for e in batches.items if e.kind == "acked") >= 59)
    await wait_for(lambda: "dead" in batches.kinds())

    # The per-task listener hears of each task, as before.
    for task_id in ids:
        expected = ["delivered", "dead"] if task_id == "id07" else ["delivered", "acked"]
        assert [k for k in each.kinds(task_id) if k != "sent"] == expected
    # The batch listener: fewer events, the same counts, a value per task.
    delivered = [e for e in batches.items if e.kind == "delivered"]
    acked = [e for e in batches.items if e.kind == "acked"]
    assert sum(e.count for e in delivered) == 60 and sum(e.count for e in acked) == 59
    assert len(delivered) + len(acked) < 60
    for event in delivered:
        assert event.latenesses is not None and len(event.latenesses) == event.count
        assert all(-0.005 <= lateness < 5 for lateness in event.latenesses)
        assert event.task_id in ids and event.lateness is None
    for event in acked:
        assert event.durations is not None and len(event.durations) == event.count
        assert all(0 <= duration < 5 for duration in event.durations)
    # Every other event as it is: the dead-letter of one task, with its error.
    dead = [e for e in batches.items if e.kind == "dead"]
    assert [(e.task_id, e.count, e.error) for e in dead] == [("id07", 1, "ValueError: seven")]
    # A start is told before its outcome: at any point, no more outcomes than starts.
    started = finished = 0
    for event in batches.items:
        if event.kind == "delivered":
            started += event.count
        elif event.kind in ("acked", "dead"):
            finished += event.count
        assert finished <= started
    queue.hooks.remove_listener(batches)
    assert (queue.hooks.listeners, queue.hooks.batch, queue.hooks.each) == ([each], [], [each])


async def test_only_batch_listeners_get_no_per_task_event(
    queue: Queue, start_worker: StartWorker
) -> None:
    batches = Events()
    queue.hooks.add_listener(batches, batches=True)

    @queue.topic("t")
    async def handler(body: dict[str, int]) -> None:
        return None

    await queue.send_many("t", [{"i": i} for i in range(30)])
    await start_worker(queue)
    await wait_for(lambda: sum(e.count for e in batches.items if e.kind == "acked") == 30)
    assert all(e.lateness is None and e.duration is None for e in batches.items)
    delivered = [e for e in batches.items if e.kind == "delivered"]
    assert sum(e.count for e in delivered) == 30 and len(delivered) < 30


def test_a_tally_observes_many_values_as_it_observes_each() -> None:
    rng = random.Random(7)
    for bounds in (LATENESS_BUCKETS, DURATION_BUCKETS):
        values = [rng.choice([-0.5, 0.0, *bounds, rng.uniform(-1, 400)]) for _ in range(500)]
        one, many = Tally(bounds), Tally(bounds)
        for value in values:
            one.observe(max(value, 0.0))
        many.observe_many(values[:200], floor=0.0)
        many.observe_many(values[200:], floor=0.0)
        many.observe_many([], floor=0.0)
        assert many.counts == one.counts
        assert abs(many.total - one.total) < 1e-9 * max(one.total, 1)
        assert many.buckets() == one.buckets()


def test_the_activity_counts_a_batch_as_its_tasks() -> None:
    rng = random.Random(3)
    latenesses = [rng.choice([-0.01, 0.0, 0.001, 0.0015, 0.5, 2.0, 100.0]) for _ in range(300)]
    each = Rollup(None, {"t": None})  # type: ignore[arg-type, dict-item]
    batch = Rollup(None, {"t": None})  # type: ignore[arg-type, dict-item]
    for lateness in latenesses:
        each(TaskEvent("delivered", "t", "x", 1, lateness=lateness))
        each(TaskEvent("acked", "t", "x", 1, duration=0.001))
    batch(TaskEvent("delivered", "t", "x", count=300, latenesses=latenesses))
    batch(TaskEvent("acked", "t", "x", count=300, durations=[0.001] * 300))
    batch(TaskEvent("delivered", "other", "x", count=2, latenesses=[0.1, 0.2]))
    assert each._counts == batch._counts
    assert batch._counts["t"]["acked"] == 300 and batch._counts["t"]["late_n"] == 300
