"""The floor under the OpenTelemetry consumer span: what the SDK itself costs per span,
beside a plain drain's worker CPU per task, in one process and one run.

Each round (the order rotating) measures, as CPU µs of this process (the batch span
processor's export thread included):

- ``plain drain``: a ``Worker`` (concurrency 100) draining ``--n`` ready tasks of a no-op
  handler from a private ``redis-server``, per task: what a task costs the worker today;
- ``SDK span``: ``tracer.start_span(...)`` and ``span.end()`` of a CONSUMER span with the
  consumer span's attributes, a remote parent and a link, nothing of delayq: the SDK's own
  price (a ``TracerProvider`` with a ``BatchSpanProcessor`` and an exporter that drops);
- ``delayq span``: ``delayq.otel``'s listener given the ``delivered`` and ``acked`` events
  of a task whose headers carry a sampled ``traceparent`` (the SDK's price plus delayq's);
- the same two under ``ParentBased(TraceIdRatioBased(0.1))``, each task's ``traceparent``
  made by a root span of that sampler (about one in ten sampled);
- ``drain, ...``: the plain drain with metrics, with history (``history=10_000``), and with
  both plus tracing under ``ParentBased(TraceIdRatioBased(0.01))`` (the tasks sent by the
  traced queue, so they carry its context): per task, the whole worker's CPU, whose
  ratio to the plain drain's is the rate such a drain can reach when the CPU limits it.

With every span recorded, a drain can go no faster than ``plain / (plain + SDK span)`` of
the plain drain's rate when the worker's CPU is what limits it (one process: it is), which
the last column prints.  Run with the dev interpreter::

    .venv/bin/python -m benchmarks.otel_floor --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
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

from delayq import Queue, Worker
from delayq.events import TaskEvent
from delayq.metrics import DelayqMetrics
from delayq.otel import Instrumentation, instrument, remote_parent
from tests.redis_server import RedisServer

SPANS = 20_000


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


def cpu_per_call(n: int, run: Callable[[], None]) -> float:
    started = time.process_time()
    run()
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

    return cpu_per_call(len(parents), run)


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
        return cpu_per_call(len(events), run)
    finally:
        tracing.uninstrument()


async def drain(url: str, n: int, round_index: int, observe: Observe | None = None) -> float:
    """Worker CPU µs per task draining ``n`` ready tasks of a no-op handler, with what
    ``observe`` switches on for the queue (sends included: the tasks carry what it adds)."""
    queue = Queue.from_url(url, name=f"floor{round_index}")
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
    ) -> None:
        self.metrics, self.history, self.tracer_provider = metrics, history, tracer_provider

    def apply(self, queue: Queue) -> None:
        if self.metrics:
            DelayqMetrics(queue, CollectorRegistry())
        if self.tracer_provider is not None:
            instrument(queue, tracer_provider=self.tracer_provider)


async def measure(rounds: int, n: int) -> dict[str, list[float]]:
    always = provider(None)
    ratio = provider(ParentBased(TraceIdRatioBased(0.1)))
    hundredth = provider(ParentBased(TraceIdRatioBased(0.01)))
    sampled, one_in_ten = senders(always, SPANS), senders(ratio, SPANS)
    everything = Observe(metrics=True, history=10_000, tracer_provider=hundredth)
    steps: dict[str, Callable[[int], Any]] = {
        "plain drain (worker, per task)": lambda r: drain(server.url, n, r),
        "drain, metrics": lambda r: drain(server.url, n, r, Observe(metrics=True)),
        "drain, history": lambda r: drain(server.url, n, r, Observe(history=10_000)),
        "drain, metrics + history + OTel at 0.01": lambda r: drain(server.url, n, r, everything),
        "SDK span, every span recorded": lambda r: sdk_span(always, sampled),
        "delayq span, every span recorded": lambda r: delayq_span(always, sampled),
        "SDK span, ParentBased(TraceIdRatioBased(0.1))": lambda r: sdk_span(ratio, one_in_ten),
        "delayq span, ParentBased(TraceIdRatioBased(0.1))": lambda r: delayq_span(
            ratio, one_in_ten
        ),
    }
    results: dict[str, list[float]] = {name: [] for name in steps}
    server = RedisServer().start()
    try:
        names = list(steps)
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                value = steps[name](r)
                results[name].append(await value if asyncio.iscoroutine(value) else value)
    finally:
        server.close()
        always.shutdown()
        ratio.shutdown()
        hundredth.shutdown()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000, help="tasks per plain drain")
    args = parser.parse_args()
    results = asyncio.run(measure(args.rounds, args.n))
    plain = statistics.median(results["plain drain (worker, per task)"])
    print(f"{'CPU µs (median of rounds)':50} {'µs':>7} {'ratio allowed':>14}   rounds")
    for name, values in results.items():
        median = statistics.median(values)
        if name.startswith("drain"):  # a whole drain's CPU: the rate it allows is plain / it
            allowed = f"{plain / median:.2f}x"
        else:
            allowed = "" if name.startswith("plain") else f"{plain / (plain + median):.2f}x"
        spread = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:50} {median:7.1f} {allowed:>14}   {spread}")


if __name__ == "__main__":
    main()
