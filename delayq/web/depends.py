"""The FastAPI dependencies of the API's routes: the token's scope and the query parameters
a route takes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from delayq.web.auth import authorize
from delayq.web.errors import invalid

if TYPE_CHECKING:
    from delayq.web.auth import Scope, Tokens

Check = Callable[..., Awaitable[frozenset[str]]]
BEARER = HTTPBearer(
    auto_error=False, description="A token from the server's token file or environment."
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]


def only_query(*names: str) -> Callable[[Request], Awaitable[None]]:
    """A dependency refusing query parameters other than ``names`` (a typo in one must not
    silently give a default)."""
    allowed = frozenset(names)

    async def check(request: Request) -> None:
        for key in request.query_params:
            if key not in allowed:
                raise invalid(f"unknown query parameter {key!r}", key)

    return check


def authorizer(tokens: Tokens) -> Callable[[Scope], Check]:
    """``require(scope)``: a dependency that lets a request through only with ``scope``."""

    def require(scope: Scope) -> Check:
        async def check(credentials: Credentials) -> frozenset[str]:
            return authorize(tokens, scope, credentials.credentials if credentials else None)

        return check

    return require
