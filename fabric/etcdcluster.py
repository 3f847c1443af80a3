"""An etcd cluster of real ``etcd`` processes (Debian's ``etcd-server``) on loopback, for
the replicas' tests and benches: start, kill -9 / restart a member, stop.

Each member listens on two free loopback ports (client, peer), keeps its data in its own
directory, and runs with a short heartbeat and election timeout (50 / 500 ms) so a lost
leader is replaced quickly. ``ns``: a network namespace the members run in (a test cuts a
replica off from them by its own namespace's link). Everything started is stopped by
``stop`` (and by the context manager).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from fabric.errors import FabricError

HEARTBEAT_MS = 50
ELECTION_MS = 500


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (bound to port 0, then closed)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(slots=True)
class Member:
    name: str
    host: str
    client: int
    peer: int
    data: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client}"


@dataclass(slots=True)
class EtcdCluster:
    """``size`` members under ``root`` (a fresh directory)."""

    root: Path
    size: int = 3
    host: str = "127.0.0.1"
    ns: str | None = None
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        if shutil.which("etcd") is None:
            raise FabricError("etcd is missing: `make setup` installs Debian's etcd-server")
        self.members = [
            Member(
                name=f"m{i}",
                host=self.host,
                client=free_port(self.host),
                peer=free_port(self.host),
                data=self.root / f"m{i}",
            )
            for i in range(self.size)
        ]

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def __enter__(self) -> EtcdCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start every member; return once the cluster answers."""
        for member in self.members:
            self.restart(member.name, wait=False)
        self.wait_healthy()

    def _cmd(self, m: Member) -> list[str]:
        cluster = ",".join(f"{x.name}=http://{x.host}:{x.peer}" for x in self.members)
        state = "existing" if (m.data / "member").exists() else "new"
        cmd = [
            "etcd", "--name", m.name, "--data-dir", str(m.data),
            "--listen-client-urls", f"http://{m.host}:{m.client}",
            "--advertise-client-urls", f"http://{m.host}:{m.client}",
            "--listen-peer-urls", f"http://{m.host}:{m.peer}",
            "--initial-advertise-peer-urls", f"http://{m.host}:{m.peer}",
            "--initial-cluster", cluster, "--initial-cluster-state", state,
            "--initial-cluster-token", f"reroute-{os.getpid()}",
            "--heartbeat-interval", str(HEARTBEAT_MS), "--election-timeout", str(ELECTION_MS),
            "--log-level", "warn",
        ]  # fmt: skip
        return ["ip", "netns", "exec", self.ns, *cmd] if self.ns else cmd

    def restart(self, name: str, *, wait: bool = True) -> None:
        """(Re)start member ``name`` with its data."""
        m = self._member(name)
        m.data.mkdir(parents=True, exist_ok=True)
        log = (self.root / f"{m.name}.log").open("ab")
        m.process = subprocess.Popen(
            self._cmd(m), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        if wait:
            self.wait_healthy()

    def kill(self, name: str) -> None:
        """``kill -9`` member ``name``."""
        m = self._member(name)
        if m.process is not None and m.process.poll() is None:
            os.killpg(m.process.pid, signal.SIGKILL)
            m.process.wait(timeout=10)

    def stop(self) -> None:
        """Stop every member."""
        for m in self.members:
            if m.process is not None and m.process.poll() is None:
                os.killpg(m.process.pid, signal.SIGTERM)
                try:
                    m.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(m.process.pid, signal.SIGKILL)
                    m.process.wait(timeout=10)

    def wait_healthy(self, timeout_s: float = 20.0) -> None:
        """Until some member says the cluster is healthy (it has a leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.members:
                if m.process is not None and m.process.poll() is None and _healthy(m):
                    return
            time.sleep(0.05)
        logs = {m.name: (self.root / f"{m.name}.log").read_text()[-500:] for m in self.members}
        raise FabricError(f"etcd cluster not healthy in {timeout_s:g} s: {logs}")

    def _member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)


def _healthy(m: Member) -> bool:
    try:
        with urllib.request.urlopen(f"http://{m.endpoint}/health", timeout=1) as reply:
            return b'"health":"true"' in reply.read()
    except OSError:
        return False
