"""Groups run by real workers: the cap holds across workers (single Redis, a Redis Cluster,
a sharded topic), the fairness scenario at small scale, and a test clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from delayq import Queue, Task
from tests.fixtures_delayq import StartWorker
from tests.helpers import wait_for


class Recorder:
    """What the handlers saw: per group, how many ran at once at most, and the start order."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.worst: dict[str, int] = {}
        self.started: list[tuple[str, str]] = []
        self.done = 0

    async def run(self, body: dict[str, Any], task: Task, hold: float = 0.005) -> None:
        group = str(task.group)
        self.started.append((group, task.id))
        self.running[group] = self.running.get(group, 0) + 1
        self.worst[group] = max(self.worst.get(group, 0), self.running[group])
        await asyncio.sleep(hold)
        self.running[group] -= 1
        self.done += 1


def register(queue: Queue, recorder: Recorder, **options: Any) -> None:
    @queue.topic("t", group_by="g", **options)
    async def handler(body: dict[str, Any], task: Task) -> None:
        await recorder.run(body, task)


async def run_cap_scenario(
    queues: list[Queue], start_worker: StartWorker, *, cap: int, shards: int = 1
) -> Recorder:
    recorder = Recorder()
    for q in queues:
        register(q, recorder, max_running_per_group=cap, shards=shards)
    for q in queues:
        await start_worker(q, concurrency=8)
    bodies = [{"g": f"g{n % 6}"} for n in range(120)]
    await queues[0].send_many("t", bodies)
    await wait_for(lambda: recorder.done == 120, timeout=30, what="every task to run")
    return recorder


async def test_cap_holds_across_two_workers(queues: Any, start_worker: StartWorker) -> None:
    recorder = await run_cap_scenario([queues(), queues()], start_worker, cap=1)
    assert recorder.worst == {f"g{n}": 1 for n in range(6)}


async def test_cap_two_on_a_sharded_topic(queues: Any, start_worker: StartWorker) -> None:
    recorder = await run_cap_scenario([queues(), queues()], start_worker, cap=2, shards=3)
    assert max(recorder.worst.values()) == 2


@pytest.fixture
async def cluster_queues(cluster: Any, queue_name: str) -> AsyncIterator[list[Queue]]:
    made = [Queue.from_url(cluster.url, name=queue_name, cluster=True) for _ in range(2)]
    yield made
    for q in made:
        await q.close()


async def test_cap_holds_on_a_cluster(
    cluster_queues: list[Queue], start_worker: StartWorker
) -> None:
    recorder = await run_cap_scenario(cluster_queues, start_worker, cap=1, shards=2)
    assert recorder.worst == {f"g{n}": 1 for n in range(6)}


async def test_small_groups_are_not_starved_by_a_big_one(
    queue: Queue, start_worker: StartWorker
) -> None:
    """The fairness scenario, small: one group with 500 ready tasks and 20 groups with 5,
    concurrency 10, no cap: every small group's task starts before the big group's 50th."""
    recorder = Recorder()
    register(queue, recorder)
    await queue.send_many("t", [{"g": "big"}] * 500, batch_size=500)
    await queue.send_many("t", [{"g": f"s{n}"} for n in range(20) for _ in range(5)])
    await start_worker(queue, concurrency=10)
    await wait_for(lambda: recorder.done == 600, timeout=30, what="every task to run")
    order = [group for group, _ in recorder.started]
    big_50th = [n for n, g in enumerate(order) if g == "big"][49]
    last_small = max(n for n, g in enumerate(order) if g != "big")
    assert last_small < big_50th


async def test_run_due_runs_grouped_tasks(queue: Queue) -> None:
    from delayq.testing import run_due

    recorder = Recorder()
    register(queue, recorder, max_running_per_group=1)
    await queue.send_delayed("t", {"g": "a"}, 3600)
    await queue.send_delayed("t", {"g": "b"}, 7200)
    started = time.monotonic()
    await run_due(queue, 3600)
    assert recorder.done == 1
    await run_due(queue, 3600)
    assert recorder.done == 2
    assert time.monotonic() - started < 30


async def test_calls_by_id_find_a_grouped_task_on_a_sharded_topic(queue: Queue) -> None:
    """A grouped task lives in its group's shard: get, reschedule, cancel, replay and a
    handler-less consumer's lease calls find it there all the same."""

    @queue.topic("s", shards=4, group_by="g")
    async def handler(body: dict[str, Any]) -> None: ...

    ids = [f"task-{n}" for n in range(8)]
    await queue.send_many("s", [{"g": "one"}] * 8, task_ids=ids, delay=60)
    for task_id in ids:
        info = await queue.get("s", task_id)
        assert info is not None and info.group == "one"
    assert all([await queue.reschedule("s", task_id, delay=0) for task_id in ids])
    assert await queue.cancel("s", ids[0])
    leases = await queue.consumer.lease("s", limit=8, ttr=60)
    assert len(leases) == 7
    for lease in leases[:3]:
        await queue.consumer.ack(lease.lease_token)
    await queue.consumer.nack(leases[3].lease_token, dead=True)
    assert await queue.replay("s", leases[3].id)
    await queue.consumer.extend(leases[4].lease_token, 120)


async def test_an_idle_worker_runs_a_delayed_grouped_task_when_due(
    queue: Queue, start_worker: StartWorker
) -> None:
    """The worker sleeps until the earliest group may lease (grp:wait), and a send that
    makes a group's task the earliest wakes it."""
    recorder = Recorder()
    register(queue, recorder, max_running_per_group=1)
    await start_worker(queue, concurrency=4)
    await queue.send_delayed("t", {"g": "a"}, 30, task_id="late")
    await queue.send_delayed("t", {"g": "b"}, 0.2, task_id="soon")
    await wait_for(lambda: recorder.done == 1, timeout=10, what="the task due soon")
    assert recorder.started == [("b", "soon")]
    info = await queue.get("t", "late")
    assert info is not None and info.state == "delayed"
