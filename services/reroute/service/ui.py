"""The operator's web page: ``GET /ui`` serves the static files of ``static/`` (HTML, CSS,
JavaScript modules that draw SVG; no build step, no library). A browser that opens the
service's address (``GET /`` accepting HTML) is sent there (``FrontDoor``); API clients
get the API's answers.

The files hold no data and need no token (``auth.PUBLIC_PREFIXES``); the page asks the
operator for a token and sends it with every API call, so it can do exactly what the
token's role allows through the API, nothing more.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

STATIC = Path(__file__).with_name("static")
PREFIX = "/ui"
# the page runs only its own files and talks only to this service (its token stays here)
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class PageFiles(StaticFiles):
    """The page's files, each with ``HEADERS``."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        """The file's response, with the page's security headers."""
        response = await super().get_response(path, scope)
        response.headers.update(HEADERS)
        return response


def mount_ui(app: FastAPI) -> None:
    """``/ui`` -> ``/ui/`` (so the page's relative links resolve), ``/ui/*`` the files."""

    @app.get(PREFIX, include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        """GET /ui: redirect to /ui/."""
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    app.mount(PREFIX, PageFiles(directory=STATIC, html=True), name="ui")


def wants_html(accept: str) -> bool:
    """An ``Accept`` header that asks for HTML (a browser's), not ``*/*`` or JSON."""
    for item in accept.split(","):
        kind, *params = (p.strip() for p in item.split(";"))
        if kind.lower() in ("text/html", "application/xhtml+xml") and _quality(params) > 0:
            return True
    return False


def _quality(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


class FrontDoor:
    """ASGI middleware: a browser's ``GET /`` is redirected to the page (before any token
    check: the redirect holds nothing); every other request goes on unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == "/"
            and scope["method"] in ("GET", "HEAD")
            and wants_html(Headers(scope=scope).get("accept", ""))
        ):
            await RedirectResponse(f"{PREFIX}/", status_code=307)(scope, receive, send)
            return
        await self.app(scope, receive, send)
