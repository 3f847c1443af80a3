"""The operator's web page: ``GET /ui`` serves the static files of ``static/`` (HTML, CSS,
JavaScript that draws SVG; no build step, no framework).

The files hold no data and need no token (``auth.PUBLIC_PREFIXES``); the page asks the
operator for a token and sends it with every API call, so it can do exactly what the
token's role allows through the API, nothing more.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).with_name("static")
PREFIX = "/ui"


def mount_ui(app: FastAPI) -> None:
    """``/ui`` -> ``/ui/`` (so the page's relative links resolve), ``/ui/*`` the files."""

    @app.get(PREFIX, include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    app.mount(PREFIX, StaticFiles(directory=STATIC, html=True), name="ui")
