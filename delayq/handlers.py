"""What delayq reads from a handler's signature: whether it is ``async def``, what its
body parameter validates into and whether it takes the task, and how a periodic handler
becomes one a topic can run."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, get_type_hints

from pydantic import TypeAdapter

from delayq.errors import InvalidInputError

Handler = Callable[..., Awaitable[Any]] | Callable[..., Any]
"""An ``async def`` handler, or a plain ``def`` one (run in a worker thread)."""


def check_handler(handler: object) -> bool:
    """Whether ``handler`` is an ``async def`` (True) or a plain function (False).

    Raises:
        InvalidInputError: neither, or a generator function (its body would never run).
    """
    if inspect.iscoroutinefunction(handler):
        return True
    if (
        not callable(handler)
        or inspect.isasyncgenfunction(handler)
        or inspect.isgeneratorfunction(handler)
        or inspect.isclass(handler)
    ):
        raise InvalidInputError(
            f"handler {handler!r} must be an `async def` function or a plain `def` function"
        )
    return False


def body_adapter(handler: Handler) -> tuple[TypeAdapter[Any], bool]:
    """Return the validator for the handler's body parameter and whether it takes a Task.

    The body is validated into whatever the first parameter is annotated with: a pydantic
    model, ``dict``, a dataclass, ``list[int]``...; no annotation means plain decoded JSON.

    Raises:
        InvalidInputError: the handler is not a function or takes neither 1 nor 2 arguments.
    """
    check_handler(handler)
    params = _required_params(handler)
    if len(params) not in (1, 2):
        raise InvalidInputError(
            f"handler {handler.__name__} must take (body) or (body, task), got {len(params)} arguments"
        )
    hints = get_type_hints(handler)
    annotation = hints.get(params[0].name, Any)
    return TypeAdapter(annotation), len(params) == 2


def tick_handler(handler: Handler) -> Handler:
    """Adapt a periodic handler, ``(task)`` or ``()``, to the ``(body, task)`` a topic runs
    (a tick's body is ``null``); a plain ``def`` stays one (it runs in a worker thread).

    Raises:
        InvalidInputError: the handler is not a function or takes more than one argument.
    """
    is_async = check_handler(handler)
    params = _required_params(handler)
    if len(params) > 1:
        raise InvalidInputError(
            f"periodic handler {handler.__name__} must take (task) or nothing, "
            f"got {len(params)} arguments"
        )
    takes_task = bool(params)
    run: Handler
    if is_async:

        async def run_async(body: None, task: Any) -> None:
            await (handler(task) if takes_task else handler())

        run = run_async
    else:

        def run_sync(body: None, task: Any) -> None:
            handler(task) if takes_task else handler()

        run = run_sync

    # Named after the handler for logs and reprs; its own annotations stay (body: None).
    functools.update_wrapper(run, handler, assigned=("__name__", "__qualname__", "__doc__"))
    del run.__wrapped__  # type: ignore[union-attr]  # inspect must see run's own signature
    return run


def _required_params(handler: Callable[..., Any]) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(handler).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
