"""Prometheus metrics for a queue (``pip install delayq[prometheus]``).

Counters and histograms are fed by the queue's event listener (``queue.hooks``), so they
count what happens in this process: sends it made, deliveries its worker ran, leases and
acks of its HTTP consumers.  The listener only adds to plain per-topic tallies; the
Prometheus families are built from them when scraped, so a task costs the worker an
addition or two rather than a labelled metric's lock.  Gauges of tasks per topic and state
are read from Redis at scrape time, a few commands per topic whatever its size
(``Queue.stats``), reused for at most a second.  Labels are the queue, the topic and, for
handler durations, the outcome: nothing unbounded.  A series appears with its first
observation, and none has a ``_created`` sample.

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
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from delayq.errors import DelayqError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from delayq.events import TaskEvent
    from delayq.queue import Queue
    from delayq.task import TopicStats

log = logging.getLogger("delayq.metrics")

LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
COUNTERS = {
    "sent": ("delayq_tasks_sent_total", "Tasks stored by sends from this process."),
    "delivered": ("delayq_tasks_delivered_total", "Handler starts and HTTP leases here."),
    "acked": ("delayq_tasks_acked_total", "Tasks finished by a successful handler."),
    "retried": ("delayq_tasks_retried_total", "Failed attempts rescheduled for a retry."),
    "dead": ("delayq_tasks_dead_lettered_total", "Tasks dead-lettered."),
    "expired": ("delayq_tasks_lease_expired_total", "Expired leases reclaimed (redelivered)."),
    "cancelled": ("delayq_tasks_cancelled_total", "Tasks cancelled from this process."),
    "released": ("delayq_tasks_released_total", "Tasks a stopping worker handed back unrun."),
    "lease_lost": ("delayq_outcomes_refused_total", "Outcomes refused: the lease was lost."),
}  # fmt: skip
LATENESS = (
    "delayq_task_lateness_seconds",
    "From a task's due time to its handler's start (or its HTTP lease), on Redis's clock.",
)
DURATION = ("delayq_handler_duration_seconds", "Handler run time, by the attempt's outcome.")
STATES = ("delayed", "ready", "reserved", "dead")


class Tally:
    """A histogram's figures as plain numbers: per-bucket counts (the last one above every
    bound) and the sum.  Only the event loop's thread adds; a scrape reads a copy."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_many(self, values: Sequence[float], floor: float | None = None) -> None:
        """Observe each of ``values`` (raised to ``floor`` if given), as :meth:`observe`
        would one by one: sorted once, then one bisection per bound, in C rather than
        a Python step per value."""
        ordered = sorted(values)
        if floor is not None and ordered and ordered[0] < floor:
            low = bisect_left(ordered, floor)
            ordered[:low] = [floor] * low
        counts, below = self.counts, 0
        for i, bound in enumerate(self.bounds):
            upto = bisect_right(ordered, bound, below)
            counts[i] += upto - below
            below = upto
        counts[-1] += len(ordered) - below
        self.total += sum(ordered)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last, for a HistogramMetricFamily."""
        counts = self.counts.copy()
        running, pairs = 0, []
        for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
            running += count
            pairs.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(running)))
        return pairs


class DelayqMetrics:
    """Prometheus metrics of one queue, registered in ``registry`` and fed by its events.

    Args:
        queue: the queue to observe (its ``hooks`` get a listener).
        registry: where to register (default: prometheus_client's global ``REGISTRY``).
        gauges: also export ``delayq_tasks{queue,topic,state}`` read from Redis at scrape
            time; one process of a fleet is enough.
        cache_seconds: scrapes within this long of the last read of the gauges reuse it.
    """

    def __init__(
        self,
        queue: Queue,
        registry: CollectorRegistry = REGISTRY,
        *,
        gauges: bool = True,
        cache_seconds: float = 1.0,
    ) -> None:
        self.queue = queue
        self.events = EventTallies(queue.name)
        registry.register(self.events)
        self.gauges = TopicGauges(queue, cache_seconds) if gauges else None
        if self.gauges is not None:
            registry.register(self.gauges)
        queue.hooks.add_listener(self.on_event, batches=True)

    def close(self) -> None:
        """Stop listening to the queue (the metrics stay registered)."""
        self.queue.hooks.remove_listener(self.on_event)

    def on_event(self, event: TaskEvent) -> None:
        """The queue's event listener: count ``event``."""
        self.events.add(event)


class EventTallies:
    """The collector of the counters and histograms, tallied from the queue's events."""

    def __init__(self, queue_name: str) -> None:
        self.queue_name = queue_name
        self.counts: dict[tuple[str, str], int] = {}
        self.lateness: dict[str, Tally] = {}
        self.duration: dict[tuple[str, str], Tally] = {}

    def add(self, event: TaskEvent) -> None:
        """Count ``event``, of one task or a worker's batch (the worker's hot path: a dict
        update or two, and a histogram's observations)."""
        key = (event.kind, event.topic)
        self.counts[key] = self.counts.get(key, 0) + event.count
        if event.lateness is not None or event.latenesses:
            tally = self.lateness.get(event.topic)
            if tally is None:
                tally = self.lateness[event.topic] = Tally(LATENESS_BUCKETS)
            if event.latenesses:
                tally.observe_many(event.latenesses, floor=0.0)
            if event.lateness is not None:
                tally.observe(max(event.lateness, 0.0))
        if event.duration is not None or event.durations:
            tally = self.duration.get(key)
            if tally is None:
                tally = self.duration[key] = Tally(DURATION_BUCKETS)
            if event.durations:
                tally.observe_many(event.durations)
            if event.duration is not None:
                tally.observe(event.duration)

    def describe(self) -> list[Metric]:
        return [*self._counter_families().values(), *self._histogram_families()]

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        counters = self._counter_families()
        for (kind, topic), count in sorted(self.counts.copy().items()):
            counters[kind].add_metric([self.queue_name, topic], count)
        yield from (family for family in counters.values() if family.samples)
        lateness, duration = self._histogram_families()
        for topic, tally in sorted(self.lateness.copy().items()):
            lateness.add_metric([self.queue_name, topic], tally.buckets(), tally.total)
        for (outcome, topic), tally in sorted(self.duration.copy().items()):
            duration.add_metric([self.queue_name, topic, outcome], tally.buckets(), tally.total)
        yield from (family for family in (lateness, duration) if family.samples)

    @staticmethod
    def _counter_families() -> dict[str, CounterMetricFamily]:
        return {
            kind: CounterMetricFamily(name, text, labels=["queue", "topic"])
            for kind, (name, text) in COUNTERS.items()
        }

    @staticmethod
    def _histogram_families() -> tuple[HistogramMetricFamily, HistogramMetricFamily]:
        return (
            HistogramMetricFamily(*LATENESS, labels=["queue", "topic"]),
            HistogramMetricFamily(*DURATION, labels=["queue", "topic", "outcome"]),
        )


class TopicGauges:
    """A collector of ``delayq_tasks{queue,topic,state}``, read from Redis at scrape time.

    A scrape from another thread (``prometheus_client``'s HTTP server) runs ``Queue.stats``
    on the queue's event loop and waits for it; a scrape from the loop's own thread gets
    the cached figures and a refresh is scheduled.  Reads within ``cache_seconds`` of the
    last one reuse it, so scrapes cost Redis a few commands per topic at most that often.
    """

    def __init__(self, queue: Queue, cache_seconds: float = 1.0, timeout: float = 2.0) -> None:
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
