"""The two-site containers (docker/two-site/) driven from the host, for the tests.

``Deployment.up`` runs ``docker compose up`` with a fresh operator token, free host ports and
free subnets (none of the Docker host's networks or routes overlaps them);
``down`` removes the containers, networks and volumes of the project, and ``leftovers`` lists
any that are still there. Commands inside the containers go through ``docker exec``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.reroute.service.client import RerouteClient, RerouteView

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker" / "two-site" / "docker-compose.yml"
PROJECT = "reroute-two-site"
NAME = "two-site-docker"  # topologies/two-site-containers.yaml: the sites' namespaces
FLOW = "10.10.0.1>10.10.0.2"
SITES = {"site1": ("h1", "10.10.0.2"), "site2": ("h2", "10.10.0.1")}
# docker-compose.yml: the networks' subnets, each given as the x.y.z of its x.y.z.0/29
SUBNETS = ("NET_LH_WEST", "NET_LH_EAST", "NET_STANDBY", "NET_SITE1_MGMT", "NET_SITE2_MGMT")
CANDIDATES = ipaddress.IPv4Network("172.30.0.0/15")  # docker-compose.yml's defaults: 172.30.11-15


def compose_command() -> list[str]:
    """``docker compose`` where the plugin exists, else Debian's ``docker-compose``."""
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise RuntimeError("neither `docker compose` nor `docker-compose` is installed")


def docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} -> {proc.returncode}: {proc.stderr}")
    return proc.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def leftovers() -> list[str]:
    """Containers, networks and volumes of the project still on the Docker host."""
    label = f"label=com.docker.compose.project={PROJECT}"
    found = []
    for kind, cmd in (
        ("container", ["ps", "-a"]),
        ("network", ["network", "ls"]),
        ("volume", ["volume", "ls"]),
    ):
        names = docker(*cmd, "-q", "--filter", label).split()
        found += [f"{kind} {n}" for n in names]
    return found


