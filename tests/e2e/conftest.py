"""Fixtures for tests that build real fabrics (root, Open vSwitch, network namespaces)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fabric import fabric, netns, state
from fabric.fabric import Fabric
from fabric.kinds.polatis_scpi import control as scpicontrol
from fabric.kinds.polatis_scpi import scpi_port
from services.reroute.model.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[2]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"
TWO_SITE = ROOT / "topologies" / "two-site-longhaul.yaml"


def leftovers(name: str) -> list[str]:
    """Everything of fabric ``name`` still on the machine: netns, daemons, state, veths."""
    base = state.fabric_ns(name)  # its hosts are base.host; fabric "x-odl" is not "x"'s
    found = [f"netns {ns}" for ns in netns.listing(base) if ns == base or ns.startswith(base + ".")]
    rundir = str(state.run_dir() / name)
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [f"process {line.strip()}" for line in ps.splitlines() if rundir + "/" in line]
    if (state.run_dir() / name).exists():
        found.append(f"state dir {rundir}")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    topo_nodes = ("br1-", "br2-", "ost1-", "sw1-", "lh1-", "t1-")
    found += [
        f"veth {line.split(':')[1]}"
        for line in links.splitlines()
        if any(line.split(":")[1].strip().startswith(n) for n in topo_nodes)
    ]
    return found


def scpi(fab: Fabric, line: str) -> str:
    """One exchange with the fabric's Polatis emulator (its emulator-only commands too): a
    query's answer; a command waited for (``*OPC?``), ``""``."""
    port = scpi_port(fab.state, "ost1")
    if "?" in line:
        return scpicontrol.ask(port, line)
    assert scpicontrol.ask(port, f"{line}\n*OPC?") == "1", line
    return ""


def reroute(
    *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``reroute`` command line."""
    cmd = [sys.executable, "-m", "services.reroute.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(autouse=True)
def _need_root(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("fabric") and os.geteuid() != 0:
        pytest.fail("fabric tests need root (CI runs as root); deselect with -m 'not fabric'")


@pytest.fixture
def topo_ngncs() -> Topology:
    return load_topology(NGNCS)


@contextlib.contextmanager
def running(topo: Topology, **options: Any) -> Iterator[Fabric]:
    """``topo``'s fabric, up for the block (``options``: ``fabric.up``'s, e.g.
    ``options={"odl_stats_s": 0.5}``); down after it, with nothing of it left."""
    fab = fabric.up(topo, **options)
    try:
        yield fab
    finally:
        fabric.down(topo.name)
    assert leftovers(topo.name) == []


@pytest.fixture
def ngncs(topo_ngncs: Topology) -> Iterator[Fabric]:
    with running(topo_ngncs) as fab:
        yield fab


RATE = 5000
CLI = [sys.executable, "-m", "services.reroute.cli"]


class Probe:
    """A probe receiver in vm3 and sender in vm2 (or ``dst`` at ``to`` and ``src``), as real
    processes in their namespaces."""

    def __init__(
        self,
        fab: Fabric,
        duration: float,
        rate: int = RATE,
        *,
        src: str = "vm2",
        dst: str = "vm3",
        to: str = "10.0.0.3",
    ) -> None:
        run_id = str(random.getrandbits(32))
        self.recv = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                fab.host_ns(dst),
                *CLI,
                "probe",
                "recv",
                "--bind",
                f"{to}:9000",
                "--json",
                "--run-id",
                run_id,
                "--idle",
                "3",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.recv.stderr is not None
        line = self.recv.stderr.readline()
        assert "listening" in line, line
        self.send = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                fab.host_ns(src),
                *CLI,
                "probe",
                "send",
                "--to",
                f"{to}:9000",
                "--rate",
                str(rate),
                "--duration",
                str(duration),
                "--run-id",
                run_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def report(self) -> dict[str, Any]:
        self.send.wait(timeout=60)
        out, err = self.recv.communicate(timeout=60)
        assert self.recv.returncode == 0, err
        return dict(json.loads(out))


def during(
    fab: Fabric, duration: float, action: Callable[[], Awaitable[None]], at: float = 1.0
) -> dict[str, Any]:
    """Run ``action`` ``at`` seconds after the probe's packets reach vm3 (the sender's
    Python may take a second to start on a busy machine), and return the probe's report."""
    probe = Probe(fab, duration)
    wait_arriving(fab, "vm3")
    time.sleep(at)
    asyncio.run(action())  # type: ignore[arg-type]
    return probe.report()


def wait_arriving(fab: Fabric, host: str, packets: int = 20, timeout: float = 10.0) -> None:
    """Until ``host``'s eth0 has received ``packets`` more packets."""

    def received() -> int:
        out = subprocess.run(
            ["ip", "-n", fab.host_ns(host), "-s", "-j", "link", "show", "dev", "eth0"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return int(json.loads(out)[0]["stats64"]["rx"]["packets"])

    start, deadline = received(), time.monotonic() + timeout
    while received() - start < packets:
        if time.monotonic() > deadline:
            raise AssertionError(f"no probe traffic reached {host} within {timeout} s")
        time.sleep(0.01)
