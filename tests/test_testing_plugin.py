"""delayq.testing, the pytest plugin: ``run_due`` on the plugin's private redis-server
(retries, dead letters, periodic ticks, the hooks and the TTR all as in production), what it
leaves alone, a clear error without redis-server, the docs/testing.md example, and the
plugin as a user's test suite gets it (pytester).  The test clock itself: test_clock.py."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from delayq import Backoff, CallNext, Queue, Task
from delayq.testing import PrivateRedisError, run_due
from delayq.testing.server import find_redis_server
from examples.fastapi_app import Shop, create_app

pytest_plugins = ["pytester"]
MINUTE = 60_000


async def queue_now_ms(queue: Queue, topic: str) -> int:
    """The time ``topic``'s scripts read: Redis's plus the queue's test clock offset."""
    now, _ = await queue.scripts.clock(queue.keys(topic))
    return now


@pytest.fixture
async def shop(delayq_redis_url: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(delayq_redis_url, name="shop")
    try:
        yield queue
    finally:
        await queue.close()


async def test_run_due_runs_what_falls_due_and_leaves_the_rest(shop: Queue) -> None:
    ran: list[str] = []

    @shop.topic("order.close")
    async def close(body: dict[str, int], task: Task) -> None:
        ran.append(task.id)

    before = await queue_now_ms(shop, "order.close")
    await shop.send_delayed("order.close", {"n": 1}, timedelta(minutes=30), task_id="in-30m")
    await shop.send_delayed("order.close", {"n": 2}, timedelta(minutes=5), task_id="in-5m")
    await shop.send_delayed("order.close", {"n": 3}, timedelta(hours=2), task_id="in-2h")

    outcomes = await run_due(shop, within=timedelta(minutes=30))

    assert [(o.task_id, o.outcome) for o in outcomes] == [("in-5m", "acked"), ("in-30m", "acked")]
    assert ran == ["in-5m", "in-30m"]
    later = await shop.get("order.close", "in-2h")
    assert later is not None and later.state == "delayed" and later.attempts == 0
    assert await queue_now_ms(shop, "order.close") - before >= 30 * MINUTE
    # The queue's clock stays moved: what the test sends next is due relative to it.
    assert (await run_due(shop, within=timedelta(minutes=89))) == []
    assert [o.task_id for o in await run_due(shop, within=timedelta(minutes=2))] == ["in-2h"]


async def test_retries_and_dead_letters_inside_the_horizon(shop: Queue) -> None:
    @shop.topic("webhook", max_attempts=3, backoff=Backoff(initial=60, factor=2, jitter=0))
    async def webhook(body: dict[str, bool], task: Task) -> None:
        if body["fail"] or task.attempt < 2:
            raise ConnectionError(f"attempt {task.attempt}")

    await shop.send("webhook", {"fail": False}, task_id="flaky")
    await shop.send("webhook", {"fail": True}, task_id="broken")

    outcomes = await run_due(shop, within=timedelta(minutes=5))

    by_task = {
        task_id: [(o.attempt, o.outcome) for o in outcomes if o.task_id == task_id]
        for task_id in ("flaky", "broken")
    }
    assert by_task["flaky"] == [(1, "retried"), (2, "acked")]
    assert by_task["broken"] == [(1, "retried"), (2, "retried"), (3, "dead")]
    assert outcomes[-1].error == "ConnectionError: attempt 3"
    # The backoff's delays passed in queue time: 60 s, then 120 s after the first retry.
    broken = [o.due_at for o in outcomes if o.task_id == "broken"]
    assert broken[1] - broken[0] >= timedelta(seconds=60)
    assert broken[2] - broken[1] >= timedelta(seconds=120)
    assert [d.id for d in await shop.dead_letters("webhook")] == ["broken"]


async def test_periodic_ticks_inside_the_horizon_run_once_each(shop: Queue) -> None:
    ticks: list[str] = []

    @shop.periodic("cart.sweep", every=timedelta(minutes=5))
    async def sweep(task: Task) -> None:
        ticks.append(task.id)

    outcomes = await run_due(shop, within=timedelta(minutes=30))
    assert len(ticks) == 6 == len(set(ticks))
    assert [o.outcome for o in outcomes] == ["acked"] * 6
    due = [o.due_at for o in outcomes]
    assert all(b - a == timedelta(minutes=5) for a, b in itertools.pairwise(due))


async def test_the_hooks_and_the_ttr_apply(shop: Queue) -> None:
    log: list[str] = []

    @shop.lifespan
    async def resources() -> AsyncIterator[str]:
        log.append("enter")
        yield "db"
        log.append("exit")

    @shop.middleware
    async def around(task: Task, call_next: CallNext) -> None:
        log.append(f"mw {task.id}")
        await call_next()

    @shop.topic("job", ttr=0.3, max_attempts=2, backoff=Backoff(initial=30, jitter=0))
    async def job(body: None, task: Task[str]) -> None:
        log.append(f"{task.id} {task.attempt} {task.state}")
        if task.attempt == 1:
            await asyncio.sleep(5)  # overruns its (real) TTR

    await shop.send_delayed("job", None, 600, task_id="j")
    outcomes = await run_due(shop, within=timedelta(hours=1))
    assert [(o.attempt, o.outcome) for o in outcomes] == [(1, "retried"), (2, "acked")]
    assert outcomes[0].error is not None and outcomes[0].error.startswith("TTRExceeded")
    assert log == ["enter", "mw j", "j 1 db", "mw j", "j 2 db", "exit"]


async def test_topics_limits_what_runs(shop: Queue) -> None:
    @shop.topic("a")
    async def a(body: None) -> None: ...

    @shop.topic("b")
    async def b(body: None) -> None: ...

    await shop.send_delayed("a", None, 60, task_id="a1")
    await shop.send_delayed("b", None, 60, task_id="b1")
    outcomes = await run_due(shop, within=timedelta(minutes=2), topics=["a"])
    assert [o.task_id for o in outcomes] == ["a1"]
    info = await shop.get("b", "b1")
    assert info is not None and info.state == "ready"  # its time came, nobody ran it


def test_a_clear_error_without_redis_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DELAYQ_REDIS_SERVER", str(tmp_path / "no-such-redis-server"))
    with pytest.raises(PrivateRedisError, match="not an executable redis-server"):
        find_redis_server()
    monkeypatch.delenv("DELAYQ_REDIS_SERVER")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrivateRedisError, match="apt-get install redis-server"):
        find_redis_server()


