"""Every endpoint refuses a missing, unknown or wrong-scope token.  The list of endpoints
comes from the app's own routes, so a new endpoint cannot escape these tests."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from delayq import InvalidInputError, Queue
from delayq.web import Tokens, create_app
from delayq.web.api import Api, name
from delayq.web.app import DelayqApp
from delayq.web.auth import SCOPES
from delayq.web.endpoint import routes as per_task_routes
from delayq.web.groups import router as groups_router
from delayq.web.operate import Operate
from delayq.web.results import router as results_router
from delayq.web.workers import router as workers_router
from tests.web.conftest import TOKENS, auth, tokens

SAMPLE = {"topic": "t", "task_id": "some-id", "token": "1MV8xH3QfHzE"}


def api_routes(app: DelayqApp) -> list[tuple[str, str, str]]:
    """(method, path with sample values, required scope) of every operation of the app's
    OpenAPI document, which FastAPI builds from every route (none is left out of it)."""
    found = []
    for template, operations in app.openapi()["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: SAMPLE[m.group(1)], template)
        for method, operation in operations.items():
            scope = operation.get("x-scope")
            assert scope in {*SCOPES, "any"}, f"{method} {template} declares no scope"
            found.append((method.upper(), path, scope))
    return found


def test_the_api_has_the_routes_of_the_issue(app: DelayqApp) -> None:
    paths = {(method, path) for method, path, _ in api_routes(app)}
    assert len(paths) >= 14
    assert ("POST", "/api/leases/1MV8xH3QfHzE/ack") in paths
    assert ("GET", "/api/stats") in paths


async def test_every_endpoint_refuses_a_missing_or_unknown_token(
    app: DelayqApp, client: httpx.AsyncClient
) -> None:
    for method, path, _scope in api_routes(app):
        for headers in ({}, {"Authorization": "Bearer not-a-known-token-at-all"},
                        {"Authorization": f"Basic {TOKENS['admin']}"}):  # fmt: skip
            response = await client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert response.json()["error"] == "unauthorized"


async def test_every_endpoint_refuses_a_token_without_its_scope(
    app: DelayqApp, client: httpx.AsyncClient
) -> None:
    checked = 0
    for method, path, scope in api_routes(app):
        for other in ("read", "produce", "consume"):
            if other == scope or scope == "any":
                continue
            response = await client.request(method, path, headers=auth(other))
            assert response.status_code == 403, (method, path, other, response.text)
            assert response.json()["error"] == "forbidden"
            checked += 1
    assert checked >= 27


async def test_every_endpoint_lets_its_scope_and_admin_through(
    app: DelayqApp, client: httpx.AsyncClient
) -> None:
    for method, path, scope in api_routes(app):
        for who in ({"admin", scope} - {"any"}) or {"read"}:
            response = await client.request(method, path, headers=auth(who))
            assert response.status_code not in (401, 403), (method, path, who, response.text)


async def test_without_tokens_reads_are_open_and_writes_closed(queue: Queue) -> None:
    app = create_app(queue)  # no tokens: read-only
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://delayq") as client:
        for method, path, scope in api_routes(app):
            response = await client.request(method, path, headers=auth("admin"))
            if scope in ("read", "any"):
                assert response.status_code not in (401, 403), (method, path)
            else:
                assert response.status_code == 403, (method, path, response.text)
        assert (await client.get("/api/whoami")).json() == {"scopes": ["read"], "anonymous": True}
    assert await queue.topic_names() == []


async def test_whoami_names_the_scopes(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/whoami", headers=auth("consume"))
    assert response.json() == {"scopes": ["consume"], "anonymous": False}
    admin = await client.get("/api/whoami", headers=auth("admin"))
    assert admin.json()["scopes"] == sorted(SCOPES)


def test_token_files_and_variables(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "# who can do what\nread,produce  aaaaaaaaaaaaaaaa1\n\nadmin bbbbbbbbbbbbbbbb2  # ops\n"
    parsed = Tokens.parse(text)
    assert parsed.scopes_of("aaaaaaaaaaaaaaaa1") == {"read", "produce"}
    assert parsed.scopes_of("bbbbbbbbbbbbbbbb2") == SCOPES
    assert parsed.scopes_of("aaaaaaaaaaaaaaaa") == frozenset()
    assert parsed.scopes_of(None) == frozenset()
    assert parsed.writable and not parsed.anonymous_read
    monkeypatch.setenv("DELAYQ_WEB_TOKENS", "read cccccccccccccccc3;consume dddddddddddddddd4")
    from_env = Tokens.from_env()
    assert from_env.scopes_of("dddddddddddddddd4") == {"consume"}
    assert Tokens.parse("read eeeeeeeeeeeeeeee5").writable is False
    assert tokens().scopes_of(TOKENS["read"]) == {"read"}


def test_a_token_seen_before_grants_the_same_and_nothing_else() -> None:
    """Tokens that matched are remembered (not hashed again); guesses are not, and a
    remembered token grants exactly its scopes again."""
    parsed = Tokens.parse("read,produce aaaaaaaaaaaaaaaa1\nconsume bbbbbbbbbbbbbbbb2\n")
    for _ in range(3):
        assert parsed.scopes_of("aaaaaaaaaaaaaaaa1") == {"read", "produce"}
        assert parsed.scopes_of("aaaaaaaaaaaaaaaa2") == frozenset()
        assert parsed.scopes_of("bbbbbbbbbbbbbbbb2") == {"consume"}
    for guess in (f"guess-{n:011d}" for n in range(100)):
        assert parsed.scopes_of(guess) == frozenset()
    assert len(parsed._matched) == 2


@pytest.mark.parametrize(
    "text",
    ["read short", "read", "read a b", "write aaaaaaaaaaaaaaaa1", ",  aaaaaaaaaaaaaaaa1",
     "read aaaaaaaaaaaaaaaa\u00e91"],
)  # fmt: skip
def test_bad_token_configurations_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        Tokens.parse(text)


def test_every_served_route_is_in_the_openapi_document(app: DelayqApp, queue: Queue) -> None:
    api = Api(queue, tokens())
    operate = Operate(queue, api.require, name).router().routes
    served = {
        (method, route.path)
        for route in [
            *per_task_routes(api),
            *api.router().routes,
            *workers_router(queue, tokens()).routes,
            *groups_router(queue, tokens()).routes,
            *results_router(queue, tokens()).routes,
            *operate,
        ]
        if isinstance(route, (Route, APIRoute))
        for method in route.methods or ()
    }
    documented = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    assert served == documented
