"""Fixtures for tests that build real fabrics (root, Open vSwitch, network namespaces)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric import fabric, netns, state
from fabric.fabric import Fabric
from services.reroute.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[2]
NGNCS = ROOT / "topologies" / "ngncs-ost.yaml"
TWO_SITE = ROOT / "topologies" / "two-site-longhaul.yaml"


def leftovers(name: str) -> list[str]:
    """Everything of fabric ``name`` still on the machine: netns, daemons, state, veths."""
    found = [f"netns {ns}" for ns in netns.listing(state.fabric_ns(name))]
    rundir = str(state.run_dir() / name)
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found += [f"process {line.strip()}" for line in ps.splitlines() if rundir in line]
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


def reroute(
    *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real ``reroute`` command line."""
    cmd = [sys.executable, "-m", "services.reroute.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session", autouse=True)
def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("fabric tests need root (CI runs as root); deselect with -m 'not fabric'")


@pytest.fixture
def topo_ngncs() -> Topology:
    return load_topology(NGNCS)


@pytest.fixture
def ngncs(topo_ngncs: Topology) -> Iterator[Fabric]:
    fab = fabric.up(topo_ngncs)
    try:
        yield fab
    finally:
        fabric.down(topo_ngncs.name)
    assert leftovers(topo_ngncs.name) == []
