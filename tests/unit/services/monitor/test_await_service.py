"""A monitor started beside its service waits for it to answer (the README starts both at
once), and still fails on an address where nothing ever answers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from services.reroute.errors import ApiError
from services.reroute.monitor.cli import await_service
from services.reroute.service.client import RerouteClient


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"status": "ok", "fabric": "f", "queue": 0, "running": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def service_after(delay_s: float, port: int) -> Iterator[None]:
    """A /healthz server on ``port`` that starts listening ``delay_s`` from now."""
    servers: list[HTTPServer] = []

    def start() -> None:
        time.sleep(delay_s)
        server = HTTPServer(("127.0.0.1", port), Health)
        servers.append(server)
        server.serve_forever()

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    try:
        yield
    finally:
        while thread.is_alive() and not servers:
            time.sleep(0.01)
        for server in servers:
            server.shutdown()
            server.server_close()


def test_a_service_that_starts_late_is_waited_for(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with service_after(1.0, port):
        started = time.monotonic()
        await_service(RerouteClient(url, "t", retries=0), url, 20)
        assert 0.9 <= time.monotonic() - started < 10
    assert f"monitor: waiting up to 20 s for {url} to answer" in capsys.readouterr().err


def test_nothing_answering_fails_after_the_wait() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ApiError) as info:
        await_service(RerouteClient(url, "t", retries=0), url, 0.5)
    assert info.value.status == 0 and "no answer" in str(info.value)
    assert 0.5 <= time.monotonic() - started < 5
