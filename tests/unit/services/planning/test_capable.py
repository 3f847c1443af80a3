"""Plans fitted to what devices declare (``planning.capable``), through the engine on fake
devices: an optical MBB waits on the receiving switches' port state; where they report
none it is refused before anything moves, whether or not the optical switch has power
monitors (light arriving is not the transceivers' lock)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from drivers.base import Capabilities
from services.reroute.engine.engine import plan_on_devices, reroute
from services.reroute.engine.executor import Driver
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning.electronic import initial_optics
from services.reroute.planning.plan import StepKind
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.fakes import POLATIS, FakeFabric, FakeOptical

TOPO = Path(__file__).resolve().parents[4] / "topologies" / "ngncs-ost.yaml"
MBB = Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="short", via="temporary",
             lock_timeout_s=1.0)  # fmt: skip
I_OST = dataclasses.replace(POLATIS, port_state=False, optical_power=False)


def devices(topo: Topology, optical: Capabilities) -> tuple[FakeFabric, FakeOptical]:
    """Packet switches without port state (P4Runtime without ``ports``), and ost1."""
    circuits = {c.ingress: c.egress for c in initial_optics(topo)}
    return FakeFabric(topo), FakeOptical("ost1", circuits, caps=optical)


def drivers(fake: FakeFabric, ost: FakeOptical) -> dict[str, Driver]:
    return {**fake.switches, "ost1": ost}  # type: ignore[dict-item]


@pytest.mark.parametrize("optical", [POLATIS, I_OST], ids=["power monitors", "none"])
def test_no_port_state_for_the_lock_refuses_the_plan_before_the_circuit_switches(
    tmp_path: Path, optical: Capabilities
) -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, optical)
    before, circuits = fake.snapshot(), dict(ost.table)
    journal = Journal(tmp_path / "journal.db")
    with pytest.raises(PlanError) as info:
        asyncio.run(reroute(topo, drivers(fake, ost), journal, MBB))
    said = str(info.value)
    assert "nothing changed" in said and "no port state" in said and "gnmi" in said, said
    assert ost.changes == 0 and ost.table == circuits and fake.snapshot() == before
    assert journal.history() == []
    journal.close()


def test_switches_that_report_port_state_gate_the_lock_on_their_ports() -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, POLATIS)  # monitors there, and still not the lock
    for switch in fake.switches.values():
        switch.capabilities = dataclasses.replace(switch.capabilities, port_state=True)
    plan = asyncio.run(plan_on_devices(topo, drivers(fake, ost), MBB))
    (lock,) = [s for s in plan.steps() if s.kind is StepKind.AWAIT_LOCK]
    assert lock.ports and all(d.startswith("br") for d, _ in lock.ports)


def test_a_switch_without_read_back_cannot_take_part() -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, POLATIS)
    for switch in fake.switches.values():
        switch.capabilities = dataclasses.replace(switch.capabilities, read_back=False)
    with pytest.raises(PlanError, match="read-back"):
        asyncio.run(plan_on_devices(topo, drivers(fake, ost), MBB))
