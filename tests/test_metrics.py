"""Prometheus metrics: counters and histograms from a worker's events, gauges from Redis at
scrape time, scraped over HTTP as Prometheus does and parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from delayq import Backoff, Queue, Task
from delayq.metrics import DelayqMetrics, serve_metrics
from delayq.testing import free_port
from tests.fixtures_delayq import StartWorker
from tests.helpers import expire_lease, reserve
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