# -- docs/testing.md ----------------------------------------------------------------------


async def test_the_docs_example_an_unpaid_order_closes_after_30_minutes(
    delayq_redis_url: str,
) -> None:
    app = create_app(delayq_redis_url, "shop", embedded_worker=False)
    async with app.router.lifespan_context(app):
        shop: Shop = app.state.shop
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            created = await client.post("/orders", json={"item": "book", "pay_within": 1800})
            order_id = created.json()["id"]

            outcomes = await run_due(shop.queue, within=timedelta(minutes=29))
            assert outcomes == []
            assert (await client.get(f"/orders/{order_id}")).json()["order"]["status"] == (
                "pending"
            )

            outcomes = await run_due(shop.queue, within=timedelta(minutes=1))
            assert [(o.task_id, o.outcome) for o in outcomes] == [(f"order-{order_id}", "acked")]
            view = (await client.get(f"/orders/{order_id}")).json()
            assert view == {"order": {**created.json(), "status": "closed"}, "close": None}


# -- the plugin as a user's suite gets it ----------------------------------------------------

USER_TESTS = """
from datetime import timedelta

from delayq import Queue, Task
from delayq.testing import run_due


async def make(url):
    queue = Queue.from_url(url, name="app")

    @queue.topic("remind")
    async def remind(body: dict, task: Task) -> None: ...

    return queue


async def test_first(delayq_redis_url):
    queue = await make(delayq_redis_url)
    await queue.send_delayed("remind", {}, timedelta(days=1), task_id="r1")
    await queue.send_delayed("remind", {}, timedelta(days=3), task_id="r3")
    outcomes = await run_due(queue, within=timedelta(days=2))
    assert [o.task_id for o in outcomes] == ["r1"]
    await queue.close()


async def test_second_starts_empty_and_on_time(delayq_redis_url):
    queue = await make(delayq_redis_url)
    assert await queue.stats() == {}
    seconds, _ = await queue.redis.time()
    import time
    assert abs(seconds - time.time()) < 60
    await queue.close()
"""


def test_a_user_suite_gets_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_importing_the_plugin_loads_no_optional_dependency() -> None:
    """pytest imports the plugin in every suite that has delayq installed (this one too)."""
    from tests.test_architecture import OPTIONAL

    code = (
        "import sys, pytest, redis.asyncio, pydantic, anyio; before = set(sys.modules); "
        "import delayq_pytest; "
        f"print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {OPTIONAL!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
