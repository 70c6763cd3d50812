"""The API's error model: every failure is a JSON ``ApiError`` with a status that says whose
fault it is.

======  ===========================================================================
status  when
======  ===========================================================================
401     no token, or an unknown one (with ``WWW-Authenticate: Bearer``)
403     the token lacks the endpoint's scope (or no token may write at all)
404     no such task, dead letter, result or route; ``unknown_topic``: a send to a topic
        the server has no handler for, when it refuses those (``strict_topics``)
408     ``not_ready``: a result's ``wait`` ran out before the task finished
409     the task is not in a state that allows it (running; a lease no longer held)
413     the request body is larger than the queue accepts
422     bad input: ``field`` names it; nothing was written
503     Redis is unreachable, refused us, or is out of memory; retry later
======  ===========================================================================
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from delayq.errors import (
    BodyTooLargeError,
    BodyValidationError,
    DelayqError,
    InvalidHeadersError,
    InvalidInputError,
    LeaseLostError,
    NotDurableError,
    RedisAuthError,
    RedisOutOfMemoryError,
    RedisUnavailableError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from fastapi import FastAPI, Request

log = logging.getLogger("delayq.web")


class ApiError(BaseModel):
    """The body of every error response."""

    error: str
    """A short code: ``unauthorized``, ``forbidden``, ``not_found``, ``unknown_topic``,
    ``conflict``, ``not_ready``, ``too_large``, ``invalid_input``, ``unavailable`` or
    ``internal``."""
    message: str
    field: str | None = None
    """For ``invalid_input``: the request field at fault (``delay``, ``topic``, ``body.x``...)."""


class ApiProblem(Exception):
    """Raised by an endpoint to answer with an :class:`ApiError`."""

    def __init__(self, status: int, error: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = ApiError(error=error, message=message, field=field)


def not_found(what: str) -> ApiProblem:
    return ApiProblem(404, "not_found", what)


def conflict(what: str) -> ApiProblem:
    return ApiProblem(409, "conflict", what)


def invalid(message: str, field: str | None) -> ApiProblem:
    return ApiProblem(422, "invalid_input", message, field)


def unknown_topic(exc: UnknownTopicError) -> ApiProblem:
    """The 404 for a send to a topic the server refuses (``strict_topics``)."""
    return ApiProblem(404, "unknown_topic", str(exc), "topic")


def _response(status: int, body: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


ARGUMENT = re.compile(
    r"""([a-z][a-z0-9_]*)(?: '[^']*'| "[^"]*")?(?: must\b| is\b| contains\b|[=:])"""
)
"""How the core's messages about a bad argument start: ``delay must be ...``, ``topic 'a b'
contains ...``, ``task_id is longer ...``."""


def argument_of(exc: InvalidInputError) -> str | None:
    """The name of the argument an error of the core is about, if its message names one
    (headers' errors are about ``headers``, a lease token's about ``token``)."""
    if isinstance(exc, InvalidHeadersError):
        return "headers"
    if isinstance(exc, (BodyTooLargeError, BodyValidationError)):
        return "body"
    message = str(exc)
    if message.startswith("lease token "):
        return "token"
    found = ARGUMENT.match(message)
    return found.group(1) if found else None


@contextmanager
def naming(*fields: str) -> Iterator[None]:
    """Answer the core's ``InvalidInputError`` with a 422 naming whichever of ``fields``
    its message is about (a lease token's errors name ``token``)."""
    try:
        yield
    except InvalidInputError as exc:
        raise renamed(exc, fields) from None


def renamed(exc: InvalidInputError, fields: tuple[str, ...]) -> ApiProblem:
    """The 422 that :func:`naming` answers ``exc`` with (a 404 for an unknown topic)."""
    if isinstance(exc, UnknownTopicError):
        return unknown_topic(exc)
    argument = argument_of(exc)
    return invalid(str(exc), argument if argument in fields or argument == "headers" else None)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ApiError, "description": description}
    for status, description in (
        (401, "No token, or an unknown one"),
        (403, "The token lacks the endpoint's scope"),
        (404, "Not found"),
        (409, "Conflict: the task's state does not allow it"),
        (413, "Request body too large"),
        (422, "Invalid input; `field` names it"),
        (503, "Redis unavailable"),
    )
}
"""Declared on every route, so the OpenAPI document lists each error a route can give."""


