"""Prometheus metrics: counters and histograms from a worker's events, gauges from Redis at
scrape time, scraped over HTTP as Prometheus does and parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from delayq import Backoff, Queue, Task
from delayq.metrics import DelayqMetrics, serve_metrics
from delayq.testing import free_port
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease, reserve, wait_for
from tests.test_events import Events


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text exposition, by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_a_scrape_shows_what_the_worker_did_and_what_redis_holds(
    queue: Queue, start_worker: StartWorker
) -> None:
    registry = CollectorRegistry()
    metrics = DelayqMetrics(queue, registry, cache_seconds=0)
    events = Events()
    queue.hooks.add_listener(events)

    @queue.topic("t", max_attempts=2, backoff=Backoff(initial=0.01, jitter=0))
    async def handler(body: dict[str, str], task: Task) -> None:
        await asyncio.sleep(0.01)
        if body["do"] == "fail":
            raise ValueError("boom")

    # A lease whose worker died: the worker reclaims it (lease_expired), then runs it.
    await queue.send("t", {"do": "ok"}, task_id="orphan")
    await reserve(queue, "t")
    await expire_lease(queue.redis, queue.keys("t"), "orphan")
    await queue.send_many("t", [{"do": "ok"}, {"do": "ok"}, {"do": "fail"}])
    await queue.send_delayed("t", {"do": "ok"}, 600, task_id="later")
    await queue.cancel("t", await queue.send_delayed("t", {"do": "ok"}, 600))
    await start_worker(queue)
    await events.wait_for("acked", 3)
    await events.wait_for("dead")
    await wait_for(queue.workers, 5, "the worker's heartbeat")
    await queue.send("idle", {})  # ready, and nobody consumes it

    port = free_port()
    serve_metrics(port, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    found = samples(text)
    q = {"queue": queue.name, "topic": "t"}
    assert value(found, "delayq_tasks_sent_total", **q) == 6  # 1 + a batch of 3 + 2
    assert value(found, "delayq_tasks_delivered_total", **q) == 5  # 3 ok + 2 attempts
    assert value(found, "delayq_tasks_acked_total", **q) == 3
    assert value(found, "delayq_tasks_retried_total", **q) == 1
    assert value(found, "delayq_tasks_dead_lettered_total", **q) == 1
    assert value(found, "delayq_tasks_lease_expired_total", **q) == 1
    assert value(found, "delayq_tasks_cancelled_total", **q) == 1
    assert value(found, "delayq_task_lateness_seconds_count", **q) == 5
    assert value(found, "delayq_task_lateness_seconds_bucket", **q, le="+Inf") == 5
    assert value(found, "delayq_handler_duration_seconds_count", **q, outcome="acked") == 3
    assert value(found, "delayq_handler_duration_seconds_sum", **q, outcome="acked") >= 0.03
    # Gauges: read from Redis when scraped (in the server's thread, on the queue's loop).
    assert value(found, "delayq_tasks", **q, state="delayed") == 1
    assert value(found, "delayq_tasks", **q, state="dead") == 1
    assert value(found, "delayq_tasks", **q, state="ready") == 0
    assert value(found, "delayq_topic_consumers", **q) == 1
    assert value(found, "delayq_oldest_ready_age_seconds", **q) == 0
    idle = {"queue": queue.name, "topic": "idle"}
    assert value(found, "delayq_topic_consumers", **idle) == 0
    assert value(found, "delayq_oldest_ready_age_seconds", **idle) >= 0
    assert "# TYPE delayq_oldest_ready_age_seconds gauge" in text
    assert "# TYPE delayq_task_lateness_seconds histogram" in text
    metrics.close()


async def test_gauges_are_cached_between_scrapes(queue: Queue) -> None:
    registry = CollectorRegistry()
    metrics = DelayqMetrics(queue, registry, cache_seconds=60)
    await queue.send_delayed("t", {}, 600)
    assert metrics.gauges is not None
    await metrics.gauges.refresh()
    first = samples(generate_latest(registry).decode())
    await queue.send_delayed("t", {}, 600)
    # Scraped from the loop's own thread: the cache answers (no wait on the loop itself).
    again = samples(generate_latest(registry).decode())
    q = {"queue": queue.name, "topic": "t"}
    assert value(first, "delayq_tasks", **q, state="delayed") == 1
    assert value(again, "delayq_tasks", **q, state="delayed") == 1
    await metrics.gauges.refresh()
    fresh = samples(generate_latest(registry).decode())
    assert value(fresh, "delayq_tasks", **q, state="delayed") == 2
    metrics.close()
    assert metrics.on_event not in queue.hooks.listeners


async def test_delayq_worker_serves_metrics(
    tmp_path, redis_url: str, queue_name: str, queue: Queue
) -> None:
    from tests.apps.runner import APP, Spawner, app_env, module_command

    port = free_port()
    spawner = Spawner(tmp_path)
    try:
        worker = spawner.spawn(
            module_command(
                "worker", APP, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"
            ),
            app_env(redis_url, queue_name),
        )
        await worker.wait_started()
        for _ in range(3):
            await queue.send("count", {})
        url = f"http://127.0.0.1:{port}/metrics"
        q = {"queue": queue_name, "topic": "count"}
        async with asyncio.timeout(10):
            while True:
                found = samples(
                    await asyncio.to_thread(
                        lambda: urllib.request.urlopen(url, timeout=5).read().decode()
                    )
                )
                if value(found, "delayq_tasks_acked_total", **q) == 3:
                    break
                await asyncio.sleep(0.05)
        assert value(found, "delayq_task_lateness_seconds_count", **q) == 3
    finally:
        spawner.close()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


async def test_every_exported_series_has_been_observed_and_none_is_created(
    queue: Queue, start_worker: StartWorker
) -> None:
    """No ``_created`` samples, no counter at zero, no histogram without an observation (a
    duration series for ``delivered``, say): each would make queries return 0 or NaN."""
    registry = CollectorRegistry()
    metrics = DelayqMetrics(queue, registry, cache_seconds=0)
    events = Events()
    queue.hooks.add_listener(events)

    @queue.topic("t", max_attempts=1)
    async def handler(body: dict[str, bool], task: Task) -> None:
        if body["fail"]:
            raise ValueError("boom")

    await queue.send_many("t", [{"fail": False}, {"fail": True}])
    await start_worker(queue)
    await events.wait_for("dead")
    await events.wait_for("acked")
    port = free_port()
    serve_metrics(port, addr="127.0.0.1", registry=registry)
    text = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
    families = list(text_string_to_metric_families(text))
    names = {s.name for family in families for s in family.samples}
    assert not [name for name in names if name.endswith("_created")]
    for family in families:
        if family.type == "counter":
            assert all(s.value > 0 for s in family.samples), family.name
        if family.type == "histogram":
            counts = [s for s in family.samples if s.name.endswith("_count")]
            assert counts and all(s.value > 0 for s in counts), family.name
    outcomes = {
        s.labels["outcome"]
        for family in families
        if family.name == "delayq_handler_duration_seconds"
        for s in family.samples
    }
    assert outcomes == {"acked", "dead"}
    assert "delayq_tasks_retried_total" not in names  # nothing was retried: no series
    found = samples(text)
    q = {"queue": queue.name, "topic": "t"}
    assert (
        value(found, "delayq_handler_duration_seconds_bucket", **q, outcome="dead", le="+Inf") == 1
    )
    assert value(found, "delayq_task_lateness_seconds_bucket", **q, le="+Inf") == 2
    metrics.close()


async def test_a_scrape_shows_gauges_read_within_the_last_second(queue: Queue) -> None:
    """The gauges' default cache keeps a read for at most a second: a scrape (from the HTTP
    server's thread, as Prometheus's) a second after the last read reads Redis again."""
    registry = CollectorRegistry()
    metrics = DelayqMetrics(queue, registry)
    assert metrics.gauges is not None
    port = free_port()
    serve_metrics(port, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{port}/metrics"
    q = {"queue": queue.name, "topic": "t"}
    await queue.send_delayed("t", {}, 600)
    assert (
        value(samples(await asyncio.to_thread(scrape, url)), "delayq_tasks", **q, state="delayed")
        == 1
    )
    read_at = time.monotonic()
    await queue.send_delayed("t", {}, 600)
    async with asyncio.timeout(10):
        while time.monotonic() < read_at + 1.0:  # the condition is the clock itself
            await asyncio.sleep(0.05)
    fresh = samples(await asyncio.to_thread(scrape, url))
    assert value(fresh, "delayq_tasks", **q, state="delayed") == 2
    metrics.close()


async def test_delayq_web_serves_metrics_of_its_http_consumers(
    tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """``delayq web --metrics-port`` counts the sends, leases and acks of its HTTP API."""
    from tests.web.conftest import TOKENS
    from tests.web.server import WebServer
    from tests.web.test_cli import call

    port = free_port()
    where = ["--url", redis_url, "--name", queue_name,
             "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]  # fmt: skip
    with WebServer(redis_url, queue_name, tmp_path, where=where) as web:
        for _ in range(2):
            status, _body = call(
                f"{web.url}/api/topics/h/tasks", "POST", {"body": {}}, TOKENS["produce"]
            )
            assert status == 201
        status, leased = call(
            f"{web.url}/api/topics/h/reserve", "POST", {"max": 2}, TOKENS["consume"]
        )
        assert status == 200, leased
        assert isinstance(leased, dict)
        for task in leased["tasks"]:
            status, _body = call(
                f"{web.url}/api/leases/{task['lease_token']}/ack", "POST", {}, TOKENS["consume"]
            )
            assert status in (200, 204), _body
        found = samples(await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics"))
        assert web.stop() == 0
    q = {"queue": queue_name, "topic": "h"}
    assert value(found, "delayq_tasks_sent_total", **q) == 2
    assert value(found, "delayq_tasks_delivered_total", **q) == len(leased["tasks"]) == 2
    assert value(found, "delayq_tasks_acked_total", **q) == 2
    assert value(found, "delayq_task_lateness_seconds_count", **q) == 2
    assert value(found, "delayq_tasks", **q, state="ready") == 0
