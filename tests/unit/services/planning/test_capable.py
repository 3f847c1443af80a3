"""Plans fitted to what devices declare (``planning.capable``), through the engine on fake
devices: an optical MBB whose lock ports are on switches without port state waits on the
optical switch's power monitors, and is refused before anything moves when it has none."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from drivers.base import Capabilities
from services.reroute.engine import plan_on_devices, reroute
from services.reroute.errors import PlanError
from services.reroute.executor import Driver
from services.reroute.journal import Journal, RerouteState
from services.reroute.model import FlowSpec, Intent
from services.reroute.planning.electronic import initial_optics
from services.reroute.planning.plan import StepKind
from services.reroute.topology import Topology, load_topology
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


def test_a_lock_on_switches_without_port_state_waits_on_the_optical_power(
    tmp_path: Path,
) -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, POLATIS)
    plan = asyncio.run(plan_on_devices(topo, drivers(fake, ost), MBB))
    (lock,) = [s for s in plan.steps() if s.kind is StepKind.AWAIT_LOCK]
    assert lock.ports and {d for d, _ in lock.ports} == {"ost1"}
    journal = Journal(tmp_path / "journal.db")
    _, outcome = asyncio.run(reroute(topo, drivers(fake, ost), journal, MBB))
    journal.close()
    assert outcome.state is RerouteState.DONE, outcome.describe()


def test_no_signal_for_the_lock_refuses_the_plan_before_the_circuit_switches(
    tmp_path: Path,
) -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, I_OST)
    before, circuits = fake.snapshot(), dict(ost.table)
    journal = Journal(tmp_path / "journal.db")
    with pytest.raises(PlanError) as info:
        asyncio.run(reroute(topo, drivers(fake, ost), journal, MBB))
    assert "nothing changed" in str(info.value) and "ost1" in str(info.value)
    assert "no port state" in str(info.value) and "power monitors" in str(info.value)
    assert ost.changes == 0 and ost.table == circuits and fake.snapshot() == before
    assert journal.history() == []
    journal.close()


def test_switches_that_report_port_state_keep_their_ports_as_the_signal() -> None:
    topo = load_topology(TOPO)
    fake, ost = devices(topo, I_OST)  # the optical switch's monitors are not needed
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
