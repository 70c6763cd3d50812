"""OpenTelemetry: a producer span per send, a consumer span per attempt in the sender's
trace, W3C context carried in the task's headers; checked with the SDK's in-memory exporter."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from delayq import Backoff, Queue, Task
from delayq.otel import instrument
from tests.fixtures_delayq import StartWorker
from tests.test_events import Events


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_a_task_is_one_trace_from_send_to_each_attempt(
    queue: Queue, start_worker: StartWorker
) -> None:
    provider, exporter = tracing()
    tracer = provider.get_tracer("app")
    instrumentation = instrument(queue, tracer_provider=provider)
    events = Events()
    queue.hooks.add_listener(events)
    seen_headers: list[dict[str, str]] = []

    @queue.topic("order.close", backoff=Backoff(initial=0.01, jitter=0))
    async def close(body: dict[str, int], task: Task) -> None:
        seen_headers.append(dict(task.headers))
        with tracer.start_as_current_span("inside the handler"):
            if task.attempt == 1:
                raise ValueError("not yet")

    with tracer.start_as_current_span("checkout") as checkout:
        task_id = await queue.send("order.close", {"order_id": 7})
    await start_worker(queue)
    await events.wait_for("acked")
    instrumentation.uninstrument()

    spans = {
        (s.name, s.attributes.get("delayq.task.attempt")): s for s in exporter.get_finished_spans()
    }
    send = spans[("send order.close", None)]
    first, second = spans[("process order.close", 1)], spans[("process order.close", 2)]
    inner = [s for s in exporter.get_finished_spans() if s.name == "inside the handler"]
    trace_id = checkout.get_span_context().trace_id
    assert {s.context.trace_id for s in (send, first, second, *inner)} == {trace_id}
    assert (
        send.kind == SpanKind.PRODUCER
        and send.parent.span_id == checkout.get_span_context().span_id
    )
    for attempt in (first, second):
        assert attempt.kind == SpanKind.CONSUMER
        assert attempt.parent.span_id == send.context.span_id
        assert [link.context.span_id for link in attempt.links] == [send.context.span_id]
        assert attempt.attributes["messaging.system"] == "delayq"
        assert attempt.attributes["messaging.destination.name"] == "order.close"
        assert attempt.attributes["messaging.operation.type"] == "process"
        assert attempt.attributes["messaging.message.id"] == task_id
    assert send.attributes["messaging.message.id"] == task_id
    assert (
        first.status.status_code == StatusCode.ERROR
        and first.attributes["error.type"] == "ValueError"
    )
    # The handler's exception, recorded as the semantic conventions' span event.
    [raised] = [e for e in first.events if e.name == "exception"]
    assert raised.attributes["exception.type"] == "ValueError"
    assert raised.attributes["exception.message"] == "not yet"
    assert 'raise ValueError("not yet")' in raised.attributes["exception.stacktrace"]
    assert not [e for e in second.events if e.name == "exception"]
    # The Redis node the topic lives on.
    host, port = (
        queue.redis.connection_pool.connection_kwargs["host"],
        queue.redis.connection_pool.connection_kwargs["port"],
    )
    for span in (send, first, second):
        assert (span.attributes["server.address"], span.attributes["server.port"]) == (host, port)
    assert second.status.status_code != StatusCode.ERROR
    assert second.attributes["delayq.outcome"] == "acked"
    # The handler's own spans are children of its attempt's span.
    assert sorted(s.parent.span_id for s in inner) == sorted(
        [first.context.span_id, second.context.span_id]
    )
    traceparent = seen_headers[0]["traceparent"]
    assert traceparent.split("-")[1] == f"{trace_id:032x}"
    assert traceparent.split("-")[2] == f"{send.context.span_id:016x}"


async def test_a_batch_send_is_one_span_and_every_task_carries_its_context(queue: Queue) -> None:
    provider, exporter = tracing()
    instrument(queue, tracer_provider=provider)
    ids = await queue.send_many("t", [{}, {}, {}], delay=60)
    [span] = exporter.get_finished_spans()
    assert span.attributes["messaging.batch.message_count"] == 3
    for task_id in ids:
        info = await queue.get("t", task_id)
        assert info is not None
        assert info.headers["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"


async def test_without_instrument_nothing_is_traced_or_added(queue: Queue) -> None:
    provider, exporter = tracing()
    instrumentation = instrument(queue, tracer_provider=provider)
    instrumentation.uninstrument()
    task_id = await queue.send("t", {})
    assert exporter.get_finished_spans() == ()
    assert (await queue.get("t", task_id)).headers == {}  # type: ignore[union-attr]
    assert queue.hooks.send_hooks == [] and queue.hooks.listeners == []


def test_remote_parent_reads_traceparent_as_the_w3c_propagator_does() -> None:
    """The direct read of ``traceparent`` agrees with OpenTelemetry's propagator, and what
    it does not read goes through the propagator."""
    from opentelemetry import propagate, trace
    from opentelemetry.baggage import get_baggage

    from delayq.otel import remote_parent

    valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    cases = [
        {"traceparent": valid},
        {"traceparent": valid, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
        {"traceparent": valid.replace("-01", "-00")},
        {"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"},  # zero trace id
        {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"},  # upper case
        {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
        {"traceparent": "garbage"},
        {"order": "7"},
    ]
    for headers in cases:
        parent, sender = remote_parent(headers)
        expected = trace.get_current_span(propagate.extract(headers)).get_span_context()
        if expected.is_valid:
            assert sender == expected and parent is not None, headers
            assert trace.get_current_span(parent).get_span_context() == expected
        else:
            assert (parent, sender) == (None, None), headers
    parent, _ = remote_parent({"traceparent": valid, "baggage": "user=7"})
    assert parent is not None and get_baggage("user", parent) == "7"


async def test_a_task_leased_over_the_lease_token_api_is_traced(queue: Queue) -> None:
    """``queue.consumer`` (the HTTP API's consumer) gets a consumer span from the lease to
    the ack, in the sender's trace, and never makes it current in the leasing task."""
    from opentelemetry import trace

    provider, exporter = tracing()
    instrumentation = instrument(queue, tracer_provider=provider)
    task_id = await queue.send("http", {"n": 1})
    (leased,) = await queue.consumer.lease("http")
    assert not trace.get_current_span().get_span_context().is_valid
    await queue.consumer.ack(leased.lease_token)
    instrumentation.uninstrument()
    send, process = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert (send.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert process.parent is not None and send.context is not None
    assert process.parent.span_id == send.context.span_id
    assert process.attributes is not None
    assert process.attributes["messaging.message.id"] == task_id
    assert process.attributes["delayq.outcome"] == "acked"


async def test_instrumenting_a_queue_twice_records_each_span_once(queue: Queue) -> None:
    provider, exporter = tracing()
    first = instrument(queue, tracer_provider=provider)
    assert instrument(queue, tracer_provider=provider) is first
    await queue.send("t", {})
    assert [s.name for s in exporter.get_finished_spans()] == ["send t"]
    first.uninstrument()


async def test_the_instrumentor_traces_every_queue_created_while_on(
    redis_url: str, queue_name: str
) -> None:
    """What ``opentelemetry-instrument`` does in-process: every queue created after
    ``DelayqInstrumentor().instrument()`` is traced, and none after ``uninstrument()``."""
    from delayq.otel.instrumentor import DelayqInstrumentor

    provider, exporter = tracing()
    instrumentor = DelayqInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        queue = Queue.from_url(redis_url, name=queue_name)
        await queue.send("t", {})
        [span] = exporter.get_finished_spans()
        assert span.name == "send t" and span.kind == SpanKind.PRODUCER
    finally:
        instrumentor.uninstrument()
    await queue.send("t", {})  # its hooks were removed
    later = Queue.from_url(redis_url, name=queue_name)
    await later.send("t", {})
    assert len(exporter.get_finished_spans()) == 1
    await queue.close()
    await later.close()


async def test_every_task_of_a_batch_is_processed_in_its_batchs_trace(
    queue: Queue, start_worker: StartWorker
) -> None:
    """The tasks of one send_many share their sender's context (read once for them all)
    and each gets its own consumer span, a child of the batch's send span."""
    provider, exporter = tracing()
    instrument(queue, tracer_provider=provider)
    events = Events()
    queue.hooks.add_listener(events)

    @queue.topic("b")
    async def handler(body: dict[str, int]) -> None:
        return None

    first = await queue.send_many("b", [{}, {}, {}])
    second = await queue.send_many("b", [{}, {}])
    await start_worker(queue)
    await events.wait_for("acked", 5)
    spans = exporter.get_finished_spans()
    sends = [s for s in spans if s.kind == SpanKind.PRODUCER]
    processed = {
        s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.CONSUMER
    }
    assert len(sends) == 2 and len(processed) == 5
    for ids, send in zip((first, second), sorted(sends, key=lambda s: s.start_time), strict=True):
        for task_id in ids:
            assert processed[task_id].parent.span_id == send.context.span_id
            assert processed[task_id].context.trace_id == send.context.trace_id
