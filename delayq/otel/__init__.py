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
``messaging.batch.message_count`` for ``send_many``, and ``server.address`` /
``server.port`` of the Redis node holding the topic.  A failed attempt ends with status
ERROR and ``error.type``, and the exception its handler raised is recorded on the span
as an ``exception`` event (type, message, stack trace).

The consumer span is current while the handler runs, so spans the handler opens are its
children.  It is started from the worker's ``delivered`` event (in the task that runs the
handler) and ended at the attempt's outcome; see docs/observability.md.  A task leased
through ``queue.consumer`` (the HTTP API) gets its consumer span too, from the lease to the
ack or nack, never made current (its handler runs in another process).  Nothing of this
runs, and nothing is imported, unless ``instrument`` is called.

``opentelemetry-instrument delayq worker app:queue`` (or ``... uvicorn app:app``) traces
every queue the program creates with no code change: delayq registers
:class:`~delayq.otel.instrumentor.DelayqInstrumentor` as an
``opentelemetry_instrumentor`` entry point.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TraceState
from redis.asyncio import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from delayq.events import Sending, TaskEvent
    from delayq.middleware import CallNext
    from delayq.queue import Queue
    from delayq.task import Task

SYSTEM = "delayq"
ENDED_BY = {"acked", "retried", "dead", "lease_lost", "released"}
FAILED = {"retried", "dead", "lease_lost"}
INSTRUMENTED: weakref.WeakKeyDictionary[Queue, Instrumentation] = weakref.WeakKeyDictionary()
"""Each traced queue's hooks: tracing a queue twice (explicitly, and by
``opentelemetry-instrument``) would record every span twice."""


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
        self._fixed: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
        # The last sender's context read from a task's headers, and those headers; with
        # the link to the sender (the tasks of one send_many share all three).
        self._last_seen: tuple[str | None, ...] = (None, None, None)
        self._last_parent: tuple[context.Context | None, tuple[Link, ...] | None] = (None, None)
        queue.hooks.on_send(self.around_send)
        queue.hooks.add_listener(self.on_event)
        queue.middleware(self.around_handler)
        INSTRUMENTED[queue] = self

    def uninstrument(self) -> None:
        """Stop tracing this queue's sends and attempts."""
        if self.around_send in self.queue.hooks.send_hooks:
            self.queue.hooks.send_hooks.remove(self.around_send)
        self.queue.hooks.remove_listener(self.on_event)
        if self.around_handler in self.queue.middlewares:
            self.queue.middlewares.remove(self.around_handler)
        if INSTRUMENTED.get(self.queue) is self:
            del INSTRUMENTED[self.queue]

    async def around_handler(self, task: Task[Any], call_next: CallNext) -> None:
        """The handler middleware: record what the handler raised on its attempt's span
        (the outcome's event carries the error's text only, not its stack trace)."""
        try:
            await call_next()
        except BaseException as exc:
            span = self._spans.get((task.topic, task.id))
            if span is not None and span.is_recording():
                span.record_exception(exc, escaped=True)
            raise

    async def around_send(self, sending: Sending, call_next: Callable[[], Awaitable[None]]) -> None:
        """The send hook: a PRODUCER span around the send; its context goes in the headers."""
        attributes: dict[str, Any] = {
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(sending.task_ids) == 1:
            attributes["messaging.message.id"] = sending.task_ids[0]
        else:
            attributes["messaging.batch.message_count"] = len(sending.task_ids)
        attributes.update(self._fixed_for(sending.topic)[2])
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
        parent = links = None
        headers = event.headers
        if headers:
            # The tasks of one send_many share their sender's context: read it once.
            value = headers.get("traceparent")
            seen = (value, headers.get("tracestate"), headers.get("baggage"))
            if value is not None and seen == self._last_seen:
                parent, links = self._last_parent
            else:
                parent, sender = remote_parent(headers)
                links = (Link(sender),) if sender is not None else None
                self._last_parent, self._last_seen = (parent, links), seen
        topic = event.topic
        name, attributes, _ = self._fixed.get(topic) or self._fixed_for(topic)
        span = self.tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER,
            links=links,
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
        if span.is_recording():
            # Kept for its outcome; a span not sampled records nothing, ends as a no-op.
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

    def _fixed_for(self, topic: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """The consumer span's name and fixed attributes, and those every span of ``topic``
        carries (built once per topic)."""
        fixed = self._fixed.get(topic)
        if fixed is None:
            common = {"messaging.system": SYSTEM, "messaging.destination.name": topic,
                      **server_attributes(self.queue, topic)}  # fmt: skip
            consumer = {**common, "messaging.operation.type": "process",
                        "messaging.operation.name": "process"}  # fmt: skip
            fixed = self._fixed[topic] = (f"process {topic}", consumer, common)
        return fixed


def server_attributes(queue: Queue, topic: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of the Redis node holding ``topic``'s keys:
    in a cluster, the primary of their slot when the topic is first traced; behind
    Sentinel, none (the primary is found per connection)."""
    client: Any = queue.redis
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(queue.keys(topic).reserved)
        return {"server.address": node.host, "server.port": node.port} if node else {}
    pool = client.connection_pool
    if isinstance(pool, SentinelConnectionPool):
        return {}
    options = pool.connection_kwargs
    if "host" in options:
        return {"server.address": options["host"], "server.port": options.get("port", 6379)}
    if "path" in options:
        return {"server.address": options["path"]}
    return {}


TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""W3C trace context's ``traceparent`` of version 00, the one :func:`remote_parent` reads
itself."""
FLAGS = {"00": trace.TraceFlags(0), "01": trace.TraceFlags(1)}
EMPTY = context.Context()


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
    flags = FLAGS.get(match[3])
    sender = trace.SpanContext(
        trace_id, span_id, is_remote=True,
        trace_flags=trace.TraceFlags(int(match[3], 16)) if flags is None else flags,
        trace_state=TraceState.from_header([state]) if state else None,
    )  # fmt: skip
    # On an empty context: the parent is the sender's alone, not whatever is current here.
    return trace.set_span_in_context(trace.NonRecordingSpan(sender), EMPTY), sender


def instrument(
    queue: Queue, tracer_provider: trace.TracerProvider | None = None
) -> Instrumentation:
    """Trace ``queue``'s sends and handler attempts with OpenTelemetry.

    Args:
        queue: the queue.
        tracer_provider: where spans go (default: the global one, ``trace.set_tracer_provider``).

    Returns:
        The registered hooks; ``.uninstrument()`` removes them.  A queue already traced
        (by ``opentelemetry-instrument``, say) keeps its hooks, which are returned.
    """
    from delayq import __version__

    existing = INSTRUMENTED.get(queue)
    if existing is not None:
        return existing
    tracer = trace.get_tracer("delayq", __version__, tracer_provider=tracer_provider)
    return Instrumentation(queue, tracer)
