"""The dashboard: one page and its assets, served from the package (no CDN: it works
offline).  The page is a client of the API (``static/app.js`` and the modules it
imports); it holds no data itself."""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

from fastapi import Request  # noqa: TC002  (FastAPI reads the annotation at runtime)
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

if TYPE_CHECKING:
    from fastapi import FastAPI

STATIC = files("delayq.web").joinpath("static")
SECURITY_HEADERS = {
    # Only this origin's own script and styles; no inline script, no framing, no forms
    # posted anywhere: a value that slipped into the page as HTML still could not run.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def install(app: FastAPI) -> None:
    """Serve the page at ``/`` and its assets under ``/static``."""
    page = STATIC.joinpath("index.html").read_text(encoding="utf-8")

    @app.get("/", include_in_schema=False)
    async def index(request: Request) -> Response:
        # The page loads `static/...` and calls `api/...` relative to its own URL, so that
        # it works mounted under any prefix; that needs the URL to end with a slash.
        if not request.url.path.endswith("/"):
            return RedirectResponse(request.url.replace(path=request.url.path + "/"))
        return HTMLResponse(page, headers=SECURITY_HEADERS)

    icon = STATIC.joinpath("favicon.svg").read_bytes()

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        # Browsers ask for it at the root whatever the page links; an SVG serves both.
        return Response(
            icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"}
        )

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
