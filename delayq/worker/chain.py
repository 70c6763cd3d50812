"""How a delivery reaches its handler: the middleware chain, composed once per topic.

A worker builds one :data:`Call` per topic when it starts, by wrapping the handler's call
in each middleware from the last registered to the first (so the first is outermost).
Nothing is composed per task: a delivery costs one ``partial`` per middleware (its
``call_next``), and a topic without middleware calls its handler directly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from delayq.hooks import Middleware
    from delayq.task import Task
    from delayq.topic import Topic

Call: TypeAlias = Callable[[Any, "Task[Any]"], Awaitable[None]]
"""Runs one delivery: ``await call(body, task)``."""


def handler_call(topic: Topic[Any]) -> Call:
    """The innermost call: the handler, given the body and (if it takes one) the task."""
    handler = topic.handler
    if topic.takes_task:
        return handler

    def body_only(body: Any, task: Task[Any]) -> Awaitable[None]:
        return handler(body)

    return body_only


def build_chain(topic: Topic[Any], middlewares: Sequence[Middleware]) -> Call:
    """The call a worker runs for each of ``topic``'s deliveries."""
    call = handler_call(topic)
    for middleware in reversed(middlewares):
        call = _wrapped(middleware, call)
    return call


def _wrapped(middleware: Middleware, inner: Call) -> Call:
    # A plain function returning the middleware's coroutine, not an ``async def`` awaiting
    # it: one coroutine less per middleware and task (two no-op middlewares cost 0.8-1.4 us
    # a task this way, 1.9-2.3 us the other); and ``partial``, a C-level callable, is
    # cheaper to make per task than a closure.
    def call(body: Any, task: Task[Any]) -> Awaitable[None]:
        return middleware(task, partial(inner, body, task))

    return call
