"""The service's log for an operator: one line per HTTP request, one per reroute that ends,
one per change of a device's state and per resync of a device (logger ``reroute.device_states``)::

    device name=br2 state=out_of_sync was=down error="3 of the 3 rules ... are missing ..."
    resync device=br2 state=done steps=2

Both are ``key=value`` lines (values with spaces quoted as JSON strings), so one ``grep``
finds a reroute's request and its end (loggers ``reroute.requests``, ``reroute.reroutes``)::

    request method=POST path=/v1/reroutes status=201 ms=14.2 client=127.0.0.1 reroute=3f2a9c
    reroute id=3f2a9c state=done ms=857.1

A request's ``ms`` runs from its arrival to its last byte (an event stream: its whole life);
``reroute=`` is the reroute a ``POST`` created or found (its ``Location``). A reroute's
``ms`` is how long it ran, first step to outcome; one that never ran (rejected, cancelled)
counts from its request to its end.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.reroute.service.events import Subscription
from services.reroute.store.records import RerouteState

requests_log = logging.getLogger("reroute.requests")
reroutes_log = logging.getLogger("reroute.reroutes")
devices_log = logging.getLogger("reroute.device_states")
lifecycle_log = logging.getLogger("reroute.lifecycle")  # start of a shutdown, its end
LOGGERS = (requests_log, reroutes_log, devices_log, lifecycle_log)
IDLE_S = 60.0
FINAL = frozenset(s.value for s in RerouteState if s.final)


def fields(**values: object) -> str:
    """``key=value`` pairs; a value with a space, a quote or a newline is a JSON string."""
    out = []
    for key, value in values.items():
        text = "-" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)
        if not text or any(c in text for c in ' "\n'):
            text = json.dumps(text)
        out.append(f"{key}={text}")
    return " ".join(out)


class RequestLog:
    """ASGI middleware: one line per HTTP request, when its answer has been sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        answer: dict[str, object] = {"status": 500, "reroute": None}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["reroute"] = _created(message.get("headers", ()))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            query = scope.get("query_string", b"").decode("latin-1")
            client = scope.get("client")
            requests_log.info(
                "request %s",
                fields(
                    method=scope["method"],
                    path=scope["path"] + (f"?{query}" if query else ""),
                    status=answer["status"],
                    ms=(time.perf_counter() - started) * 1000,
                    client=client[0] if client else None,
                    reroute=answer["reroute"],
                ),
            )


def _created(headers: object) -> str | None:
    """The reroute id of a ``Location: /v1/reroutes/ID`` header."""
    for key, value in headers if isinstance(headers, list | tuple) else ():
        if key.lower() == b"location" and value.startswith(b"/v1/reroutes/"):
            return str(value[len(b"/v1/reroutes/") :].decode("latin-1"))
    return None


async def log_reroutes(sub: Subscription) -> None:
    """Log each reroute that ends, from the service's events, until the stream ends."""
    seen: dict[str, float] = {}  # reroute id -> when its request arrived
    while (event := await sub.next(IDLE_S)) is not None:
        if isinstance(event, str):
            continue
        if event.kind == "reroute":
            _ended(event.data, seen)
        elif event.kind in ("device", "resync"):
            _device(event.kind, event.data)


def _device(kind: str, data: Mapping[str, object]) -> None:
    """A device's transition (``device``) or a resync of it (``resync``), as one line."""
    if kind == "device":
        keys = ("state", "was", "error")
        line = fields(name=data.get("device"), **{k: data.get(k) for k in keys if data.get(k)})
    else:
        keys = ("state", "steps", "error")
        line = fields(device=data.get("device"), **{k: data.get(k) for k in keys if data.get(k)})
    up = data.get("state") in ("up", "done", "started")
    devices_log.log(logging.INFO if up else logging.WARNING, "%s %s", kind, line)


def _ended(data: Mapping[str, object], seen: dict[str, float]) -> None:
    reroute_id, state = str(data.get("reroute_id")), str(data.get("state"))
    if state == RerouteState.PENDING:
        seen[reroute_id] = time.monotonic()
    if state not in FINAL:
        return
    asked = seen.pop(reroute_id, None)
    total = data.get("total_ms")
    ms = float(total) if isinstance(total, int | float) else None
    if ms is None and asked is not None:
        ms = (time.monotonic() - asked) * 1000
    error = data.get("error")
    line = fields(id=reroute_id, state=state, ms=ms)
    reroutes_log.info("reroute %s", f"{line} {fields(error=error)}" if error else line)
