"""The delay line's HTTP control endpoint, on a loopback address only.

    GET  /healthz  -> {"ok": true}
    GET  /delay    -> {"delay_ms": 15.0, "a_to_b_ms": 15.0, "b_to_a_ms": 15.0}
    PUT  /delay    <- {"delay_ms": 40} and/or {"a_to_b_ms": .., "b_to_a_ms": ..}
                   -> 200 and the new delay; or 400 {"error": .., "field": ..}, nothing changed
    GET  /stats    -> {"a_to_b": {counters}, "b_to_a": {counters}}

:meth:`ControlServer.bind` only binds the listener, so it can be done in one network namespace
and the serving (:meth:`ControlServer.serve`, in a thread) after the process moved to another.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socketserver
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Protocol, Self

from emulators.delayline.errors import DelayLineError, Refused
from emulators.delayline.model import DelayState, LineStats, parse_update

log = logging.getLogger("reroute.emulators.delayline")
MAX_BODY = 4096


class DelayTarget(Protocol):
    """What the endpoint controls (a :class:`~emulators.delayline.line.DelayLine`)."""

    def state(self) -> DelayState:
        """The line's current delays."""

    def apply(self, state: DelayState) -> None:
        """Set the line's delays."""

    def stats(self) -> LineStats:
        """The line's packet counters."""


class _Server(HTTPServer):
    target: DelayTarget
    lock: threading.Lock

    def server_bind(self) -> None:  # skip HTTPServer's reverse DNS lookup of the address
        """Bind without HTTPServer's reverse DNS lookup of the address."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: object, client_address: object) -> None:
        """Log a failed control request (the server keeps serving)."""
        log.exception("control request from %s failed", client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 5.0

    def do_GET(self) -> None:
        """GET /healthz, /delay, /stats."""
        routes: dict[str, Callable[[], dict[str, Any]]] = {
            "/healthz": lambda: {"ok": True},
            "/delay": lambda: self.server.target.state().to_dict(),
            "/stats": lambda: self.server.target.stats().to_dict(),
        }
        route = routes.get(self.path)
        if route is None:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such resource {self.path}"})
            return
        self._reply(HTTPStatus.OK, route())

    def do_PUT(self) -> None:
        """PUT /delay: set the delays (400 on a bad body)."""
        if self.path != "/delay":
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"cannot PUT {self.path}"})
            return
        try:
            new = self._apply(self._body())
        except Refused as exc:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc), "field": exc.field})
            return
        log.info("delay set to %s", new.to_dict())
        self._reply(HTTPStatus.OK, new.to_dict())

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_BODY:
            raise Refused(f"need a Content-Length of 0..{MAX_BODY}", field="body")
        return self.rfile.read(int(length))

    def _apply(self, body: bytes) -> DelayState:
        target = self.server.target
        with self.server.lock:  # read-modify-write: two PUTs must not interleave
            new = parse_update(body, target.state())
            target.apply(new)
        return new

    def _reply(self, status: HTTPStatus, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Log requests at debug level (not to stderr)."""
        log.debug("%s " + format, self.address_string(), *args)


class ControlServer:
    """The HTTP endpoint: bound by :meth:`bind`, served in a thread by :meth:`serve`."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._thread: threading.Thread | None = None

    @classmethod
    def bind(cls, host: str, port: int) -> Self:
        """Listen on loopback ``host:port`` (0: any free port); DelayLineError otherwise."""
        if not _is_loopback(host):
            raise DelayLineError(f"the control endpoint listens on loopback only, not {host!r}")
        try:
            server = _Server((host, port), _Handler, bind_and_activate=True)
        except OSError as exc:
            raise DelayLineError(f"cannot listen on {host}:{port}: {exc}") from exc
        server.lock = threading.Lock()
        return cls(server)

    @property
    def port(self) -> int:
        """The bound port."""
        return self._server.server_port

    @property
    def url(self) -> str:
        """The endpoint's base URL."""
        return f"http://{self._server.server_name}:{self.port}"

    def serve(self, target: DelayTarget) -> None:
        """Serve ``target`` on a background thread."""
        self._server.target = target
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="delayline-control", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
