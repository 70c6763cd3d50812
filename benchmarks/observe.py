"""What observing a queue costs its worker: metrics, history, OpenTelemetry, in one process.

The ``observe`` scenario (``scripts/bench --scenarios observe``, never in a default run)
runs this module once a round on the harness's data server.  Each run measures, as CPU µs
of this process (the batch span processor's export thread included):

- ``plain``: a ``Worker`` (concurrency 100) draining ``--n`` ready tasks of a no-op
  handler, per task: what a task costs the worker with nothing observed;
- ``metrics``, ``history`` (``history=10_000``), and ``sampled``: the same drain with
  Prometheus metrics, with history, and with both plus tracing under
  ``ParentBased(TraceIdRatioBased(0.01))`` (the tasks sent by the traced queue, so they
  carry its context).  The ratio of the plain drain's CPU to each is the rate such a drain
  reaches beside a plain one when the worker's CPU limits it (one process: it does);
- ``floor``: the ``sampled`` drain's floor: metrics and history, and in place of
  ``delayq.otel`` the least a listener does to have the SDK start a consumer span per
  attempt and end it (:class:`SdkOnly`: the parent read once per send, no current span, no
  exception event).  ``sampled_to_floor`` = floor CPU / sampled CPU is the share of its
  floor the sampled drain reaches;
- ``sdk_span``: ``tracer.start_span(...)`` and ``span.end()`` of a CONSUMER span with the
  consumer span's attributes, a remote parent and a link, nothing of delayq: the SDK's own
  price per recorded span (a ``TracerProvider`` with a ``BatchSpanProcessor`` and an
  exporter that drops); ``delayq_span``: ``delayq.otel``'s listener given the
  ``delivered`` and ``acked`` events of a task whose headers carry a sampled
  ``traceparent`` (the SDK's price plus delayq's).  ``delayq_over_sdk`` is delayq's own.

A round makes ``--passes`` (3) passes, each of every drain (in an order rotated each
pass) and of both span timings; each figure is the median of its passes
(``delayq_over_sdk``: of each pass's difference), so the host's drift over a round hits
every drain alike rather than the drains in the middle.

Run alone with the dev interpreter (a redis-server of its own)::

    .venv/bin/python -m benchmarks.observe --n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.propagate import inject
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind
from prometheus_client import CollectorRegistry

from benchmarks.common import emit
from delayq import Queue, Worker
from delayq.events import TaskEvent
from delayq.metrics import DelayqMetrics
from delayq.otel import Instrumentation, instrument, remote_parent
from delayq.testing import PrivateRedis

SPANS = 20_000
PASSES = 3


class DropSpans(SpanExporter):
    """An exporter that exports nothing: the SDK's work without a collector's."""

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def provider(sampler: Sampler | None) -> TracerProvider:
    tracer_provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    return tracer_provider


def senders(tracer_provider: TracerProvider, n: int) -> list[dict[str, str]]:
    """Headers of ``n`` tasks, each sent inside a root span of ``tracer_provider``."""
    tracer = tracer_provider.get_tracer("sender")
    headers: list[dict[str, str]] = []
    for _ in range(n):
        carrier: dict[str, str] = {}
        with tracer.start_as_current_span("send noop", kind=SpanKind.PRODUCER):
            inject(carrier)
        headers.append(carrier)
    return headers


def cpu_per_call(n: int, run: Callable[[], None], tracer_provider: TracerProvider) -> float:
    """CPU µs per call of ``run``, the export of its spans included: flushed inside the
    timing, and anything earlier flushed before it, so no step pays for another's."""
    tracer_provider.force_flush()
    started = time.process_time()
    run()
    tracer_provider.force_flush()
    return (time.process_time() - started) / n * 1e6


