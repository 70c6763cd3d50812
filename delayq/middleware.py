"""The documented hooks around handlers: the queue's lifespan and its middleware.

A *lifespan* is what a worker enters once before it leases its first task and leaves after
its last handler finished; what it yields is every handler's ``task.state``.  A
*middleware* wraps every handler call (``await call_next()`` runs the rest of the chain).
Extensions (metrics, tracing) build on these two; they are a leaf, so the queue, the
worker and extensions all import them.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from delayq.errors import InvalidInputError

if TYPE_CHECKING:
    from delayq.task import Task

CallNext: TypeAlias = Callable[[], Awaitable[None]]
"""What a middleware awaits to run the rest of the chain, the handler last."""
Middleware: TypeAlias = Callable[["Task[Any]", CallNext], Awaitable[None]]
"""``async def middleware(task, call_next) -> None``, around every handler call.

Middleware runs in registration order, the first registered outermost, inside the task's
TTR.  ``await call_next()`` runs the rest of the chain and the handler; what the middleware
raises is the attempt's failure, and one that returns without calling ``call_next`` ends
the attempt as done (acked).  Workers compose the chain when they start: register
middleware before starting them."""
Lifespan: TypeAlias = (
    Callable[[], AsyncIterator[Any]] | Callable[[], AbstractAsyncContextManager[Any]]
)
"""An async generator function that yields once, or a function returning an async
context manager (``@asynccontextmanager``-decorated, say).

Every worker enters it once before it leases its first task and leaves it after its last
handler finished (also when the start fails); what it yields is ``task.state`` in every
handler.  An exception on entry stops the worker with :class:`~delayq.LifespanError`."""
LifespanT = TypeVar("LifespanT", bound=Lifespan)
MiddlewareT = TypeVar("MiddlewareT", bound=Middleware)


def check_middleware(middleware: object) -> Middleware:
    """Return ``middleware`` if it can be one, else raise :class:`InvalidInputError`.

    A middleware is an ``async def`` taking ``(task, call_next)``.
    """
    if not inspect.iscoroutinefunction(middleware):
        raise InvalidInputError(
            f"middleware {middleware!r} must be an `async def` taking (task, call_next)"
        )
    required = [
        p
        for p in inspect.signature(middleware).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(required) != 2:
        raise InvalidInputError(
            f"middleware {middleware.__qualname__} must take (task, call_next), "
            f"got {len(required)} arguments"
        )
    return middleware


def check_lifespan(lifespan: object) -> Lifespan:
    """Return ``lifespan`` if it can be one, else raise :class:`InvalidInputError`."""
    if inspect.isasyncgenfunction(lifespan) or (
        callable(lifespan) and not inspect.iscoroutinefunction(lifespan)
    ):
        return lifespan
    raise InvalidInputError(
        f"lifespan {lifespan!r} must be an async generator function (`async def` with one"
        " `yield`) or a function returning an async context manager"
    )


def lifespan_context(lifespan: Lifespan) -> AbstractAsyncContextManager[Any]:
    """The async context manager a worker enters for ``lifespan``."""
    if inspect.isasyncgenfunction(lifespan):
        return contextlib.asynccontextmanager(lifespan)()
    manager = lifespan()
    if not isinstance(manager, AbstractAsyncContextManager) and not (
        hasattr(manager, "__aenter__") and hasattr(manager, "__aexit__")
    ):
        raise TypeError(f"lifespan {lifespan!r} returned {manager!r}, not an async context manager")
    return manager  # type: ignore[return-value]  # an async context manager by duck typing
