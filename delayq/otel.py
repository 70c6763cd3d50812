"""OpenTelemetry tracing for a queue (``pip install delayq[otel]``; configure an SDK).

    from delayq.otel import instrument
    instrument(queue)              # the global tracer provider, or tracer_provider=...

A **producer span** ``send <topic>`` (kind PRODUCER) wraps each send call and injects its
W3C trace context (``traceparent``, ``tracestate``) into the task's headers through the
queue's send hook.  A **consumer span** ``process <topic>`` (kind CONSUMER) covers each
attempt of a handler, from its start to its outcome, as a child of the sender's context
(one trace per task: the send, then each attempt) and linked to it.  Attributes follow
OpenTelemetry's messaging semantic conventions: ``messaging.system`` (``delayq``),
``messaging.destination.name`` (the topic), ``messaging.operation.type`` (``send`` /
``process``), ``messaging.message.id``, plus ``delayq.task.attempt`` and
``messaging.batch.message_count`` for ``send_many``.  A failed attempt ends with status
ERROR and ``error.type``.

The consumer span is current while the handler runs, so spans the handler opens are its
children.  It is started from the worker's ``delivered`` event (in the task that runs the
handler) and ended at the attempt's outcome; see docs/observability.md.  A task leased
through ``queue.consumer`` (the HTTP API) gets its consumer span too, from the lease to the
ack or nack, never made current (its handler runs in another process).  Nothing of this
runs, and nothing is imported, unless ``instrument`` is called.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TraceState

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from delayq.events import Sending, TaskEvent
    from delayq.queue import Queue

SYSTEM = "delayq"
ENDED_BY = {"acked", "retried", "dead", "lease_lost", "released"}
FAILED = {"retried", "dead", "lease_lost"}


class Instrumentation:
    """The hooks :func:`instrument` registers on one queue; :meth:`uninstrument` removes them."""

    def __init__(self, queue: Queue, tracer: trace.Tracer) -> None:
        self.queue = queue
        self.tracer = tracer
        # Open consumer spans by (topic, id), and the context token attached in the task
        # that runs each one's handler (detached when that task starts the next).
        self._spans: dict[tuple[str, str], trace.Span] = {}
        self._attached: dict[asyncio.Task[Any], object] = {}
        # Per topic: the consumer span's name and fixed attributes, built once.
        self._fixed: dict[str, tuple[str, dict[str, Any]]] = {}
        queue.hooks.on_send(self.around_send)
        queue.hooks.add_listener(self.on_event)

    def uninstrument(self) -> None:
        """Stop tracing this queue's sends and attempts."""
        if self.around_send in self.queue.hooks.send_hooks:
            self.queue.hooks.send_hooks.remove(self.around_send)
        self.queue.hooks.remove_listener(self.on_event)

    async def around_send(self, sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        """The send hook: a PRODUCER span around the send; its context goes in the headers."""
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": sending.topic,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(sending.task_ids) == 1:
            attributes["messaging.message.id"] = sending.task_ids[0]
        else:
            attributes["messaging.batch.message_count"] = len(sending.task_ids)
        with self.tracer.start_as_current_span(
            f"send {sending.topic}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            propagate.inject(sending.headers)
            await call_next()

    def on_event(self, event: TaskEvent) -> None:
        """The event listener: start a CONSUMER span at ``delivered``, end it at the outcome."""
        if event.kind == "delivered":
            self._start(event)
        elif event.kind in ENDED_BY:
            span = self._spans.pop((event.topic, event.task_id), None)
            if span is not None:
                if event.kind in FAILED:
                    span.set_status(Status(StatusCode.ERROR, event.error or event.kind))
                    span.set_attribute("error.type", (event.error or event.kind).split(":")[0])
                span.set_attribute("delayq.outcome", event.kind)
                span.end()

    def _start(self, event: TaskEvent) -> None:
        parent = sender = None
        if event.headers:
            parent, sender = remote_parent(event.headers)
        topic = event.topic
        fixed = self._fixed.get(topic)
        if fixed is None:
            fixed = self._fixed[topic] = (f"process {topic}", {
                "messaging.system": SYSTEM, "messaging.destination.name": topic,
                "messaging.operation.type": "process", "messaging.operation.name": "process",
            })  # fmt: skip
        name, attributes = fixed
        span = self.tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER,
            links=(Link(sender),) if sender is not None else None,
            attributes={
                **attributes, "messaging.message.id": event.task_id,
                "delayq.task.attempt": event.attempt,
                "delayq.lateness_seconds": event.lateness or 0.0,
            },
        )  # fmt: skip
        key = (topic, event.task_id)
        previous = self._spans.pop(key, None)
        if previous is not None:
            previous.end()  # an attempt whose outcome never came (its ack failed for good)
        self._spans[key] = span
        if event.consumer:
            return  # a lease of queue.consumer: the handler (if any) runs elsewhere
        task = asyncio.current_task()
        if task is not None:
            # The handler runs next in this very task: make the span current there.
            token = self._attached.pop(task, None)
            if token is not None:
                context.detach(token)  # type: ignore[arg-type]
            self._attached[task] = context.attach(trace.set_span_in_context(span))


TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""W3C trace context's ``traceparent`` of version 00, the one :func:`remote_parent` reads
itself."""


def remote_parent(
    headers: Mapping[str, str],
) -> tuple[context.Context | None, trace.SpanContext | None]:
    """The sender's context in a task's ``headers`` and its span context (None if absent).

    A ``traceparent`` of version 00 (what OpenTelemetry's W3C propagator injects) is read
    here, without the global propagator's machinery (an eighth of the listener's time in a
    profile of a drain, through it); anything else (another version, other propagators' headers, baggage)
    goes through ``opentelemetry.propagate.extract``.
    """
    value = headers.get("traceparent")
    match = TRACEPARENT.fullmatch(value) if value is not None else None
    if match is None or "baggage" in headers:
        parent = propagate.extract(headers)
        sender = trace.get_current_span(parent).get_span_context()
        return (parent, sender) if sender.is_valid else (None, None)
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not trace_id or not span_id:
        return None, None
    state = headers.get("tracestate")
    sender = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(int(match[3], 16)),
        trace_state=TraceState.from_header([state]) if state else None,
    )  # fmt: skip
    return trace.set_span_in_context(trace.NonRecordingSpan(sender)), sender


def instrument(
    queue: Queue, tracer_provider: trace.TracerProvider | None = None
) -> Instrumentation:
    """Trace ``queue``'s sends and handler attempts with OpenTelemetry.

    Args:
        queue: the queue.
        tracer_provider: where spans go (default: the global one, ``trace.set_tracer_provider``).

    Returns:
        The registered hooks; ``.uninstrument()`` removes them.
    """
    from delayq import __version__

    tracer = trace.get_tracer("delayq", __version__, tracer_provider=tracer_provider)
    return Instrumentation(queue, tracer)
