"""The fast lane: the five routes a producer or consumer calls per task, served without
FastAPI's per-request machinery.

``POST /api/topics/{topic}/tasks``, ``.../reserve`` and ``/api/leases/{token}/ack|nack|
extend`` are the API's hot path: one request per task.  Through FastAPI (routing,
dependency solving, its middleware stack) a ``POST .../tasks`` cost the server several
times what a bare ASGI app sending the same task did, and the HTTP send rate was 0.19x
Python's ``send_delayed`` (``benchmarks/web.py``).  The app (:class:`~delayq.web.app.
DelayqApp`) hands these five routes to this module before FastAPI sees them, and it runs
what FastAPI would: the same token check (:func:`~delayq.web.api.authorize`), the same
refusal of query parameters, the same pydantic models validating the same parsed JSON,
the same endpoint methods of :class:`~delayq.web.api.Api`, and the same error mapping
(:func:`~delayq.web.errors.response_for`).  The FastAPI routes stay: they give the
OpenAPI document and serve every other request.  ``tests/web/test_fast.py`` sends the
same requests, good and bad, through both and compares the answers.
"""

from __future__ import annotations

import email.message
import logging
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from starlette.exceptions import HTTPException

from delayq.web import errors
from delayq.web.api import authorize, name
from delayq.web.models import ExtendRequest, NackRequest, ReserveRequest, SendRequest

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

    from delayq.task import SendResult
    from delayq.web.api import Api
    from delayq.web.auth import Scope as TokenScope

log = logging.getLogger("delayq.web")
MISSING = [{"loc": ("body",), "msg": "Field required", "type": "missing"}]
JSON = (b"content-type", b"application/json")
_NO_CONTENT: dict[str, Any] = {"type": "http.response.start", "status": 204}
"""The start of every 204 (uvicorn reads the messages it is sent, never changes them)."""
_OUTCOMES = {o: o.encode() for o in ("created", "kept", "replaced", "reserved")}
_SCOPES: dict[str, TokenScope] = {
    "send": "produce", "reserve": "consume", "ack": "consume", "nack": "consume",
    "extend": "consume",
}  # fmt: skip


class FastLane:
    """Answers the hot routes of ``api`` (see the module's docstring).

    Args:
        api: the endpoints.
        limit: the largest request body accepted (as :class:`~delayq.web.app.BodyLimit`).
    """

    def __init__(self, api: Api, limit: int) -> None:
        self.api = api
        self.limit = limit

    def route(self, scope: Scope) -> tuple[str, str, Scope] | None:
        """(which route, its path segment, the scope) for a hot route, else None."""
        if scope["method"] != "POST":
            return None
        path: str = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        parts = path.split("/")
        if len(parts) != 5 or parts[0] or parts[1] != "api" or not parts[3]:
            return None
        kind = parts[4]
        if parts[2] == "topics" and kind in ("tasks", "reserve"):
            return ("send" if kind == "tasks" else kind), parts[3], scope
        if parts[2] == "leases" and kind in ("ack", "nack", "extend"):
            return kind, parts[3], scope
        return None

    async def answer(
        self, route: tuple[str, str, Scope], _outer: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer the request, as FastAPI would have."""
        kind, segment, scope = route
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        try:
            status, body = await self._reply(kind, segment, scope, receive, headers, content_type)
        except Exception as exc:
            try:
                response = errors.response_for(exc, content_type)
            except Exception:
                log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
                response = errors.response_for(errors.ApiProblem(500, "internal", "internal error"))
            await response(scope, receive, send)
            return
        if body:
            length = (b"content-length", b"%d" % len(body))
            await send({"type": "http.response.start", "status": status, "headers": [JSON, length]})
        else:
            await send(
                _NO_CONTENT if status == 204 else {"type": "http.response.start", "status": status}
            )
        await send({"type": "http.response.body", "body": body})

    async def _reply(
        self,
        kind: str,
        segment: str,
        scope: Scope,
        receive: Receive,
        headers: dict[bytes, bytes],
        content_type: str,
    ) -> tuple[int, bytes]:
        api = self.api
        authorize(api.tokens, _SCOPES[kind], _bearer(headers.get(b"authorization")))
        query = scope.get("query_string", b"")
        if query:
            key = query.split(b"&", 1)[0].split(b"=", 1)[0].decode("latin-1")
            raise errors.invalid(f"unknown query parameter {key!r}", key)
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            raise HTTPException(413, f"request body over {self.limit} bytes")
        raw = await _body(receive, self.limit)
        reply: BaseModel | None
        if kind == "send":
            topic = name(segment)
            sent = await api.send_task(topic, _parse(SendRequest, raw, True, content_type))
            return 201, _send_reply(sent, topic)
        if kind == "reserve":
            reply = await api.reserve(segment, _parse(ReserveRequest, raw, False, content_type))
        elif kind == "ack":
            await api.ack(segment)
            return 204, b""
        elif kind == "nack":
            reply = await api.nack(segment, _parse(NackRequest, raw, False, content_type))
        else:
            reply = await api.extend(segment, _parse(ExtendRequest, raw, True, content_type))
        # Straight to JSON bytes (model_dump_json() makes a str, then encode() copies it).
        return 200, reply.__pydantic_serializer__.to_json(reply)


def _send_reply(sent: SendResult, topic: str) -> bytes:
    """``SendReply``'s JSON, as its serializer writes it (``tests/web/test_fast.py``
    compares), without building the model: the strings escaped by the same encoder."""
    return b"".join((
        b'{"id":', to_json(str(sent)), b',"topic":', to_json(topic), b',"outcome":"',
        _OUTCOMES[sent.outcome], b'"}',
    ))  # fmt: skip


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
    if content_type == "application/json":
        return True
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


async def _body(receive: Receive, limit: int) -> bytes:
    message = await receive()
    if not message.get("more_body"):  # the whole body in one message: the common case
        body: bytes = message.get("body", b"")
        if len(body) > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
        return body
    chunks = [message.get("body", b"")]
    size = len(chunks[0])
    while size <= limit:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size <= limit and not message.get("more_body"):
            return b"".join(chunks)
    raise HTTPException(413, f"request body over {limit} bytes")


def _parse(model: type[BaseModel], raw: bytes, required: bool, content_type: str) -> Any:
    """``raw`` validated as FastAPI validates a JSON body parameter: the same model, errors
    located under ``body`` as FastAPI locates them.  The JSON is parsed once, by pydantic
    (``model_validate_json``), not into Python objects first; FastAPI reads ``null`` as
    no body, which only a failed validation needs to check."""
    if not raw:
        if required:
            raise RequestValidationError(MISSING)
        return None
    if content_type != "application/json" and not _is_json(content_type):
        kind = [{"loc": ("body",), "msg": "not JSON", "type": "model_attributes_type"}]
        raise RequestValidationError(kind)
    try:
        return model.__pydantic_validator__.validate_json(raw)  # model_validate_json's work
    except ValidationError as exc:
        if raw.strip() == b"null":
            if required:
                raise RequestValidationError(MISSING) from None
            return None
        located = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(located) from None
