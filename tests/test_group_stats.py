"""Queue.groups: a grouped topic's groups counted by state, on a real Redis (single node
and, for sharded topics, the local cluster), with tasks sent and leased through the real
grouped send and reserve paths."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

import delayq.group_stats
from delayq import GroupStats, InvalidInputError, Queue
from delayq.redis.keys import shard_of
from delayq.worker.declare import declared
from tests.apps.runner import app_env, module_command, run_cli


async def grouped(queue: Queue, topic: str = "t", **options: Any) -> None:
    """Register ``topic`` grouped by the body's ``tenant`` field and write its limits to
    every shard's controls, as a worker's start does (handlers never run here: tasks are
    leased with ``queue.consumer``)."""

    async def handle(body: Any) -> None: ...

    queue.topic(topic, group_by="tenant", **options)(handle)
    for keys in queue.shard_keys(topic):
        await queue.scripts.control(keys, declared(queue.topics[topic]))


async def send(queue: Queue, topic: str, tenant: str, *, ready: int = 0, delayed: int = 0) -> None:
    if ready:
        await queue.send_many(topic, [{"tenant": tenant}] * ready)
    if delayed:
        await queue.send_many(topic, [{"tenant": tenant}] * delayed, delay=600)


def row(group: str, ready: int, delayed: int, running: int, limited: bool) -> GroupStats:
    return GroupStats(group=group, ready=ready, delayed=delayed, running=running, limited=limited)


async def test_counts_ready_delayed_and_running_per_group_most_ready_first(queue: Queue) -> None:
    await grouped(queue, max_running_per_group=2)
    await send(queue, "t", "a", ready=3, delayed=1)
    await send(queue, "t", "b", ready=5)
    await send(queue, "t", "c", delayed=2)
    leased = await queue.consumer.lease("t", limit=10)
    # Round-robin under a cap of 2: two of a and two of b, then both are at their cap.
    assert sorted(t.body["tenant"] for t in leased) == ["a", "a", "b", "b"]

    assert await queue.groups("t") == [
        row("b", 3, 0, 2, True),
        row("a", 1, 1, 2, True),
        row("c", 0, 2, 0, False),
    ]
    await queue.consumer.ack(leased[0].lease_token)
    freed = leased[0].body["tenant"]
    after = {g.group: g for g in await queue.groups("t")}
    assert after[freed].running == 1 and not after[freed].limited


async def test_a_group_with_leases_only_is_listed_until_they_end(queue: Queue) -> None:
    await grouped(queue)
    await send(queue, "t", "solo", ready=1)
    (task,) = await queue.consumer.lease("t", limit=5)
    assert await queue.groups("t") == [row("solo", 0, 0, 1, False)]
    await queue.consumer.ack(task.lease_token)
    assert await queue.groups("t") == []


async def test_limit_keeps_the_groups_with_most_ready_tasks(queue: Queue) -> None:
    await grouped(queue)
    for n, tenant in enumerate("edcba", start=1):
        await send(queue, "t", tenant, ready=n)  # a: 5 ready ... e: 1
    await send(queue, "t", "z", delayed=9)
    top = await queue.groups("t", limit=2)
    assert [(g.group, g.ready) for g in top] == [("a", 5), ("b", 4)]
    every = await queue.groups("t", limit=1000)
    assert [g.group for g in every] == ["a", "b", "c", "d", "e", "z"]


@pytest.mark.parametrize("limit", [0, 1001, -1, True, "5", 2.0])
async def test_a_bad_limit_is_refused_naming_it(queue: Queue, limit: Any) -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        await queue.groups("t", limit=limit)


async def test_a_rate_limited_group_is_limited_once_its_window_is_used(queue: Queue) -> None:
    await grouped(queue, rate_limit_per_group="1/h")
    await send(queue, "t", "busy", ready=3)
    await send(queue, "t", "quiet", ready=1)
    await send(queue, "t", "idle", delayed=1)
    leased = await queue.consumer.lease("t", limit=10)
    assert sorted(t.body["tenant"] for t in leased) == ["busy", "quiet"]
    # Both used their window's one start (quiet has nothing left to start, but is out of
    # rate all the same); idle started nothing.
    assert await queue.groups("t") == [
        row("busy", 2, 0, 1, True),
        row("idle", 0, 1, 0, False),
        row("quiet", 0, 0, 1, True),
    ]
    for task in leased:
        await queue.consumer.ack(task.lease_token)
    after = {g.group: g for g in await queue.groups("t")}
    assert after["busy"] == row("busy", 2, 0, 0, True)  # its window still counts the start
    assert "quiet" not in after  # nothing waiting nor running: no longer a group


async def test_an_ungrouped_or_unknown_topic_has_no_groups(queue: Queue) -> None:
    await queue.send_delayed("plain", {"tenant": "a"}, 60)
    await queue.send("plain", {"tenant": "a"})
    assert await queue.groups("plain") == []
    assert await queue.groups("never-used") == []


def spread(shards: int, count: int) -> list[str]:
    """``count`` group names, at least one on each of ``shards`` shards (a grouped task's
    shard follows its group)."""
    names, n = [], 0
    while len(names) < count or {shard_of(g, shards) for g in names} != set(range(shards)):
        names.append(f"tenant-{n}")
        n += 1
    return names


async def test_a_sharded_topic_merges_its_shards_top_groups(queue: Queue) -> None:
    await grouped(queue, shards=4)
    tenants = spread(4, 6)
    for n, tenant in enumerate(tenants):  # tenant-k: k + 1 ready, 1 delayed
        await send(queue, "t", tenant, ready=n + 1, delayed=1)
    expected = [row(t, n + 1, 1, 0, False) for n, t in reversed(list(enumerate(tenants)))]
    assert await queue.groups("t") == expected
    assert await queue.groups("t", limit=3) == expected[:3]


async def test_groups_past_the_visit_budget_are_left_out_and_logged(
    queue: Queue, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await grouped(queue)
    for tenant in "abcde":
        await send(queue, "t", tenant, ready=1)
    monkeypatch.setattr(delayq.group_stats, "MAX_GROUPS_VISITED", 3)
    with caplog.at_level(logging.WARNING, logger="delayq"):
        assert len(await queue.groups("t")) == 3
    assert "more than 3 groups" in caplog.text
    caplog.clear()
    monkeypatch.setattr(delayq.group_stats, "MAX_GROUPS_VISITED", 5)
    with caplog.at_level(logging.WARNING, logger="delayq"):
        assert len(await queue.groups("t")) == 5
    assert "more than" not in caplog.text


async def test_on_a_redis_cluster_a_sharded_topics_groups_merge(
    cluster: Any, queue_name: str
) -> None:
    queue = Queue.from_url(cluster.url, name=queue_name, cluster=True)
    try:
        await grouped(queue, "spread", shards=6, max_running_per_group=1)
        tenants = spread(6, 8)
        masters = {cluster.node_of(queue.shard_keys("spread")[shard_of(t, 6)].prefix).port
                   for t in tenants}  # fmt: skip
        assert len(masters) == 3  # the answers come from every master
        for n, tenant in enumerate(tenants):
            await send(queue, "spread", tenant, ready=n + 2, delayed=1)
        expected = [row(t, n + 2, 1, 0, False) for n, t in reversed(list(enumerate(tenants)))]
        assert await queue.groups("spread") == expected
        assert await queue.groups("spread", limit=2) == expected[:2]
        leased = await queue.consumer.lease("spread", limit=20)
        assert leased  # each group leases one at most (its cap)
        found = {g.group: g for g in await queue.groups("spread")}
        for task in leased:
            tenant = task.body["tenant"]
            assert (found[tenant].running, found[tenant].limited) == (1, True)
        assert sum(g.ready for g in found.values()) == sum(
            n + 2 for n in range(len(tenants))
        ) - len(leased)

        await grouped(queue, "capped", max_running_per_group=1)
        await send(queue, "capped", "a", ready=3, delayed=1)
        await send(queue, "capped", "b", ready=2)
        leased = await queue.consumer.lease("capped", limit=10)
        assert sorted(t.body["tenant"] for t in leased) == ["a", "b"]
        assert await queue.groups("capped") == [row("a", 2, 1, 1, True), row("b", 1, 0, 1, True)]
    finally:
        await queue.close()


async def test_the_groups_command_prints_a_table_or_json(
    queue: Queue, redis_url: str, queue_name: str
) -> None:
    await grouped(queue, max_running_per_group=1)
    await send(queue, "t", "a", ready=2, delayed=1)
    await send(queue, "t", "b", ready=3)
    await queue.consumer.lease("t", limit=10)  # one of each: both at their cap
    env = app_env(redis_url, queue_name)
    where = ("--url", redis_url, "--name", queue_name)
    table, as_json, top, empty = await asyncio.gather(
        run_cli(module_command("groups", *where, "t"), env),
        run_cli(module_command("groups", *where, "t", "--json"), env),
        run_cli(module_command("groups", *where, "t", "--limit", "1", "--json"), env),
        run_cli(module_command("groups", *where, "plain"), env),
    )
    assert table.returncode == 0, table.stderr
    assert [line.split() for line in table.stdout.splitlines()] == [
        ["group", "ready", "delayed", "running", "limited"],
        ["b", "2", "0", "1", "yes"],
        ["a", "1", "1", "1", "yes"],
    ]
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [
        {"group": "b", "ready": 2, "delayed": 0, "running": 1, "limited": True},
        {"group": "a", "ready": 1, "delayed": 1, "running": 1, "limited": True},
    ]
    assert [g["group"] for g in json.loads(top.stdout)] == ["b"]
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "has no groups" in empty.stderr


async def test_the_groups_command_refuses_a_bad_limit_without_a_traceback(
    redis_url: str, queue_name: str
) -> None:
    env = app_env(redis_url, queue_name)
    where = ("--url", redis_url, "--name", queue_name)
    zero, word = await asyncio.gather(
        run_cli(module_command("groups", *where, "t", "--limit", "0"), env),
        run_cli(module_command("groups", *where, "t", "--limit", "many"), env),
    )
    assert zero.returncode == 2 and "Traceback" not in zero.stderr
    assert "delayq: limit must be an int in [1, 1000], got 0" in zero.stderr
    assert word.returncode == 2 and "Traceback" not in word.stderr
    assert "--limit" in word.stderr  # argparse's own message
