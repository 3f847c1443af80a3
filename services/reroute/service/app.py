"""The FastAPI application: ``create_app(settings)`` for a running service, ``api()`` for
the bare routes (the OpenAPI document is made from it).

The app's lifespan connects the drivers of the switches in scope (built from the
inventory), opens the journal, recovers what a crash interrupted, re-queues pending
reroutes and starts the scheduler; on shutdown it lets the running reroutes finish and
closes everything.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from drivers.base import MasterElection
from services.reroute import __version__
from services.reroute.engine.engine import Engine
from services.reroute.engine.executor import Driver
from services.reroute.errors import ApiError, ConfigError, DriverError, PlanError, RerouteError
from services.reroute.model.inventory import open_drivers
from services.reroute.reach import DEVICE_TIMEOUT_S
from services.reroute.rules import DEFAULT_SPACE, CookieSpace
from services.reroute.service.auth import PUBLIC, BearerAuth
from services.reroute.service.config import Settings
from services.reroute.service.core import FieldError, RerouteService
from services.reroute.service.oplog import RequestLog, log_reroutes
from services.reroute.service.routes import router
from services.reroute.service.ui import FrontDoor, mount_ui
from services.reroute.store.config import EtcdStore, SqliteStore, open_store
from services.reroute.store.locks import Universe
from services.reroute.store.ownership import device_groups
from services.reroute.store.records import InDoubt, JournalError

DriverFactory = Callable[[Settings], AbstractAsyncContextManager[Mapping[str, Driver]]]
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]
TITLE = "reroute"
DOCS_ASSETS = str(importlib.resources.files("fastapi_offline") / "static")
DESCRIPTION = (
    "Make-before-break reroutes of live flows. Reroutes that share no device, optical port "
    "or flow run at once; overlapping ones run one after the other, first in, first out; a "
    "queued one is `pending` and may be cancelled. Send `Authorization: Bearer TOKEN`."
)


def api(lifespan: Lifespan | None = None) -> FastAPI:
    """The FastAPI application: routes and page (without ``lifespan``: no service)."""
    app = FastAPI(
        title=TITLE,
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by ``mount_docs`` from shipped files, not a CDN
        redoc_url=None,
    )
    app.include_router(router)
    mount_ui(app)
    mount_docs(app)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(PlanError, _plan_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(DriverError, _driver_error)
    app.add_exception_handler(JournalError, _journal_error)
    app.add_exception_handler(RerouteError, _reroute_error)
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]
    return app


def mount_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served from the
    files of the ``fastapi-offline`` package, under ``/docs/static/``: FastAPI's defaults
    load them from a public CDN, which a lab network often cannot reach (a blank page)."""
    app.mount("/docs/static", StaticFiles(directory=DOCS_ASSETS), name="docs-static")

    async def swagger() -> HTMLResponse:
        return _offline(
            get_swagger_ui_html(
                openapi_url="/openapi.json",
                title=f"{TITLE} API",
                swagger_js_url="/docs/static/swagger-ui-bundle.js",
                swagger_css_url="/docs/static/swagger-ui.css",
                swagger_favicon_url="/docs/static/favicon.png",
                oauth2_redirect_url="/docs/oauth2-redirect",
            )
        )

    async def redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc() -> HTMLResponse:
        return _offline(
            get_redoc_html(
                openapi_url="/openapi.json",
                title=f"{TITLE} API",
                redoc_js_url="/docs/static/redoc.standalone.js",
                redoc_favicon_url="/docs/static/favicon.png",
                with_google_fonts=False,
            )
        )

    app.add_api_route("/docs", swagger, include_in_schema=False)
    app.add_api_route("/docs/oauth2-redirect", redirect, include_in_schema=False)
    app.add_api_route("/redoc", redoc, include_in_schema=False)


# the docs pages load nothing from elsewhere, whatever the assets would (ReDoc's footer logo
# is on its vendor's CDN): their own scripts and the inline one that starts them
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)


