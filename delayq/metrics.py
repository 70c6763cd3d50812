"""Prometheus metrics for a queue (``pip install delayq[prometheus]``).

Counters and histograms are fed by the queue's event listener (``queue.hooks``), so they
count what happens in this process: sends it made, deliveries its worker ran.  Gauges of
tasks per topic and state are read from Redis at scrape time through a cache, a few
commands per topic whatever its size (``Queue.stats``).  Labels are the queue, the topic
and, for handler durations, the outcome: nothing unbounded.

    metrics = DelayqMetrics(queue)           # registers in prometheus_client's REGISTRY
    metrics = DelayqMetrics(queue, registry=my_registry)
    serve_metrics(9100)                      # or: delayq worker app:queue --metrics-port 9100

See docs/observability.md for multi-process workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from delayq.errors import DelayqError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client import CollectorRegistry

    from delayq.events import TaskEvent
    from delayq.queue import Queue
    from delayq.task import TopicStats

log = logging.getLogger("delayq.metrics")

LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
COUNTERS = {
    "sent": ("delayq_tasks_sent_total", "Tasks stored by sends from this process."),
    "delivered": ("delayq_tasks_delivered_total", "Handler starts (attempts) in this process."),
    "acked": ("delayq_tasks_acked_total", "Tasks finished by a successful handler."),
    "retried": ("delayq_tasks_retried_total", "Failed attempts rescheduled for a retry."),
    "dead": ("delayq_tasks_dead_lettered_total", "Tasks dead-lettered."),
    "expired": ("delayq_tasks_lease_expired_total", "Expired leases reclaimed (redelivered)."),
    "cancelled": ("delayq_tasks_cancelled_total", "Tasks cancelled from this process."),
    "released": ("delayq_tasks_released_total", "Tasks a stopping worker handed back unrun."),
    "lease_lost": ("delayq_outcomes_refused_total", "Outcomes refused: the lease was lost."),
}
STATES = ("delayed", "ready", "reserved", "dead")


class DelayqMetrics:
    """Prometheus metrics of one queue, registered in ``registry`` and fed by its events.

    Args:
        queue: the queue to observe (its ``hooks`` get a listener).
        registry: where to register (default: prometheus_client's global ``REGISTRY``).
        gauges: also export ``delayq_tasks{queue,topic,state}`` read from Redis at scrape
            time; one process of a fleet is enough.
        cache_seconds: scrapes within this long of the last read reuse it.
    """

    def __init__(
        self,
        queue: Queue,
        registry: CollectorRegistry = REGISTRY,
        *,
        gauges: bool = True,
        cache_seconds: float = 5.0,
    ) -> None:
        self.queue = queue
        labels = ("queue", "topic")
        self._counters = {
            kind: Counter(name, text, labels, registry=registry)
            for kind, (name, text) in COUNTERS.items()
        }
        self.lateness = Histogram(
            "delayq_task_lateness_seconds",
            "From a task's due time to its handler's start, on Redis's clock.",
            labels, buckets=LATENESS_BUCKETS, registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "delayq_handler_duration_seconds",
            "Handler run time, by the attempt's outcome.",
            (*labels, "outcome"), buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self.gauges = TopicGauges(queue, cache_seconds) if gauges else None
        if self.gauges is not None:
            registry.register(self.gauges)
        queue.hooks.add_listener(self.on_event)

    def close(self) -> None:
        """Stop listening to the queue (the metrics stay registered)."""
        self.queue.hooks.remove_listener(self.on_event)

    def on_event(self, event: TaskEvent) -> None:
        """The queue's event listener: count ``event`` (label children cached per topic)."""
        key = (event.kind, event.topic)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = self._labelled(event.kind, event.topic)
        counter, lateness, duration = children
        counter.inc(event.count)
        if event.lateness is not None:
            lateness.observe(max(event.lateness, 0.0))
        if event.duration is not None:
            duration.observe(event.duration)

    def _labelled(self, kind: str, topic: str) -> tuple[Any, Any, Any]:
        name = self.queue.name
        return (
            self._counters[kind].labels(name, topic),
            self.lateness.labels(name, topic),
            self.duration.labels(name, topic, kind),
        )


class TopicGauges:
    """A collector of ``delayq_tasks{queue,topic,state}``, read from Redis at scrape time.

    A scrape from another thread (``prometheus_client``'s HTTP server) runs ``Queue.stats``
    on the queue's event loop and waits for it; a scrape from the loop's own thread gets
    the cached figures and a refresh is scheduled.  Reads within ``cache_seconds`` of the
    last one reuse it, so scrapes cost Redis a few commands per topic at most that often.
    """

    def __init__(self, queue: Queue, cache_seconds: float = 5.0, timeout: float = 2.0) -> None:
        self.queue = queue
        self.cache_seconds = cache_seconds
        self.timeout = timeout
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stats: dict[str, TopicStats] = {}
        self._read_at = -float("inf")
        self._lock = threading.Lock()
        with contextlib.suppress(RuntimeError):
            self.loop = asyncio.get_running_loop()

    async def refresh(self) -> None:
        """Read the counts now (from the loop's thread)."""
        self.loop = asyncio.get_running_loop()
        self._stats = await self.queue.stats()
        self._read_at = time.monotonic()

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self._families())

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        labels = ["queue", "topic"]
        return (
            GaugeMetricFamily(
                "delayq_tasks", "Tasks per topic and state (stats())", labels=[*labels, "state"]
            ),
            GaugeMetricFamily(
                "delayq_topic_consumers", "Live workers consuming the topic", labels=labels
            ),
            GaugeMetricFamily(
                "delayq_oldest_ready_age_seconds",
                "Seconds since the topic's oldest ready task fell due (0: none is ready)",
                labels=labels,
            ),
        )

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.cache_seconds:
                self._read()
        tasks, consumers, oldest = self._families()
        for topic, stats in sorted(self._stats.items()):
            for state in STATES:
                tasks.add_metric([self.queue.name, topic, state], getattr(stats, state))
            consumers.add_metric([self.queue.name, topic], stats.consumers)
            oldest.add_metric([self.queue.name, topic], stats.oldest_ready_age or 0.0)
        yield from (tasks, consumers, oldest)

    def _read(self) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            # Scraped from the loop itself: waiting would deadlock; serve the cache.
            loop.create_task(self.refresh())
            return
        try:
            asyncio.run_coroutine_threadsafe(self.refresh(), loop).result(self.timeout)
        except (DelayqError, TimeoutError) as exc:
            log.warning("delayq_tasks gauges not refreshed: %s", exc)


def serve_metrics(port: int, addr: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread."""
    start_http_server(port, addr=addr, registry=registry)
