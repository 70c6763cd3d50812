"""How a delivery reaches its handler: the middleware chain, composed once per topic.

A worker builds one :data:`Call` per topic when it starts, by wrapping the handler's call
in each middleware from the last registered to the first (so the first is outermost).
Nothing is composed per task: a delivery costs one ``partial`` per middleware (its
``call_next``), and a topic without middleware calls its handler directly.

A plain ``def`` handler runs in a worker thread (``anyio.to_thread.run_sync``) under the
worker's own :class:`anyio.CapacityLimiter`, so the event loop never blocks.  A thread
cannot be killed: when the TTR (or a stop) cancels the call, the thread is abandoned, the
attempt fails (or the task is handed back) as for an ``async def`` handler, and what the
thread returns or raises later is ignored.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

import anyio.to_thread

if TYPE_CHECKING:
    from anyio import CapacityLimiter

    from delayq.middleware import Middleware
    from delayq.task import Task
    from delayq.topic import Topic

Call: TypeAlias = Callable[[Any, "Task[Any]"], Awaitable[Any]]
"""Runs one delivery: ``await call(body, task)`` (the innermost returns the handler's value)."""
Keep: TypeAlias = Callable[["Task[Any]", Any], None]
"""Told what a handler returned, for a topic with ``results=`` (the worker's executor)."""


def handler_call(topic: Topic[Any], limiter: CapacityLimiter) -> Call:
    """The innermost call: the handler, given the body and (if it takes one) the task."""
    handler = topic.handler
    if not topic.is_async:
        return _in_thread(handler, topic.takes_task, limiter)
    if topic.takes_task:
        return handler  # an async def (topic.is_async)

    def body_only(body: Any, task: Task[Any]) -> Awaitable[Any]:
        return handler(body)

    return body_only


class HandlerThreads:
    """Counts the plain ``def`` handlers running in threads, abandoned ones included: what
    a process that exits leaves behind.  (An idle thread of anyio's pool, or one serving
    a static file, runs no handler and is not counted.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0

    @property
    def running(self) -> int:
        """Handlers still running in a thread."""
        return self._running

    def run(self, handler: Callable[..., Any], *args: Any) -> Any:
        """Run ``handler(*args)`` in the calling thread, counted while it runs; returns
        what it returned."""
        with self._lock:
            self._running += 1
        try:
            return handler(*args)
        finally:
            with self._lock:
                self._running -= 1


HANDLER_THREADS = HandlerThreads()
"""The process's count (threads outlive the worker that started them)."""


def _in_thread(handler: Callable[..., Any], takes_task: bool, limiter: CapacityLimiter) -> Call:
    async def call(body: Any, task: Task[Any]) -> Any:
        args = (body, task) if takes_task else (body,)
        # abandon_on_cancel: a TTR or a stop cancels the await at once; the thread runs on
        # and its result is dropped.
        return await anyio.to_thread.run_sync(
            HANDLER_THREADS.run, handler, *args, limiter=limiter, abandon_on_cancel=True
        )

    return call


def build_chain(
    topic: Topic[Any], middlewares: Sequence[Middleware], limiter: CapacityLimiter,
    keep: Keep | None = None,
) -> Call:  # fmt: skip
    """The call a worker runs for each of ``topic``'s deliveries.  It returns what the
    handler returns, unless middleware wraps it: then, for a topic with ``results=``, the
    handler's return value goes to ``keep`` (a topic without results pays nothing)."""
    call = handler_call(topic, limiter)
    if keep is not None and middlewares and topic.options.results_ms:
        call = _keeping(call, keep)
    for middleware in reversed(middlewares):
        call = _wrapped(middleware, call)
    return call


def _keeping(inner: Call, keep: Keep) -> Call:
    async def call(body: Any, task: Task[Any]) -> None:
        keep(task, await inner(body, task))

    return call


def _wrapped(middleware: Middleware, inner: Call) -> Call:
    # A plain function returning the middleware's coroutine, not an ``async def`` awaiting
    # it: one coroutine less per middleware and task (two no-op middlewares cost 0.8-1.4 us
    # a task this way, 1.9-2.3 us the other); and ``partial``, a C-level callable, is
    # cheaper to make per task than a closure.
    def call(body: Any, task: Task[Any]) -> Awaitable[None]:
        return middleware(task, partial(inner, body, task))

    return call
