"""``create_app``: the HTTP API and the dashboard of one queue, as a FastAPI app."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.routing import Match

import delayq
from delayq.web.api import SLASH, Api, name
from delayq.web.auth import Tokens
from delayq.web.dashboard import install as install_dashboard
from delayq.web.endpoint import routes as per_task_routes
from delayq.web.errors import ApiError, install, response_for
from delayq.web.groups import router as groups_router
from delayq.web.operate import Operate
from delayq.web.results import router as results_router
from delayq.web.workers import router as workers_router

if TYPE_CHECKING:
    import asyncio

    from starlette.datastructures import State
    from starlette.routing import Route
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from delayq.queue import Queue

BODY_MARGIN = 64 * 1024
"""Request bytes allowed beyond the queue's ``max_body_bytes`` (the JSON around the body)."""


def create_app(
    queue: Queue,
    tokens: Tokens | Mapping[str, Iterable[str]] | None = None,
    *,
    title: str = "delayq",
    stopping: asyncio.Event | None = None,
) -> DelayqApp:
    """The HTTP API (under ``/api``, OpenAPI at ``/api/openapi.json``) and the dashboard
    (at ``/``) of ``queue``, as an ASGI app.

    Mount it in an existing app (``app.mount("/delayq", create_app(queue, tokens))``) or
    serve it alone (``delayq web``).  The app never closes ``queue``: its owner does.

    Args:
        queue: the queue to serve; register its topics' handlers in this process to share
            their lease length, attempt limit and backoff with HTTP consumers.
        tokens: who may do what: a :class:`~delayq.web.auth.Tokens`, or a mapping of
            token -> scopes (``{"<token>": ["read", "produce"]}``); ``None`` or none
            configured: read-only, and reads need no token.
        title: the API's title in the OpenAPI document.
        stopping: once set, long polls (``reserve`` with ``wait``) answer at once with
            no task instead of holding up the server's graceful stop (``delayq web``
            sets it on SIGTERM).

    Raises:
        TypeError: ``tokens`` is neither a ``Tokens`` nor a mapping.
        InvalidInputError: a token or scope in the mapping is not valid.
    """
    app = FastAPI(
        title=title,
        version=delayq.__version__,
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI and ReDoc load their assets from a CDN
        redoc_url=None,
    )
    app.state.delayq_queue = queue
    install(app)
    api = Api(queue, _tokens(tokens), stopping)
    operate = Operate(queue, api.require, name)
    app.include_router(operate.router())
    app.include_router(api.router())
    app.include_router(workers_router(queue, api.tokens))
    app.include_router(results_router(queue, api.tokens))
    app.include_router(groups_router(queue, api.tokens))
    install_dashboard(app)
    documented = [
        *operate.router().routes,
        *api.router(documented=True).routes,
        *workers_router(queue, api.tokens).routes,
        *results_router(queue, api.tokens).routes,
        *groups_router(queue, api.tokens).routes,
    ]
    document: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        # FastAPI's own generator, given every route as FastAPI routes (the per-task ones
        # declared with the same methods and models), as FastAPI's docs extend OpenAPI.
        if not document:
            document.update(get_openapi(title=title, version=delayq.__version__, routes=documented))
        return document

    app.openapi = openapi  # type: ignore[method-assign]
    return DelayqApp(app, per_task_routes(api), queue.max_body_bytes + BODY_MARGIN)


def _tokens(tokens: object) -> Tokens:
    """``tokens`` as :class:`Tokens`: checked here, once, so that a mistake is an error at
    start and never a 500 per request."""
    if tokens is None:
        return Tokens()
    if isinstance(tokens, Tokens):
        return tokens
    if isinstance(tokens, Mapping):
        return Tokens(tokens)
    raise TypeError(
        "tokens must be a delayq.web.Tokens or a mapping of token -> scopes "
        f"(e.g. {{'<token>': ['read']}}), got {type(tokens).__name__}"
    )


class DelayqApp:
    """The ASGI app :func:`create_app` returns.

    The five per-task routes (:mod:`delayq.web.endpoint`) are answered here, before a
    FastAPI app is entered: FastAPI's per-request machinery would cost more than the send
    itself.  Every other request goes to :attr:`fastapi`.  Every HTTP request keeps its
    encoded slashes (:func:`keep_encoded_slashes`) and has its body bounded
    (:class:`BodyLimit`).

    Attributes:
        fastapi: the FastAPI app of the other routes, the dashboard and the OpenAPI
            document (which describes every route).
    """

    def __init__(self, fastapi: FastAPI, routes: list[Route], limit: int) -> None:
        self.fastapi = fastapi
        self.routes = routes
        self.http = BodyLimit(self._route, limit)

    @property
    def state(self) -> State:
        """The FastAPI app's state (``delayq_queue``: the queue served)."""
        return self.fastapi.state

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI document (also served at ``/api/openapi.json``)."""
        return self.fastapi.openapi()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(keep_encoded_slashes(scope), receive, send)
        else:  # the lifespan
            await self.fastapi(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                scope.update(child)  # as Starlette's router does
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL:  # the path of a per-task route, another method
                refused = HTTPException(405, "Method Not Allowed", headers={"Allow": "POST"})
                await response_for(refused)(scope, receive, send)
                return
        await self.fastapi(scope, receive, send)


def keep_encoded_slashes(scope: Scope) -> Scope:
    """``scope`` with ``%2F`` inside a path segment kept, as :data:`~delayq.web.api.SLASH`.

    ASGI servers decode the path before routing, so a topic ``orders/eu`` sent as
    ``orders%2Feu`` would otherwise be two segments.  The segment arrives with
    :data:`~delayq.web.api.SLASH` in its place, which the routes turn back into ``/`` (no
    topic or id holds a control character).
    """
    raw = scope.get("raw_path")
    if raw and b"%2f" in raw.lower():
        # Some servers (and httpx's ASGI transport) leave the query on raw_path.
        text = raw.split(b"?", 1)[0].decode("latin-1")
        text = text.replace("%2F", "%1F").replace("%2f", "%1F")
        return dict(scope, path=unquote(text))
    return scope


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


__all__ = ["SLASH", "DelayqApp", "create_app"]
