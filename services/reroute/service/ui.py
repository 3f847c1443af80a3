"""The operator's web page: ``GET /ui`` serves the static files of ``static/`` (HTML, CSS,
JavaScript modules that draw SVG; no build step, no library).

The files hold no data and need no token (``auth.PUBLIC_PREFIXES``); the page asks the
operator for a token and sends it with every API call, so it can do exactly what the
token's role allows through the API, nothing more.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

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