def taken_networks() -> list[ipaddress.IPv4Network]:
    """The subnets of every Docker network on the host and the destinations of every route
    in the host's namespace (the default route aside)."""
    ids = docker("network", "ls", "-q").split()
    fmt = "{{range .IPAM.Config}}{{.Subnet}} {{end}}"
    subnets = docker("network", "inspect", "--format", fmt, *ids).split() if ids else []
    routes = subprocess.run(
        ["ip", "-j", "-4", "route", "show", "table", "all"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    dsts = [r["dst"] for r in json.loads(routes or "[]") if r.get("dst", "default") != "default"]
    return [n for n in map(_network, [*subnets, *dsts]) if n is not None]


def _network(text: str) -> ipaddress.IPv4Network | None:
    try:
        return ipaddress.IPv4Network(text, strict=False)
    except ValueError:  # an IPv6 subnet of a Docker network
        return None


def free_prefixes(count: int, taken: Iterable[ipaddress.IPv4Network]) -> list[str]:
    """``count`` x.y.z prefixes whose x.y.z.0/24 overlaps none of ``taken``, from 172.30.11
    on (docker-compose.yml's defaults when they are free)."""
    taken = list(taken)
    free = []
    for net in list(CANDIDATES.subnets(new_prefix=24))[11:]:
        if not any(net.overlaps(t) for t in taken):
            free.append(str(net.network_address).rsplit(".", 1)[0])
            if len(free) == count:
                return free
    raise RuntimeError(f"fewer than {count} free /24 in {CANDIDATES} on this Docker host")


@dataclass(slots=True)
class Deployment:
    token: str
    ports: dict[str, int]
    env: dict[str, str]
    compose: list[str] = field(default_factory=compose_command)

    @classmethod
    def up(cls, **extra_env: str) -> Deployment:
        token = secrets.token_hex(16)
        ports = {"site1": free_port(), "site2": free_port()}
        env = {
            "REROUTE_TOKEN": token,
            "SITE1_PORT": str(ports["site1"]),
            "SITE2_PORT": str(ports["site2"]),
            **dict(zip(SUBNETS, free_prefixes(len(SUBNETS), taken_networks()), strict=True)),
            **extra_env,
        }
        dep = cls(token=token, ports=ports, env=env)
        dep.down()  # leftovers of an interrupted run
        try:
            dep.run("up", "-d", "--no-build")
            for site in SITES:
                dep.wait_ready(site)
        except BaseException:
            dep.down()
            raise
        return dep

    def run(self, *args: str, timeout: float = 180) -> str:
        cmd = [*self.compose, "-p", PROJECT, "-f", str(COMPOSE_FILE), *args]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env}
        )
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def down(self) -> None:
        self.run("down", "--volumes", "--remove-orphans", "--timeout", "20")

    def client(self, site: str) -> RerouteClient:
        return RerouteClient(f"http://127.0.0.1:{self.ports[site]}", self.token)

    def wait_ready(self, site: str, timeout: float = 90, starts: int = 1) -> None:
        """The site is up: its service answers and its monitor runs (or, with SITE_SERVE=0,
        its switch alone): its entry point said so ``starts`` times (the log of a restarted
        container holds every start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            logs = self.logs(site)
            if logs.count(": up: ") >= starts:
                return
            if docker("inspect", "-f", "{{.State.Running}}", site).strip() != "true":
                raise AssertionError(f"{site} stopped while starting:\n{logs}")
            time.sleep(0.5)
        raise AssertionError(f"{site} not ready after {timeout:.0f} s:\n{self.logs(site)}")

    def logs(self, site: str) -> str:
        proc = subprocess.run(["docker", "logs", site], capture_output=True, text=True)
        return proc.stdout + proc.stderr

    def events(self, site: str) -> list[dict[str, object]]:
        """The monitor's JSON lines (trigger, failover) in the site's log."""
        lines = self.logs(site).splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"kind"')]

    def in_host(
        self, site: str, *cmd: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` in the site's host namespace (h1 or h2)."""
        ns = f"rr-{NAME}.{SITES[site][0]}"
        return subprocess.run(
            ["docker", "exec", site, "ip", "netns", "exec", ns, *cmd],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def iperf(self, seconds: int) -> subprocess.Popen[str]:
        """An iperf3 stream h1 -> h2 (20 Mb/s, ``seconds`` long, JSON on stdout): the server
        started in site2's h2 first, the client left running in site1's h1."""
        self.in_host("site2", "iperf3", "-s", "-D", "-1", "-p", "5201")
        time.sleep(0.5)
        ns = f"rr-{NAME}.{SITES['site1'][0]}"
        return subprocess.Popen(
            ["docker", "exec", "site1", "ip", "netns", "exec", ns, "iperf3", "-c", "10.10.0.2",
             "-p", "5201", "-t", str(seconds), "-i", "0.5", "-b", "20M", "-J"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def set_delay(self, ms: float) -> dict[str, float]:
        """Change the long-haul delay through the delay line's HTTP control (``PUT /delay``
        on the longhaul container's loopback)."""
        code = (
            "import httpx,sys,json; r = httpx.put('http://127.0.0.1:8090/delay', "
            f"json={{'delay_ms': {ms}}}); r.raise_for_status(); print(r.text)"
        )
        return dict(json.loads(docker("exec", "longhaul", "/src/.venv/bin/python", "-c", code)))

    def python_in(self, site: str, code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", site, "/src/.venv/bin/python", "-c", code],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip


def ping_rtt_ms(dep: Deployment, site: str, count: int = 5) -> float:
    """Median rtt from the site's host to the other one; inf when any echo is lost."""
    peer = SITES[site][1]
    out = dep.in_host(site, "ping", "-c", str(count), "-i", "0.2", "-W", "1", peer).stdout
    rtts = sorted(float(x.split("time=")[1].split()[0]) for x in out.splitlines() if "time=" in x)
    return rtts[len(rtts) // 2] if len(rtts) == count else float("inf")


def wait_reroute(
    dep: Deployment,
    site: str,
    to_path: str,
    states: Sequence[str],
    timeout: float = 30,
    exclude: Sequence[str] = (),
) -> RerouteView:
    """The site's first reroute to ``to_path`` in one of ``states`` (ids in ``exclude``
    do not count)."""
    deadline = time.monotonic() + timeout
    with dep.client(site) as client:
        while time.monotonic() < deadline:
            for view in client.list():
                if view.to_path == to_path and view.state in states and view.id not in exclude:
                    return view
            time.sleep(0.1)
    raise AssertionError(f"{site}: no reroute to {to_path} in {states} after {timeout:.0f} s")
