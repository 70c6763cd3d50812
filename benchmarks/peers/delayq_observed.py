"""delayq with everything of docs/observability.md switched on: Prometheus metrics (a
registry of its own), OpenTelemetry tracing (the SDK with a batch span processor and an
exporter that drops what it is given) and history on every topic (``history=10_000``).

Compared with the plain ``delayq`` adapter in the same run (``--only delayq,delayq_observed``),
it prices the observability features: the issue's target is a drain at >= 0.85x plain.

``DELAYQ_OBSERVED_PARTS`` picks the features (all three by default) and
``DELAYQ_OBSERVED_SAMPLE`` (a ratio, e.g. ``0.1``) makes the tracer provider sample with
``ParentBased(TraceIdRatioBased(ratio))`` instead of recording every span: a sender's root
span decides for its trace, and each task of a ``send_many`` batch shares its batch's
decision (the fill sends batches of 1,000, so a drain of 20,000 tasks holds 20 decisions).

The variants ``delayq_observed_metrics``, ``delayq_observed_history`` and
``delayq_observed_sampled`` (metrics + history + tracing sampled at 0.01) fix those choices
in modules of their own, so that one run prices each beside plain delayq::

    python -m benchmarks.harness --only delayq,delayq_observed_metrics,\
        delayq_observed_history,delayq_observed_sampled --scenarios drain --rounds 3 --no-chart
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from prometheus_client import CollectorRegistry

from benchmarks.common import TASK_NAMES, run_cli, run_until
from benchmarks.peers.delayq import QUEUE_NAME, DelayqPeer, noop
from delayq import Queue, Worker
from delayq.metrics import DelayqMetrics
from delayq.otel import instrument

HISTORY = 10_000


class DropSpans(SpanExporter):
    """An exporter that exports nothing: the SDK's work without a collector's."""

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


PARTS = frozenset(os.environ.get("DELAYQ_OBSERVED_PARTS", "metrics,otel,history").split(","))
"""Which features to switch on (all by default): to price each alone, e.g.
``DELAYQ_OBSERVED_PARTS=otel scripts/bench --only delayq,delayq_observed ...``."""
SAMPLE = float(os.environ.get("DELAYQ_OBSERVED_SAMPLE", "1"))
"""The share of traces recorded: 1 (the default) records every span."""


def build(
    redis_url: str, parts: frozenset[str] = PARTS, sample: float = SAMPLE
) -> tuple[Queue, TracerProvider]:
    """The benchmark queue with history on its topics, metrics and tracing (``parts``)."""
    queue = Queue.from_url(redis_url, name=QUEUE_NAME)
    for name in TASK_NAMES:
        queue.topic(name, history=HISTORY if "history" in parts else 0)(noop)
    sampler = ParentBased(TraceIdRatioBased(sample)) if sample < 1 else None
    provider = TracerProvider(sampler=sampler) if sampler else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    if "otel" in parts:
        instrument(queue, tracer_provider=provider)
    if "metrics" in parts:
        DelayqMetrics(queue, CollectorRegistry())
    return queue, provider


class DelayqObservedPeer(DelayqPeer):
    name = "delayq_observed"

    def __init__(
        self, parts: frozenset[str] = PARTS, sample: float = SAMPLE, name: str | None = None
    ) -> None:
        super().__init__()
        self.parts, self.sample = parts, sample
        if name is not None:
            self.name = name

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "observability": ", ".join(sorted(self.parts)),
            "parts": ",".join(sorted(self.parts)),
            "trace_sample": self.sample,
        }

    async def open(self, redis_url: str) -> None:
        self.queue, self._provider = build(redis_url, self.parts, self.sample)

    async def close(self) -> None:
        await super().close()
        self._provider.shutdown()

    async def serve(self, redis_url: str, concurrency: int, stop: asyncio.Event) -> None:
        queue, provider = build(redis_url, self.parts, self.sample)
        try:
            worker = Worker(queue, concurrency=concurrency, grace=1.0)
            await run_until(worker.run(handle_signals=False), stop)
        finally:
            await queue.close()
            provider.shutdown()


if __name__ == "__main__":
    run_cli(DelayqObservedPeer())