def sdk_span(tracer_provider: TracerProvider, headers: list[dict[str, str]]) -> float:
    """CPU µs of the SDK's start_span + end of one consumer span, delayq aside."""
    tracer = tracer_provider.get_tracer("delayq")
    parents = [remote_parent(h) for h in headers]
    attributes = {
        "messaging.system": "delayq", "messaging.destination.name": "noop",
        "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.message.id": "0192f0c1-7a51-7b5e-9d6f-3c4b5a697887",
        "delayq.task.attempt": 1, "delayq.lateness_seconds": 0.001,
        "server.address": "127.0.0.1", "server.port": 6379,
    }  # fmt: skip

    def run() -> None:
        for parent, sender in parents:
            links = (Link(sender),) if sender is not None else None
            span = tracer.start_span(
                "process noop", context=parent, kind=SpanKind.CONSUMER,
                links=links, attributes=attributes,
            )  # fmt: skip
            span.set_attribute("delayq.outcome", "acked")
            span.end()

    return cpu_per_call(len(parents), run, tracer_provider)


def delayq_span(tracer_provider: TracerProvider, headers: list[dict[str, str]]) -> float:
    """CPU µs of delayq's listener on a task's ``delivered`` and ``acked`` events (of a
    queue that is never connected: the listener sends nothing to Redis)."""
    queue = Queue.from_url("redis://127.0.0.1:6379/0", name="bench")
    tracing = Instrumentation(queue, tracer_provider.get_tracer("delayq"))
    events = [
        (
            TaskEvent("delivered", "noop", f"t{i}", 1, lateness=0.001, headers=h),
            TaskEvent("acked", "noop", f"t{i}", 1, duration=0.0001),
        )
        for i, h in enumerate(headers)
    ]

    def run() -> None:
        for delivered, acked in events:
            tracing.on_event(delivered)
            tracing.on_event(acked)

    try:
        return cpu_per_call(len(events), run, tracer_provider)
    finally:
        tracing.uninstrument()


