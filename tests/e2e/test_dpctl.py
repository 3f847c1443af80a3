"""Seed 003's optical make-before-break with its packet switches driven the "dpctl method"
through the OpenFlow 1.0 reference ``dpctl`` itself (``reroute fabric up --hp-tool dpctl``
on topologies/ngncs-ost-dpctl.yaml): where issue 22's first contact rolled back every
reroute. The flows move to the short path and back, with traffic, and are read back on the
switches as the switches hold them (folded cookies)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import yaml

from drivers.hp_dpctl import cookies
from fabric import state
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers, journal_path
from services.reroute.engine.engine import reroute
from services.reroute.engine.executor import Outcome
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.rules import ROLE_INGRESS, cookie, path_tag
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests import peers as need
from tests.e2e.conftest import RATE, ROOT, during, leftovers
from tests.e2e.conftest import reroute as reroute_cli

pytestmark = pytest.mark.fabric
NGNCS_DPCTL = ROOT / "topologies" / "ngncs-ost-dpctl.yaml"
NAME = "ngncs-ost-dpctl"
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")


@pytest.fixture
def dpctl_fabric() -> Iterator[Fabric]:
    dpctl = need.reference_dpctl()
    up = reroute_cli("fabric", "up", str(NGNCS_DPCTL), "--hp-tool", "dpctl", timeout=120)
    try:
        found = state.load(NAME)
        assert found is not None
        assert f"the OpenFlow 1.0 reference dpctl at {dpctl}" in up.stderr, up.stderr
        yield Fabric(state=found)
    finally:
        reroute_cli("fabric", "down", NAME)
    assert leftovers(NAME) == []


async def move(topo: Topology, fab: Fabric, to: str) -> Outcome:
    journal = Journal(journal_path(fab.state))
    try:
        async with fabric_drivers(topo, fab.state) as drivers:
            intent = Intent(flows=(FLOW,), to_path=to, via="temporary", drain_s=0.005)
            _, outcome = await reroute(topo, drivers, journal, intent)
        return outcome
    finally:
        journal.close()


def held_ingress(fab: Fabric, bridge: str) -> list[str]:
    """The vm2 -> vm3 ingress entries as the switch holds them (ovs-ofctl on its socket)."""
    table = fab.ovs.ofctl("-O", "OpenFlow10", "dump-flows", fab.ovs.mgmt(bridge))
    return [line for line in table.splitlines() if "nw_src=10.0.0.2" in line]


def folded(topo: Topology, path: str) -> str:
    """The cookie dpctl left on the switch for the ingress rule of ``path``."""
    wire = cookies.fold(cookie(path_tag(topo, path), ROLE_INGRESS))
    assert wire is not None and wire >= 0
    return f"cookie={wire:#x},"


def test_the_optical_mbb_through_the_reference_dpctl_moves_the_flows_and_back(
    dpctl_fabric: Fabric,
) -> None:
    topo = load_topology(NGNCS_DPCTL)
    inventory = yaml.safe_load(dpctl_fabric.state.inventory.read_text())["devices"]
    for bridge in ("br1", "br2", "br3", "br4"):
        assert inventory[bridge]["tool"] == "dpctl"
        assert inventory[bridge]["tool_path"] == str(need.reference_dpctl())
    check = reroute_cli("inventory", "check", "--topology", str(NGNCS_DPCTL))
    assert check.stdout.count("OpenFlow 1.0 switch via dpctl") == 4, check.stdout
    # the fabric wrote the baseline with ovs-ofctl (64-bit cookies): read back as written
    (baseline,) = held_ingress(dpctl_fabric, "br2")
    assert f"cookie={cookie(path_tag(topo, 'long'), ROLE_INGRESS):#x}," in baseline
    assert asyncio.run(ingress_tags(topo, dpctl_fabric)) == {path_tag(topo, "long")}

    outcomes: list[Outcome] = []

    async def to_short() -> None:
        outcomes.append(await move(topo, dpctl_fabric, "short"))

    report = during(dpctl_fabric, 3.0, to_short, at=0.8)
    (outcome,) = outcomes
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert report["sent"] >= RATE * 3 * 0.95
    assert report["lost"] == 0, report  # parked on the temporary path while ost1 locked
    short = held_ingress(dpctl_fabric, "br2")
    assert len(short) == 1 and folded(topo, "short") in short[0], short
    assert "mod_vlan_vid:4,output:2" in short[0]  # the short path's tag, out to ost1

    back = reroute_cli(
        "apply", "--topology", str(NGNCS_DPCTL), "--flow", str(FLOW), "--to", "long",
        "--via", "temporary", "--drain-ms", "5", timeout=60,
    )  # fmt: skip
    assert "done" in back.stdout.lower(), back.stdout
    long = held_ingress(dpctl_fabric, "br2")
    assert len(long) == 1 and folded(topo, "long") in long[0], long
    assert asyncio.run(ingress_tags(topo, dpctl_fabric)) == {path_tag(topo, "long")}


async def ingress_tags(topo: Topology, fab: Fabric) -> set[int]:
    """The path tags of the vm2 <-> vm3 ingress rules at br2 and br3, as the driver reads
    them back through dpctl (unfolded)."""
    async with fabric_drivers(topo, fab.state) as drivers:
        flows = await asyncio.gather(*(drivers[b].read() for b in ("br2", "br3")))  # type: ignore[attr-defined]
    return {
        r.cookie >> 8 & 0xFFFF
        for table in flows
        for r in table
        if r.cookie & 0xFF == ROLE_INGRESS and r.match.in_port == 1
    }
