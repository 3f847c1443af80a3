"""Service test fixtures: real uvicorn servers on 127.0.0.1:0 (in a thread, or as a real
``reroute serve`` process), settings, tokens. The service's own fabric:
tests/e2e/service/conftest.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.reroute import runtime
from services.reroute.model.inventory import load_inventory
from services.reroute.model.topology import Topology, load_topology
from services.reroute.service.app import DriverFactory
from services.reroute.service.auth import Role, TokenTable
from services.reroute.service.client import RerouteClient, nodelay_transport
from services.reroute.service.config import Settings
from services.reroute.service.server import DrainingServer, listening_socket, server
from tests.unit.services.service.fakes import FakeFabric

ROOT = Path(__file__).resolve().parents[4]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"
OPERATOR = "operator-token-0123456789"
READER = "read-only-token-0123456789"
FABRIC = "svc-test"  # this directory's own fabric (others run theirs at the same time)


def settings(topo: Topology, journal: Path, **kw: object) -> Settings:
    """Settings of a service on ``topo``: its drivers from the inventory of the fabric of
    that name when one is up (else the test passes fake drivers)."""
    inventory = runtime.default_inventory(topo.name)
    base = Settings(
        topo=topo,
        fabric=topo.name,
        scope=None,
        journal=journal,
        inventory=load_inventory(inventory) if inventory.exists() else None,
        host="127.0.0.1",
        port=0,
        tokens=TokenTable({OPERATOR: Role.OPERATOR, READER: Role.READ}),
        step_timeout_s=5.0,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


class ServerThread:
    """``reroute serve``'s server, in a thread of this process, on a free port."""

    def __init__(
        self, config: Settings, drivers: DriverFactory | None = None, port: int = 0
    ) -> None:
        self.server: DrainingServer = server(config, drivers=drivers)
        self.sock = listening_socket("127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive(), "the server did not start (see the log)"
            assert time.monotonic() < deadline, "the server took over 20 s to start"
            time.sleep(0.01)
        return self

    def drain(self) -> None:
        """What SIGTERM does; returns once the service refuses changes."""
        self.server.handle_exit(signal.SIGTERM, None)
        deadline = time.monotonic() + 10
        while self.thread.is_alive() and time.monotonic() < deadline:
            try:
                if self.http(None).get("/healthz").json()["status"] == "draining":
                    return
            except httpx.TransportError:
                return  # already gone
            time.sleep(0.01)

    def __exit__(self, *_: object) -> None:
        if not self.server.drain_requested:
            self.drain()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the server did not stop within 30 s"

    def client(self, token: str = OPERATOR, **kw: float | int) -> RerouteClient:
        return RerouteClient(self.url, token, **kw)  # type: ignore[arg-type]

    def http(self, token: str | None = OPERATOR) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=10, transport=nodelay_transport()
        )


class ServeProcess:
    """A real ``reroute serve --config FILE`` process (to be killed for real)."""

    def __init__(self, config: Path, listen: str = "127.0.0.1:0") -> None:
        cmd = [sys.executable, "-m", "services.reroute.cli", "serve", "--config", str(config)]
        self.log = config.with_suffix(".log")
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [*cmd, "--listen", listen],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "http://" in line, self.log.read_text()
        self.url = line.split()[2]
        self.terminated = False
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError("reroute serve did not become healthy in 20 s")

    def client(self, token: str = OPERATOR) -> RerouteClient:
        return RerouteClient(self.url, token)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def terminate(self) -> None:
        """SIGTERM, once (a second one would exit at once, without draining)."""
        if not self.terminated:
            self.terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        """Drain and wait for the exit status."""
        if self.proc.poll() is None:
            self.terminate()
        try:
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


@pytest.fixture
def topo() -> Topology:
    return load_topology(NGNCS)


@pytest.fixture
def fake(topo: Topology) -> FakeFabric:
    return FakeFabric(topo)


@pytest.fixture
def fake_server(topo: Topology, fake: FakeFabric, tmp_path: Path) -> Iterator[ServerThread]:
    """The service on fake switches (no fabric, no root)."""
    with ServerThread(settings(topo, tmp_path / "journal.sqlite"), fake.drivers) as srv:
        yield srv
