"""The fast lane: the five routes a producer or consumer calls per task, served without
FastAPI's per-request machinery.

``POST /api/topics/{topic}/tasks``, ``.../reserve`` and ``/api/leases/{token}/ack|nack|
extend`` are the API's hot path: one request per task.  Through FastAPI, routing,
dependency solving and the middleware stack cost several times what the send itself does
(a profile of ``POST .../tasks``: ~75% of the server's time), and the HTTP send rate was
0.19x Python's ``send_delayed`` (``benchmarks/web.py``).  This ASGI layer answers those
five routes itself, running what FastAPI would: the same token check
(:func:`~delayq.web.api.authorize`), the same refusal of query parameters, the same
pydantic models validating the same parsed JSON, the same endpoint methods of
:class:`~delayq.web.api.Api`, and the same error mapping
(:func:`~delayq.web.errors.response_for`).  The FastAPI routes stay: they give the
OpenAPI document, and every other request goes to them.  ``tests/web/test_fast.py``
sends the same requests, good and bad, through both and compares the answers.
"""

from __future__ import annotations

import email.message
import json
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from delayq.web import errors
from delayq.web.api import authorize
from delayq.web.models import ExtendRequest, NackRequest, ReserveRequest, SendRequest

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from delayq.web.api import Api
    from delayq.web.auth import Scope as TokenScope


class FastLane:
    """ASGI middleware answering the hot routes of ``api`` (see the module's docstring)."""

    def __init__(self, app: ASGIApp, api: Api) -> None:
        self.app = app
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _route(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        kind, segment = route
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        try:
            response = await self._answer(kind, segment, scope, receive, headers, content_type)
        except Exception as exc:  # what FastAPI's exception handlers would answer
            response = errors.response_for(exc, content_type)
        await response(scope, receive, send)

    async def _answer(
        self,
        kind: str,
        segment: str,
        scope: Scope,
        receive: Receive,
        headers: dict[bytes, bytes],
        content_type: str,
    ) -> Response:
        api = self.api
        authorize(api.tokens, _SCOPES[kind], _bearer(headers.get(b"authorization")))
        query = scope.get("query_string", b"")
        if query:
            key = query.split(b"&", 1)[0].split(b"=", 1)[0].decode("latin-1")
            raise errors.invalid(f"unknown query parameter {key!r}", key)
        raw = await _body(receive)
        if kind == "send":
            request = _parse(SendRequest, raw, True, content_type)
            reply: BaseModel | None = await api.send(segment, request)
        elif kind == "reserve":
            reply = await api.reserve(segment, _parse(ReserveRequest, raw, False, content_type))
        elif kind == "ack":
            await api.ack(segment)
            reply = None
        elif kind == "nack":
            reply = await api.nack(segment, _parse(NackRequest, raw, False, content_type))
        else:
            reply = await api.extend(segment, _parse(ExtendRequest, raw, True, content_type))
        if reply is None:
            return Response(status_code=204)
        status = 201 if kind == "send" else 200
        return Response(reply.model_dump_json(), status_code=status, media_type="application/json")


_SCOPES: dict[str, TokenScope] = {
    "send": "produce", "reserve": "consume", "ack": "consume", "nack": "consume",
    "extend": "consume",
}  # fmt: skip


def _route(scope: Scope) -> tuple[str, str] | None:
    """(which route, its path segment) when the request is for a hot route, else None."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    parts = path.split("/")
    if len(parts) != 5 or parts[0] or parts[1] != "api" or not parts[3]:
        return None
    if parts[2] == "topics" and parts[4] == "tasks":
        return "send", parts[3]
    if parts[2] == "topics" and parts[4] == "reserve":
        return "reserve", parts[3]
    if parts[2] == "leases" and parts[4] in ("ack", "nack", "extend"):
        return parts[4], parts[3]
    return None


def _bearer(header: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, as FastAPI's HTTPBearer reads it."""
    if not header:
        return None
    scheme, _, credentials = header.decode("latin-1").partition(" ")
    credentials = credentials.strip()
    if not scheme or not credentials or scheme.lower() != "bearer":
        return None
    return credentials


def _is_json(content_type: str) -> bool:
    """Whether FastAPI reads a body of this type as JSON: ``application/json`` or
    ``application/*+json`` (and not a body without a type: its strict default)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _parse(model: type[BaseModel], raw: bytes, required: bool, content_type: str) -> Any:
    """``raw`` validated as FastAPI validates a JSON body parameter: the same model on the
    same parsed JSON, errors located under ``body`` as FastAPI locates them."""
    missing = [{"loc": ("body",), "msg": "Field required", "type": "missing"}]
    if not raw:
        if required:
            raise RequestValidationError(missing)
        return None
    if not _is_json(content_type):
        kind = [{"loc": ("body",), "msg": "not JSON", "type": "model_attributes_type"}]
        raise RequestValidationError(kind)
    try:
        data = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError included
        bad = [{"loc": ("body", 0), "msg": f"JSON decode error: {exc}", "type": "json_invalid"}]
        raise RequestValidationError(bad) from None
    if data is None:
        if required:
            raise RequestValidationError(missing)
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        located = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(located) from None
