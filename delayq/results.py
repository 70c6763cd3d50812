"""Task results: what a topic registered with ``results=`` keeps of each finished task (its
outcome and its handler's return value), how a return value is stored and read back.

The scripts that finish a task (ack, nack to dead, the reserve that dead-letters an expired
lease, cancel) store its result in the same call (``_results.lua``); waiting for one is
:mod:`delayq.waits`.  A leaf: the topic handle and the worker both use it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, get_type_hints

import pydantic_core
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from delayq.codec import unencodable_path
from delayq.errors import BodyValidationError
from delayq.task import from_millis

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("delayq.worker")

ResultT = TypeVar("ResultT")

ResultOutcome = Literal["acked", "dead", "cancelled"]
"""How a task finished: its handler succeeded (``acked``), it ran out of attempts or could
never run (``dead``; a dead letter counts as finished until it is replayed), or it was
cancelled before it ran."""


class TaskResult(BaseModel, Generic[ResultT]):
    """The stored result of a finished task of a topic registered with ``results=``.

    ``Topic.result`` gives the handler's return value validated into its annotated return
    type, ``Queue.result`` (and the HTTP API) the value as decoded JSON.

    Attributes:
        id: the task's id.
        topic: its topic.
        outcome: how it finished (:data:`ResultOutcome`).
        value: what the handler returned; ``None`` for a handler returning nothing, a dead
            or cancelled task, or a value that could not be stored (see ``error``).
        error: a dead task's last error; for an acked task whose return value was not
            JSON-serialisable or over the queue's ``max_body_bytes``,
            ``"result not stored: <reason>"``; for a task aborted while it ran
            (``Queue.cancel(..., running=True)``), ``"Aborted: ..."``; else ``None``.
        attempts: the deliveries it took (0 for a task cancelled before it ran).
        finished_at: when it finished, on Redis's clock (aware, UTC).
    """

    model_config = ConfigDict(frozen=True)

    id: str
    topic: str
    outcome: ResultOutcome
    value: ResultT | None = None
    error: str | None = None
    attempts: int
    finished_at: datetime


def encode_result(topic: str, task_id: str, value: object, max_bytes: int) -> bytes:
    """What ack.lua stores for a handler's return ``value``: ``b""`` for ``None``, ``b"v"``
    and its JSON (encoded like a body), or, for a value that cannot be stored (not
    JSON-serialisable, or over ``max_bytes``), ``b"e"`` and why, logged as a warning: the
    task is still acked."""
    if value is None:
        return b""
    try:
        data = pydantic_core.to_json(value, inf_nan_mode="null")
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError) as exc:
        reason = f"not JSON-serialisable: {unencodable_path(value)}: {exc}"
    else:
        if len(data) <= max_bytes:
            return b"v" + data
        reason = f"{len(data)} bytes, over the queue's max_body_bytes of {max_bytes}"
    log.warning("the result of %s/%s is not stored: %s", topic, task_id, reason)
    return b"e" + f"result not stored: {reason}".encode()


def parse_result(topic: str, task_id: str, raw: bytes) -> TaskResult[Any]:
    """A :class:`TaskResult` from what ``_results.lua`` stored, the value decoded JSON."""
    outcome, attempts, finished, size, rest = raw.split(b",", 4)
    cut = int(size)
    error, data = rest[:cut].decode(errors="replace"), rest[cut:]
    return TaskResult[Any](
        id=task_id, topic=topic, outcome=outcome.decode(),
        value=pydantic_core.from_json(data) if data else None, error=error or None,
        attempts=int(attempts), finished_at=from_millis(int(finished)),
    )  # fmt: skip


def typed_result(result: TaskResult[Any], adapter: TypeAdapter[Any] | None) -> TaskResult[Any]:
    """``result`` with its value validated by ``adapter`` (a handler's return type).

    Raises:
        BodyValidationError: the stored value does not fit the type (the handler changed).
    """
    if adapter is None or result.value is None:
        return result
    try:
        value = adapter.validate_python(result.value)
    except ValidationError as exc:
        raise BodyValidationError(
            f"stored result of {result.topic}/{result.id} does not fit the handler's return "
            f"type: {exc.error_count()} error(s), first: {exc.errors(include_url=False)[0]['msg']}"
        ) from exc
    return result.model_copy(update={"value": value})


def return_adapter(handler: Callable[..., Any]) -> TypeAdapter[Any] | None:
    """The validator of ``handler``'s annotated return type (``None``: not annotated, or
    ``Any``; a coroutine function's annotation is what its ``await`` gives)."""
    annotation = get_type_hints(handler).get("return", Any)
    return None if annotation is Any else TypeAdapter(annotation)
