"""``opentelemetry-instrument`` support: delayq's ``opentelemetry_instrumentor`` entry point.

    opentelemetry-instrument delayq worker app:queue
    opentelemetry-instrument uvicorn app:app

trace every queue the program creates, with no code change, as :func:`delayq.otel.instrument`
does for one queue.  Needs ``opentelemetry-instrumentation`` (which
``opentelemetry-distro`` and the ``opentelemetry-instrument`` command come with).
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from delayq.otel import INSTRUMENTED, instrument
from delayq.queue import Queue

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from opentelemetry.trace import TracerProvider


class DelayqInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces every :class:`~delayq.Queue` created after :meth:`instrument` is called.

    ``opentelemetry-instrument`` calls it before the program's code runs, so every queue
    is covered; called by hand (``DelayqInstrumentor().instrument(tracer_provider=...)``),
    it covers the queues created afterwards (trace one that exists with
    :func:`delayq.otel.instrument`).  :meth:`uninstrument` stops tracing them all.
    """

    # Class-level: the base class makes one instance, and runs __init__ at each call.
    _original: Callable[..., None] | None = None
    _traced: ClassVar[weakref.WeakSet[Queue]] = weakref.WeakSet()

    def instrumentation_dependencies(self) -> Collection[str]:
        # delayq instruments itself: it is there whenever this entry point is.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        provider: TracerProvider | None = kwargs.get("tracer_provider")
        original = self._original = Queue.__init__
        traced = self._traced

        @functools.wraps(original)
        def init(queue: Queue, *args: Any, **options: Any) -> None:
            original(queue, *args, **options)
            instrument(queue, tracer_provider=provider)
            traced.add(queue)

        # Wrapping the constructor is how every queue is reached before user code holds it:
        # the queue offers no creation hook, and adding one would cost each Queue for this.
        setattr(Queue, "__init__", init)  # noqa: B010  (mypy refuses assigning a method)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._original is not None:
            setattr(Queue, "__init__", self._original)  # noqa: B010
            self._original = None
        for queue in list(self._traced):
            hooks = INSTRUMENTED.get(queue)
            if hooks is not None:
                hooks.uninstrument()
        self._traced.clear()