class SdkOnly:
    """A listener that has the SDK start a CONSUMER span at each delivery (the sender's
    context as parent and link, the consumer span's attributes) and end it at the ack:
    what any tracing of each attempt costs, with nothing of ``delayq.otel``."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        self.tracer = tracer_provider.get_tracer("floor")
        self.spans: dict[str, Any] = {}
        self.parents: dict[str, tuple[Any, Any]] = {}
        self.attributes = {
            "messaging.system": "delayq", "messaging.destination.name": "noop",
            "messaging.operation.type": "process", "messaging.operation.name": "process",
            "server.address": "127.0.0.1", "server.port": 6379,
        }  # fmt: skip

    def __call__(self, event: TaskEvent) -> None:
        if event.kind == "delivered" and event.headers:
            value = event.headers["traceparent"]
            found = self.parents.get(value)
            if found is None:
                parent, sender = remote_parent(event.headers)
                found = self.parents[value] = (parent, (Link(sender),) if sender else None)
            self.spans[event.task_id] = self.tracer.start_span(
                "process noop", context=found[0], kind=SpanKind.CONSUMER, links=found[1],
                attributes={**self.attributes, "messaging.message.id": event.task_id,
                            "delayq.task.attempt": event.attempt,
                            "delayq.lateness_seconds": event.lateness or 0.0},
            )  # fmt: skip
        elif event.kind == "acked":
            span = self.spans.pop(event.task_id, None)
            if span is not None:
                span.set_attribute("delayq.outcome", "acked")
                span.end()


async def drain(url: str, n: int, round_index: int, observe: Observe | None = None) -> float:
    """Worker CPU µs per task draining ``n`` ready tasks of a no-op handler, with what
    ``observe`` switches on for the queue (sends included: the tasks carry what it adds)."""
    queue = Queue.from_url(url, name=f"observe{round_index}-{time.monotonic_ns()}")
    done = asyncio.Event()
    handled = 0

    async def noop(body: dict[str, Any]) -> None:
        nonlocal handled
        handled += 1
        if handled >= n:
            done.set()

    queue.topic("noop", history=observe.history if observe else 0)(noop)
    if observe is not None:
        observe.apply(queue)
    try:
        for start in range(0, n, 1000):
            await queue.send_many("noop", [{"i": i} for i in range(start, min(start + 1000, n))])
        worker = Worker(queue, concurrency=100, grace=1.0)
        started = time.process_time()
        running = asyncio.create_task(worker.run(handle_signals=False))
        await done.wait()
        spent = time.process_time() - started
        worker.stop()
        await running
    finally:
        await queue.close()
    return spent / n * 1e6


class Observe:
    """What a drain of :func:`drain` switches on: metrics, history, tracing (sampled)."""

    def __init__(
        self,
        *,
        metrics: bool = False,
        history: int = 0,
        tracer_provider: TracerProvider | None = None,
        sdk_only: bool = False,
    ) -> None:
        self.metrics, self.history, self.tracer_provider = metrics, history, tracer_provider
        self.sdk_only = sdk_only

    def apply(self, queue: Queue) -> None:
        if self.metrics:
            DelayqMetrics(queue, CollectorRegistry())
        if self.tracer_provider is None:
            return
        traced = instrument(queue, tracer_provider=self.tracer_provider)
        if self.sdk_only:
            # The sends stay traced (the tasks carry the same context); the attempts are
            # traced by SdkOnly instead.
            queue.hooks.remove_listener(traced.on_event)
            queue.middlewares.remove(traced.around_handler)
            queue.hooks.add_listener(SdkOnly(self.tracer_provider))


async def measure(url: str, n: int, passes: int = PASSES) -> dict[str, Any]:
    always = provider(None)
    hundredth = provider(ParentBased(TraceIdRatioBased(0.01)))
    headers = senders(always, SPANS)
    parts: dict[str, Observe | None] = {
        "plain": None,
        "metrics": Observe(metrics=True),
        "history": Observe(history=10_000),
        "sampled": Observe(metrics=True, history=10_000, tracer_provider=hundredth),
        "floor": Observe(metrics=True, history=10_000, tracer_provider=hundredth, sdk_only=True),
    }
    cpu: dict[str, list[float]] = {part: [] for part in parts}
    over: list[float] = []
    result: dict[str, Any] = {"n": n, "spans": SPANS, "passes": passes}
    try:
        # Every drain once a pass, the order rotated each pass, each figure the median of
        # its passes: the host's drift over a round hits every drain alike.
        names, runs = list(parts), 0
        for index in range(passes):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                cpu[name].append(await drain(url, n, runs, parts[name]))
                runs += 1
            # In a context of their own: delayq's listener makes each span current in the
            # running task, which must not be the parent of the next pass's sends.
            sdk = contextvars.copy_context().run(sdk_span, always, headers)
            delayq = contextvars.copy_context().run(delayq_span, always, headers)
            over.append(delayq - sdk)
            result.setdefault("sdk_span_list", []).append(sdk)
            result.setdefault("delayq_span_list", []).append(delayq)
    finally:
        always.shutdown()
        hundredth.shutdown()
    for name, figures in cpu.items():
        result[f"{name}_cpu_usec"] = statistics.median(figures)
    plain = result["plain_cpu_usec"]
    for part in ("metrics", "history", "sampled", "floor"):
        result[f"{part}_ratio"] = plain / result[f"{part}_cpu_usec"]
    result["sampled_to_floor"] = result["floor_cpu_usec"] / result["sampled_cpu_usec"]
    result["sdk_span_usec"] = statistics.median(result.pop("sdk_span_list"))
    result["delayq_span_usec"] = statistics.median(result.pop("delayq_span_list"))
    result["delayq_over_sdk_usec"] = statistics.median(over)
    return result


async def alone(n: int, passes: int = PASSES) -> dict[str, Any]:
    server = PrivateRedis().start()
    try:
        return await measure(server.url, n, passes)
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observe")
    parser.add_argument("--redis-url", help="a server to use (default: start one)")
    parser.add_argument("--n", type=int, default=20_000, help="tasks per drain")
    parser.add_argument("--passes", type=int, default=PASSES, help="passes of every drain")
    args = parser.parse_args()
    if args.redis_url:
        emit(asyncio.run(measure(args.redis_url, args.n, args.passes)))
    else:
        emit(asyncio.run(alone(args.n, args.passes)), pretty=True)


if __name__ == "__main__":
    main()
