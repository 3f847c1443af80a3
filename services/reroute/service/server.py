"""Serving the app with uvicorn, and a graceful drain on SIGTERM / SIGINT:

1. from the first signal on, POST and DELETE answer 503 (reads still work);
2. the running reroute finishes (on failure it rolls itself back); pending ones stay
   pending in the journal and run after the next start;
3. event streams end, open requests complete, the drivers and the journal are closed.

A second signal exits at once; the journal then recovers on the next start what was cut.

Under systemd (``Type=notify``, packaging/reroute.service) the server tells the manager
on ``$NOTIFY_SOCKET`` when it serves (``READY=1``, once the devices are being opened and the
journal is open: the lifespan has run) and when it starts draining (``STOPPING=1``).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from services.reroute.service.app import DriverFactory, create_app, service_of
from services.reroute.service.config import Settings

log = logging.getLogger("reroute.service")
GRACE_S = 5  # after the drain, how long open connections may take to finish


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app
        self.drain_requested = False
        self._told_ready = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A signal handler: only set flags (``on_tick`` acts on them in the loop)."""
        if self.drain_requested:
            self.should_exit = self.force_exit = True
        self.drain_requested = True

    async def on_tick(self, counter: int) -> bool:
        """Tell systemd once serving and once draining; stop once a drain has finished."""
        if self.started and not self._told_ready:
            self._told_ready = True
            notify("READY=1\nSTATUS=serving")
        if self.drain_requested and self._drained():
            return True
        return await super().on_tick(counter)

    def _drained(self) -> bool:
        svc = service_of(self.app)
        if svc is None:
            return True
        if not svc.draining:
            notify("STOPPING=1\nSTATUS=draining: running reroutes finish, no new one starts")
        svc.begin_drain()
        if not svc.drained:
            return False
        svc.bus.close()
        return True


def notify(state: str) -> None:
    """Send ``state`` to the service manager (sd_notify's protocol: one datagram to the
    unix socket named by ``$NOTIFY_SOCKET``, ``@`` for an abstract one); nothing without it."""
    where = os.environ.get("NOTIFY_SOCKET")
    if not where:
        return
    address = "\0" + where[1:] if where.startswith("@") else where
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError as exc:  # the manager went away: nothing to tell
        log.warning("could not tell the service manager %r: %s", state.split("\n")[0], exc)


def listening_socket(host: str, port: int) -> socket.socket:
    """Bound and listening on ``host:port`` (port 0 picks a free one): a client that connects
    as soon as the address is printed waits in the backlog until the server accepts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio: NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def server(settings: Settings, *, drivers: DriverFactory | None = None) -> DrainingServer:
    """A uvicorn server of the service that drains on SIGTERM."""
    app = create_app(settings, drivers=drivers)
    tls = settings.tls
    https: dict[str, Any] = {}
    if tls is not None:  # uvicorn makes the context; ServeTls.context checked the files
        https = {
            "ssl_certfile": str(tls.certificate),
            "ssl_keyfile": str(tls.private_key),
            "ssl_ca_certs": None if tls.client_ca is None else str(tls.client_ca),
            "ssl_cert_reqs": ssl.CERT_NONE if tls.client_ca is None else ssl.CERT_REQUIRED,
        }
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACE_S,
        **https,
    )
    return DrainingServer(config, app)


def serve(settings: Settings, sock: socket.socket) -> None:
    """Run until drained after a signal (blocks)."""
    server(settings).run(sockets=[sock])