def whole_body(content_type: str, problem: str) -> ApiError:
    """The error for a request body that is not a JSON object (``field`` is None: no field
    of it is at fault)."""
    if "json" not in content_type:
        problem = f"send the request body as JSON with Content-Type: application/json, not {content_type!r}"
    return ApiError(error="invalid_input", message=f"request body: {problem}", field=None)


def invalid_request(errors: Sequence[Any], content_type: str) -> ApiProblem:
    """The 422 for pydantic's errors about a request, located FastAPI's way (``body``,
    ``query`` or ``path`` first): the first error, naming its field."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(part) for part in first.get("loc", ())]
    if loc[:1] == ["body"] and (len(loc) == 1 or first.get("type") == "json_invalid"):
        # The request body as a whole: not JSON, or not an object.
        body = whole_body(content_type, str(first.get("msg")))
        return ApiProblem(422, body.error, body.message)
    field = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else None)
    message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
    return invalid(message, field)


def response_for(exc: Exception, content_type: str = "") -> JSONResponse:
    """The answer to an exception an endpoint raised.

    Raises:
        Exception: ``exc`` itself when it is none of the API's (a bug: the server's 500).
    """
    if isinstance(exc, ApiProblem):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _response(exc.status, exc.body, headers)
    if isinstance(exc, RequestValidationError):
        return response_for(invalid_request(exc.errors(), content_type))
    if isinstance(exc, HTTPException):
        if exc.status_code == 400:  # FastAPI's "error parsing the body" (not UTF-8...)
            return _response(422, whole_body(content_type, str(exc.detail)))
        codes = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        body = ApiError(error=codes.get(exc.status_code, "error"), message=str(exc.detail))
        return _response(exc.status_code, body, getattr(exc, "headers", None))
    if isinstance(exc, UnknownTopicError):
        return response_for(unknown_topic(exc))
    if isinstance(exc, LeaseLostError):
        return _response(409, ApiError(error="conflict", message=str(exc)))
    if isinstance(exc, InvalidInputError):
        return _response(422, ApiError(error="invalid_input", message=str(exc)))
    if isinstance(exc, REDIS_SIDE):
        return unavailable(exc)
    if isinstance(exc, DelayqError):
        log.error("answering 500: %s", exc, exc_info=exc)
        return _response(500, ApiError(error="internal", message=type(exc).__name__))
    raise exc


REDIS_SIDE = (RedisUnavailableError, RedisAuthError, RedisOutOfMemoryError, NotDurableError)
"""The errors answered with 503: Redis is unreachable, refused us, or is out of memory."""
RETRY_AFTER = 1
"""Seconds a 503 asks the client to wait before retrying (``Retry-After``)."""


def unavailable(exc: Exception) -> JSONResponse:
    """The 503 for one of :data:`REDIS_SIDE`, with ``Retry-After``."""
    log.warning("answering 503: %s", exc)
    body = ApiError(error="unavailable", message=f"{type(exc).__name__}: {exc}")
    return _response(503, body, {"Retry-After": str(RETRY_AFTER)})


def invalid_input(exc: InvalidInputError) -> JSONResponse:
    """The 422 for bad input, naming the argument at fault when the message does (a 404
    for an unknown topic)."""
    if isinstance(exc, UnknownTopicError):
        return response_for(unknown_topic(exc))
    body = ApiError(error="invalid_input", message=str(exc), field=argument_of(exc))
    return _response(422, body)


def install(app: FastAPI) -> None:
    """Answer every failure of ``app`` with an :class:`ApiError`."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return response_for(exc, request.headers.get("content-type", ""))

    for kind in (ApiProblem, RequestValidationError, HTTPException, DelayqError):
        app.add_exception_handler(kind, handle)