def _offline(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page


def create_app(settings: Settings, *, drivers: DriverFactory | None = None) -> FastAPI:
    """The service of ``settings``; ``drivers`` (default: built from the settings'
    inventory) connects the drivers of the switches in scope."""
    app = api(_lifespan(settings, drivers or inventory_drivers))
    app.add_middleware(BearerAuth, tokens=settings.tokens)
    app.add_middleware(FrontDoor)  # outside the token check: a browser at / finds the page
    app.add_middleware(RequestLog)  # outermost: every request, refused ones too
    return app


def inventory_drivers(settings: Settings) -> AbstractAsyncContextManager[Mapping[str, Driver]]:
    """The drivers of the switches in scope, built from the settings' inventory; a device
    that does not answer at start is opened in the background (the service serves)."""
    if settings.inventory is None:
        raise ConfigError("no inventory: say inventory: FILE in the service config")
    shared = isinstance(settings.store, EtcdStore)  # replicas: each reroute claims devices
    return open_drivers(
        settings.inventory, settings.topo, settings.scope, shared=shared, background=True
    )


def journal_file(settings: Settings) -> Path:
    """The journal the settings name, else the one in the inventory's state directory."""
    if settings.journal is not None:
        return settings.journal
    if settings.inventory is None:
        raise ConfigError("no journal: say journal: FILE (or inventory: FILE) in the config")
    return settings.inventory.journal


def _lock_delay(settings: Settings) -> float | None:
    """How long etcd holds an unfenced device back from a new owner once its holder died:
    until the holder's last write must have landed, the step cap (the step timeout, at most
    ``STEP_SHARE`` of the lease) and the longest device timeout (a request in flight)."""
    spec = settings.store
    if not isinstance(spec, EtcdStore) or settings.inventory is None:
        return None
    cap = min(settings.step_timeout_s, spec.step_cap_s)
    devices = settings.inventory.devices.values()
    return cap + max((d.timeout_s for d in devices), default=DEVICE_TIMEOUT_S)


def _device_timeout(settings: Settings) -> float:
    """The inventory's deadline of one device read while planning."""
    inv = settings.inventory
    return inv.device_timeout_s if inv is not None else DEVICE_TIMEOUT_S


def _lock_dir(settings: Settings) -> Path | None:
    """The device locks shared with every engine on the same inventory."""
    return settings.inventory.lock_dir if settings.inventory is not None else None


def _cookies(settings: Settings) -> CookieSpace:
    """The deployment's cookies: its inventory's ``cookie_tag`` (default: as before)."""
    return settings.inventory.cookies if settings.inventory is not None else DEFAULT_SPACE


def service_of(app: FastAPI) -> RerouteService | None:
    """The service running in ``app`` (None before start-up and after shutdown)."""
    svc: RerouteService | None = getattr(app.state, "service", None)
    return svc


def _lifespan(settings: Settings, drivers: DriverFactory) -> Lifespan:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """Connect the drivers and open the store, run the service, then drain and close."""
        sqlite = isinstance(settings.store, SqliteStore)
        journal_path = journal_file(settings) if sqlite else None
        async with drivers(settings) as connected:
            # devices that elect no writer wait out etcd's lock-delay (etcd.locks)
            unfenced = frozenset(
                n for n, d in connected.items() if not isinstance(d, MasterElection)
            )
            universe = Universe.of(settings.topo, frozenset(connected), unfenced=unfenced)
            async with open_store(
                settings.store,
                journal_file=journal_path,
                lock_dir=_lock_dir(settings),
                universe=universe,
                lock_delay_s=_lock_delay(settings),
                groups=device_groups(settings.topo, universe.switches),
            ) as (journal, locks):
                engine = Engine(
                    topo=settings.topo,
                    drivers=connected,
                    journal=journal,
                    scope=settings.scope,
                    step_timeout=settings.step_timeout_s,
                    locks=locks,
                    device_timeout_s=_device_timeout(settings),
                    space=_cookies(settings),
                )
                svc = RerouteService(settings, engine, journal)
                async with svc.bus.subscribe() as events:  # before the scheduler starts
                    logger = asyncio.create_task(log_reroutes(events))
                    try:
                        await svc.start()
                        await svc.watch_devices()
                        app.state.service = svc
                        try:
                            yield
                        finally:
                            await svc.stop()  # ends the events: the logger logs the last
                    finally:
                        events.end()
                        await logger

    return lifespan


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with bearer auth on every path but the public ones."""
    if app.openapi_schema is None:
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        doc.setdefault("components", {})["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"}
        }
        for path, operations in doc["paths"].items():
            for operation in operations.values():
                if path not in PUBLIC:
                    operation["security"] = [{"bearer": []}]
        app.openapi_schema = doc
    return app.openapi_schema


def openapi_json() -> str:
    """The OpenAPI document as indented JSON."""
    return json.dumps(openapi_document(api()), indent=2) + "\n"


def _validation(loc: tuple[str | int, ...], message: str, kind: str) -> dict[str, Any]:
    return {"detail": [{"loc": list(loc), "msg": message, "type": kind}]}


async def _request_invalid(request: Request, exc: Exception) -> JSONResponse:
    """422 naming the fields at fault. FastAPI's own handler echoes each bad input back and
    fails (500) on a body that is not UTF-8; the input is left out here, bytes never echo.
    A body that is not declared JSON is a 415 naming its type (FastAPI would not parse it,
    and report the JSON object it then misses as "not a valid dictionary")."""
    assert isinstance(exc, RequestValidationError)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body_at_fault = all(tuple(e.get("loc", ()))[:1] == ("body",) for e in exc.errors())
    if body_at_fault and not _is_json(media):
        said = f"Content-Type {media!r}" if media else "no Content-Type"
        detail = f"the request body must be JSON (Content-Type: application/json), not {said}"
        return JSONResponse({"detail": detail}, status_code=415)
    errors = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type"))}
        for e in exc.errors()
    ]
    return JSONResponse({"detail": errors}, status_code=422)


def _is_json(media: str) -> bool:
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _plan_error(_: Request, exc: Exception) -> JSONResponse:
    loc = exc.loc if isinstance(exc, FieldError) else ("body",)
    return JSONResponse(_validation(loc, str(exc), "plan_error"), status_code=422)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)


async def _driver_error(_: Request, exc: Exception) -> JSONResponse:
    detail = f"cannot read or change the devices: {exc}"
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})


async def _journal_error(_: Request, exc: Exception) -> JSONResponse:
    """The journal cannot be read or written now (etcd without quorum, a full disk):
    nothing was changed (but for a write in doubt, which says so); the client may retry."""
    if isinstance(exc, InDoubt):
        detail = f"the journal cannot be used now; what was asked may be done all the same: {exc}"
    else:
        detail = f"the journal cannot be used now, nothing was changed: {exc}"
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})


async def _reroute_error(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=500)
