"""``create_app``: the HTTP API and the dashboard of one queue, as a FastAPI app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fastapi import FastAPI
from starlette.exceptions import HTTPException

import delayq
from delayq.web import dashboard, errors
from delayq.web.api import SLASH, Api
from delayq.web.auth import Tokens
from delayq.web.fast import FastLane

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from delayq.queue import Queue

BODY_MARGIN = 64 * 1024
"""Request bytes allowed beyond the queue's ``max_body_bytes`` (the JSON around the body)."""


def create_app(
    queue: Queue, tokens: Tokens | None = None, *, title: str = "delayq", fast_lane: bool = True
) -> FastAPI:
    """The HTTP API (under ``/api``, OpenAPI at ``/api/openapi.json``) and the dashboard
    (at ``/``) of ``queue``.

    Mount it in an existing app (``app.mount("/delayq", create_app(queue, tokens))``) or
    serve it alone (``delayq web``).  The app never closes ``queue``: its owner does.

    Args:
        queue: the queue to serve; register its topics' handlers in this process to share
            their lease length, attempt limit and backoff with HTTP consumers.
        tokens: who may do what (:class:`~delayq.web.auth.Tokens`); ``None`` or none
            configured: read-only, and reads need no token.
        title: the API's title in the OpenAPI document.
        fast_lane: serve the per-task routes without FastAPI's per-request machinery
            (:mod:`delayq.web.fast`; same answers, several times the rate).  ``False``
            leaves every request to FastAPI, e.g. to compare.
    """
    tokens = tokens if tokens is not None else Tokens()
    app = DelayqApp(
        title=title,
        version=delayq.__version__,
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN
        redoc_url=None,
    )
    app.state.delayq_queue = queue
    errors.install(app)
    api = Api(queue, tokens)
    app.include_router(api.router())
    dashboard.install(app)
    limit = queue.max_body_bytes + BODY_MARGIN
    app.add_middleware(BodyLimit, limit=limit)
    app.add_middleware(EncodedSlashes)
    if fast_lane:
        app.fast_lane = FastLane(api, limit)
    return app


class DelayqApp(FastAPI):
    """FastAPI, with :mod:`delayq.web.fast` in front: the per-task routes are answered
    before FastAPI's middleware stack and router are entered; everything else goes on."""

    fast_lane: FastLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.fast_lane
        if lane is not None and scope["type"] == "http":
            route = lane.route(keep_encoded_slashes(scope))
            if route is not None:
                await lane.answer(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def keep_encoded_slashes(scope: Scope) -> Scope:
    """``scope`` with ``%2F`` in its path kept as :data:`~delayq.web.api.SLASH` (see
    :class:`EncodedSlashes`)."""
    raw = scope.get("raw_path")
    if raw and b"%2f" in raw.lower():
        # Some servers (and httpx's ASGI transport) leave the query on raw_path.
        text = raw.split(b"?", 1)[0].decode("latin-1")
        text = text.replace("%2F", "%1F").replace("%2f", "%1F")
        return dict(scope, path=unquote(text))
    return scope


class EncodedSlashes:
    """Keep ``%2F`` inside a path segment: ASGI servers decode the path before routing, so
    a topic ``orders/eu`` sent as ``orders%2Feu`` would otherwise be two segments.  The
    segment arrives with :data:`~delayq.web.api.SLASH` in its place, which the routes turn
    back into ``/`` (no topic or id holds a control character)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = keep_encoded_slashes(scope)
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with a 413, before reading them whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers", ()):
            if key == b"content-length" and value.isdigit() and int(value) > self.limit:
                await _too_large(send, self.limit)
                return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise HTTPException(413, f"request body over {self.limit} bytes")
            return message

        await self.app(scope, counted, send)


async def _too_large(send: Send, limit: int) -> None:
    body = errors.ApiError(error="too_large", message=f"request body over {limit} bytes")
    data = body.model_dump_json().encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": data})


__all__ = ["SLASH", "create_app"]
