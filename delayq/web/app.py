"""``create_app``: the HTTP API and the dashboard of one queue, as a FastAPI app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException

import delayq
from delayq.web.api import SLASH, Api
from delayq.web.auth import Tokens
from delayq.web.dashboard import install as install_dashboard
from delayq.web.endpoint import routes as per_task_routes
from delayq.web.errors import ApiError, install

if TYPE_CHECKING:
    import asyncio

    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from delayq.queue import Queue

BODY_MARGIN = 64 * 1024
"""Request bytes allowed beyond the queue's ``max_body_bytes`` (the JSON around the body)."""


def create_app(
    queue: Queue,
    tokens: Tokens | None = None,
    *,
    title: str = "delayq",
    stopping: asyncio.Event | None = None,
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
        stopping: once set, long polls (``reserve`` with ``wait``) answer at once with
            no task instead of holding up the server's graceful stop (``delayq web``
            sets it on SIGTERM).

    Returns:
        A FastAPI app: the per-task routes are plain Starlette routes
        (:mod:`delayq.web.endpoint`), the others FastAPI's; the OpenAPI document
        describes them all from the same models.
    """
    tokens = tokens if tokens is not None else Tokens()
    app = FastAPI(
        title=title,
        version=delayq.__version__,
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN
        redoc_url=None,
    )
    app.state.delayq_queue = queue
    install(app)
    api = Api(queue, tokens, stopping)
    app.include_router(api.router())
    # First, so that a per-task request is matched without trying the other routes.
    app.router.routes[0:0] = per_task_routes(api)
    install_dashboard(app)
    app.add_middleware(BodyLimit, limit=queue.max_body_bytes + BODY_MARGIN)
    app.add_middleware(EncodedSlashes)
    documented = api.router(documented=True).routes
    document: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        # FastAPI's own generator, given every route as FastAPI routes (the per-task ones
        # declared with the same methods and models), as FastAPI's docs extend OpenAPI.
        if not document:
            document.update(get_openapi(title=title, version=delayq.__version__, routes=documented))
        return document

    app.openapi = openapi  # type: ignore[method-assign]
    return app


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
    body = ApiError(error="too_large", message=f"request body over {limit} bytes")
    data = body.model_dump_json().encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": data})


__all__ = ["SLASH", "create_app"]
