"""The fault harness's tools: one device at a time paused (SIGSTOP), killed or cut off under
``reroute serve`` with the probe running, and what every case asserts.

- ``Service``: a fabric with ``reroute serve`` on its inventory; every reroute that must
  succeed runs under a 1 kpps probe vm2 -> vm3 (``move``: the probe counts every packet;
  the fabric's own drops, read from OVS's sockets, are the only losses allowed).
- ``paused(pid)``: a device's process stopped (SIGSTOP) for the block: its connections stay
  open and nothing answers (hung), then SIGCONT.
- ``cut_off(port)``: a device cut off, its packets dropped (iptables on loopback), not
  refused: the connections stay open, nothing arrives either way.
- ``refused_in_time``: a reroute that needs the faulty device is rejected, naming it,
  within 2 x the inventory's ``device_timeout_s``, and the flow is on the one path it was
  on (read back from the bridges).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from experiments.measuring import fabric_drops
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine.engine import read_optics
from services.reroute.model.inventory import load_inventory
from services.reroute.model.topology import Circuit, Topology
from services.reroute.service.client import RerouteClient, RerouteView
from services.reroute.store.records import RerouteState
from tests.e2e.conftest import Probe, wait_arriving
from tests.unit.services.service.conftest import OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import bridge_tables, path_of_flow

FLOW = "10.0.0.2>10.0.0.3"
PROBE_RATE = 1000
PROBE_S = 2.5  # covers a reroute (an optical one: ~1 s of lock) once the probe arrives


@dataclass
class Service:
    topo: Topology
    fab: Fabric
    serve: ServeProcess
    client: RerouteClient
    inventory: Path  # the service's

    @property
    def device_timeout_s(self) -> float:
        return load_inventory(self.inventory).device_timeout_s

    def path(self, circuits: frozenset[Circuit] | None = None) -> str:
        """The one path vm2 <-> vm3 takes now, read back from the bridges (through
        ``circuits``; default: the topology's initial ones)."""
        return path_of_flow(self.topo, self.fab, bridge_tables(self.topo, self.fab), circuits)

    def move(self, to: str, **options: object) -> RerouteView:
        """A reroute that must succeed, hitless: under the probe, which loses nothing the
        fabric did not drop itself, and the flow read back on ``to``."""
        drops = fabric_drops(self.fab)
        probe = Probe(self.fab, PROBE_S, rate=PROBE_RATE)
        wait_arriving(self.fab, "vm3")
        try:
            view = self.client.create([FLOW], to, wait_s=30, **options)  # type: ignore[arg-type]
        finally:
            report = probe.report()
        assert view.state is RerouteState.DONE, f"{to}: {view.state} {view.error}"
        assert report["lost"] <= fabric_drops(self.fab) - drops, report
        return view

    def refused_in_time(self, device: str, to: str, **options: object) -> RerouteView:
        """A reroute needing ``device`` is rejected naming it within 2 x device_timeout_s
        (what the client sees, HTTP included), nothing changed."""
        started = time.monotonic()
        view = self.client.create([FLOW], to, wait_s=30, **options)  # type: ignore[arg-type]
        took = time.monotonic() - started
        assert view.state is RerouteState.REJECTED, f"{to}: {view.state} {view.error}"
        assert device in (view.error or "") and "nothing changed" in (view.error or ""), view
        assert took < 2 * self.device_timeout_s, (took, view.error)  # the bound
        return view

    def circuits(self) -> frozenset[Circuit]:
        """The optical switches' cross-connects, read from them (on sessions of their own)."""
        names = frozenset(o.name for o in self.topo.optical_switches)

        async def read() -> frozenset[Circuit]:
            async with fabric_drivers(self.topo, self.fab.state, names) as drivers:
                return await read_optics(drivers)

        return asyncio.run(read())

    def until_cleaned(self, reroute_id: str, timeout: float = 30.0) -> None:
        """Until the service's reconciler has done the cleanup ``reroute_id`` left owed."""
        deadline = time.monotonic() + timeout
        while (view := self.client.get(reroute_id)).cleanup_pending:
            assert time.monotonic() < deadline, view
            time.sleep(0.3)

    def health_names(self, device: str, *states: str) -> None:
        """``/v1/health`` says ``device`` is not up (in one of ``states``, when given), since
        when and why, and the service is degraded (``/healthz`` too)."""
        health = self.client.devices()
        assert health.status == "degraded" and device in health.down, health
        (found,) = [d for d in health.devices if d.name == device]
        assert not states or found.state in states, found
        assert found.since is not None and found.error, found
        assert self.client.health().status == "degraded"

    def until_up(self, timeout: float = 20.0) -> None:
        """Until every device answers again (health), without restarting the service."""
        deadline = time.monotonic() + timeout
        while (health := self.client.devices()).down:
            assert time.monotonic() < deadline, health
            time.sleep(0.2)


@contextlib.contextmanager
def serving(
    topo: Topology, fab: Fabric, into: Path, timeout_s: float | None = None
) -> Iterator[Service]:
    """``reroute serve`` on the fabric's inventory (``timeout_s``: every device's
    ``timeout_s`` in it, the longest wait for one answer, instead of its kind's default)."""
    inventory = fab.state.inventory
    if timeout_s is not None:
        inventory = with_timeouts(inventory, into / "inventory.yaml", timeout_s)
    config = into / "serve.yaml"
    config.write_text(
        f"topology: {topo.file}\ninventory: {inventory}\n"
        f"journal: {into / 'journal.sqlite'}\n"
        f"tokens: [{{token: {OPERATOR}, role: operator}}]\nstep_timeout_s: 5\n"
    )
    serve = ServeProcess(config)
    try:
        yield Service(topo, fab, serve, serve.client(), inventory)
    finally:
        assert serve.stop() == 0


def with_timeouts(inventory: Path, to: Path, timeout_s: float) -> Path:
    """A copy of ``inventory`` at ``to`` with every device's ``timeout_s`` set (its paths
    are absolute: the fabric writes them so)."""
    doc = yaml.safe_load(inventory.read_text())
    for entry in doc["devices"].values():
        entry["timeout_s"] = timeout_s
    to.write_text(yaml.safe_dump(doc, sort_keys=False))
    return to


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """Process ``pid`` stopped for the block (SIGSTOP), then continued."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def cut_off(port: int) -> Iterator[None]:
    """Every packet to and from loopback TCP ``port`` dropped for the block (iptables on
    ``lo``): connections stay open, nothing arrives, nothing is refused; then the rules are
    deleted (they carry a comment naming this harness)."""
    rules = [["--dport", str(port)], ["--sport", str(port)]]
    mark = ["-m", "comment", "--comment", "reroute-test-cut-off"]
    added = []
    try:
        for rule in rules:
            spec = ["INPUT", "-i", "lo", "-p", "tcp", *rule, *mark, "-j", "DROP"]
            subprocess.run(["iptables", "-I", *spec], check=True)
            added.append(spec)
        yield
    finally:
        for spec in added:
            subprocess.run(["iptables", "-D", *spec], check=True)


def pid_of(fab: Fabric, daemon: str) -> int:
    """The pid of one of the fabric's daemons (``ost1``, ``p4rt-br1``, ``ryu``...)."""
    return int((fab.state.dir / f"{daemon}.pid").read_text().strip())
