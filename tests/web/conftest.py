"""Fixtures for the HTTP API and dashboard tests: an app on a fresh queue, one token per scope."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from delayq import Queue
from delayq.web import Tokens, create_app
from delayq.web.app import DelayqApp

TOKENS = {
    "read": "read-token-0123456789",
    "produce": "produce-token-0123456789",
    "consume": "consume-token-0123456789",
    "admin": "admin-token-0123456789",
}
"""One token per scope (each grants only its own; admin grants all)."""


def auth(scope: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[scope]}"}


def tokens() -> Tokens:
    return Tokens({token: {scope} for scope, token in TOKENS.items()})


@pytest.fixture
def app(queue: Queue) -> DelayqApp:
    return create_app(queue, tokens())


@pytest.fixture
async def client(app: DelayqApp) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        yield client
