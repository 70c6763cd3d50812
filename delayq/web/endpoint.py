"""The per-task routes as plain ASGI endpoints: the only implementation of the five routes a
producer or consumer calls once per task.

``POST /api/topics/{topic}/tasks``, ``.../reserve`` and ``/api/leases/{token}/ack|nack|
extend`` are the API's hot path.  FastAPI's per-request machinery (dependency solving,
its body parsing and response validation) costs several times what sending the task
does, so these routes are Starlette routes whose endpoint is :class:`Endpoint`: it checks
the token (:func:`~delayq.web.auth.authorize`), refuses query parameters, validates the
JSON body with the route's pydantic model in one pass, calls the :class:`~delayq.web.api.
Api` method and writes its model as JSON.  The OpenAPI document describes the same
methods and models (:func:`~delayq.web.api.Api.documented`).
"""

from __future__ import annotations

import email.message
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ValidationError
from starlette.routing import Route

from delayq.web.api import HOT_PATHS
from delayq.web.auth import authorize
from delayq.web.errors import ApiProblem, invalid, invalid_request, response_for
from delayq.web.models import (
    AckRequest,
    ExtendRequest,
    NackRequest,
    ReserveRequest,
    SendRequest,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.types import Receive, Scope, Send

    from delayq.web.api import Api
    from delayq.web.auth import Scope as TokenScope

log = logging.getLogger("delayq.web")
JSON = (b"content-type", b"application/json")
MISSING = [{"loc": ("body",), "msg": "Field required", "type": "missing"}]


class Spec(NamedTuple):
    """What one route takes: its scope, its body's model (None: no body) and whether the
    body is required, and the :class:`~delayq.web.api.Api` method that answers it."""

    scope: TokenScope
    model: type[BaseModel] | None
    required: bool
    status: int
    method: Callable[..., Awaitable[BaseModel | None]]


def routes(api: Api) -> list[Route]:
    """The five per-task routes of ``api``, each answered by an :class:`Endpoint`."""
    specs = {
        "send": Spec("produce", SendRequest, True, 201, api.send),
        "reserve": Spec("consume", ReserveRequest, False, 200, api.reserve),
        "ack": Spec("consume", AckRequest, False, 204, api.ack),
        "nack": Spec("consume", NackRequest, False, 200, api.nack),
        "extend": Spec("consume", ExtendRequest, True, 200, api.extend),
    }
    return [
        Route(path, Endpoint(api, specs[name]), methods=["POST"], name=name)
        for name, path in HOT_PATHS.items()
    ]


class Endpoint:
    """The ASGI app of one per-task route (see the module's docstring)."""

    def __init__(self, api: Api, spec: Spec) -> None:
        self.api = api
        self.spec = spec

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        try:
            reply = await self._reply(scope, receive, headers, content_type)
        except Exception as exc:
            try:
                response = response_for(exc, content_type)
            except Exception:
                log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
                response = response_for(ApiProblem(500, "internal", "internal error"))
            await response(scope, receive, send)
            return
        if reply is None:
            await send({"type": "http.response.start", "status": self.spec.status})
            await send({"type": "http.response.body", "body": b""})
            return
        body = reply.model_dump_json().encode()
        length = (b"content-length", b"%d" % len(body))
        start = {
            "type": "http.response.start",
            "status": self.spec.status,
            "headers": [JSON, length],
        }
        await send(start)
        await send({"type": "http.response.body", "body": body})

    async def _reply(
        self, scope: Scope, receive: Receive, headers: dict[bytes, bytes], content_type: str
    ) -> BaseModel | None:
        spec = self.spec
        authorize(self.api.tokens, spec.scope, _bearer(headers.get(b"authorization")))
        query = scope.get("query_string", b"")
        if query:
            key = query.split(b"&", 1)[0].split(b"=", 1)[0].decode("latin-1")
            raise invalid(f"unknown query parameter {key!r}", key)
        segment = next(iter(scope["path_params"].values()))
        raw = await _body(receive)
        if spec.model is None:
            return await spec.method(segment)
        return await spec.method(segment, _parse(spec.model, raw, spec.required, content_type))


def _bearer(header: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header (the scheme in any case)."""
    if not header:
        return None
    scheme, _, credentials = header.decode("latin-1").partition(" ")
    credentials = credentials.strip()
    if not scheme or not credentials or scheme.lower() != "bearer":
        return None
    return credentials


def _is_json(content_type: str) -> bool:
    """Whether a body of this type is read as JSON: ``application/json`` or
    ``application/*+json`` (a body without a type is not)."""
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


async def _body(receive: Receive) -> bytes:
    """The whole request body (its size is bounded by :class:`~delayq.web.app.BodyLimit`)."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body"):  # the whole body in one message: the common case
        return body
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def _parse(model: type[BaseModel], raw: bytes, required: bool, content_type: str) -> Any:
    """``raw`` validated by ``model`` in one pass (pydantic parses the JSON itself), its
    errors located under ``body``; an empty body or ``null`` is no body."""
    if not raw:
        if required:
            raise invalid_request(MISSING, content_type)
        return None
    if content_type != "application/json" and not _is_json(content_type):
        kind = [{"loc": ("body",), "msg": "not JSON", "type": "model_attributes_type"}]
        raise invalid_request(kind, content_type)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        if raw.strip() == b"null":
            if required:
                raise invalid_request(MISSING, content_type) from None
            return None
        located = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise invalid_request(located, content_type) from None
