"""Other writers' entries against a plan (``planning.foreign``) and through the engine: a
shadowing entry refuses the reroute with nothing changed; the entries labs have below our
priority (discovery traps, a table-miss) are no obstacle."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drivers.base import FlowMatch, FlowRule, ForeignEntry, Prefix
from services.reroute.engine.engine import plan_on_devices, reroute
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning.foreign import conflicts, overlaps, relied_on
from services.reroute.planning.plan import StepKind
from services.reroute.rules import (
    INGRESS_PRIORITY,
    TRANSIT_PRIORITY,
    directions,
    ingress_rule,
    path_tag,
    transit_rules,
)
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.fakes import FakeFabric

TOPO = Path(__file__).resolve().parents[4] / "topologies" / "ngncs-ost.yaml"
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
INTENT = Intent(flows=(FLOW,), to_path="temporary")
IP = 0x0800


def m(**fields: object) -> FlowMatch:
    return FlowMatch(**fields)  # type: ignore[arg-type]


def entry(priority: int, match: FlowMatch, *, table: int = 0, more: bool = False) -> ForeignEntry:
    return ForeignEntry(table=table, priority=priority, match=match, more=more, text=f"p{priority}")


@pytest.mark.parametrize(
    ("a", "b", "meet"),
    [
        (m(), m(in_port=1), True),
        (m(in_port=1), m(in_port=2), False),
        (m(eth_type=IP), m(eth_type=0x88CC), False),  # an LLDP trap never takes IPv4
        (m(eth_type=IP, ipv4_dst=Prefix.parse("10.0.0.3")), m(eth_type=IP), True),
        (m(ipv4_dst=Prefix.parse("10.0.0.0/24")), m(ipv4_dst=Prefix.parse("10.0.0.3")), True),
        (m(ipv4_dst=Prefix.parse("10.0.1.0/24")), m(ipv4_dst=Prefix.parse("10.0.0.3")), False),
        (m(ipv4_src=Prefix.parse("10.0.0.0/8")), m(ipv4_dst=Prefix.parse("192.0.2.1")), True),
        (m(vlan_vid=3), m(vlan_vid=4), False),
        (m(ip_proto=6, l4_dst=80), m(ip_proto=17, l4_dst=80), False),
    ],
)
def test_overlap_is_decided_field_by_field(a: FlowMatch, b: FlowMatch, meet: bool) -> None:
    assert overlaps(a, b) is meet
    assert overlaps(b, a) is meet


def _surveyed(fake: FakeFabric, device: str, *entries: ForeignEntry) -> None:
    fake.switches[device].foreign = list(entries)


def _plan_error(fake: FakeFabric) -> str:
    topo = load_topology(TOPO)
    with pytest.raises(PlanError) as info:
        asyncio.run(plan_on_devices(topo, fake.switches, INTENT))
    return str(info.value)


def test_a_shadowing_entry_refuses_the_plan_naming_device_and_entry() -> None:
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    plan = asyncio.run(plan_on_devices(topo, fake.switches, INTENT))
    device = next(s.device for s in plan.steps() if s.changes)
    trap = ForeignEntry(
        table=0, priority=INGRESS_PRIORITY + 100, match=m(eth_type=IP), more=True,
        text="table=0, priority=300, ip,dl_src=00:00:00:00:00:01 actions=output:CONTROLLER",
    )  # fmt: skip
    _surveyed(fake, device, trap)
    error = _plan_error(fake)
    assert device in error and trap.text in error and "nothing changed" in error


def test_equal_priority_overlap_is_refused_too() -> None:
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    plan = asyncio.run(plan_on_devices(topo, fake.switches, INTENT))
    step = next(s for s in plan.steps() if s.changes)
    rule = step.changes[0].rule
    same = entry(rule.priority, FlowMatch(in_port=rule.match.in_port))
    assert [c.entry for c in conflicts(plan, {step.device: [same]}, topo)] == [same]


def test_lab_entries_below_our_priority_or_elsewhere_are_no_obstacle(tmp_path: Path) -> None:
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    harmless = [
        entry(0, m()),  # table-miss NORMAL
        entry(65535, m(eth_type=0x88CC), more=True),  # LLDP trap (and dl_dst)
        entry(65535, m(eth_type=0x8942)),  # BDDP trap
        entry(INGRESS_PRIORITY - 1, m(eth_type=IP), more=True),  # l2switch's MAC flows
        entry(TRANSIT_PRIORITY + 1, m(), table=1),  # another table
        entry(5, m(), more=True),  # ofctl_rest's dl_dst trap of the issue
    ]
    for switch in fake.switches.values():
        switch.foreign = list(harmless)
    before = fake.snapshot()
    journal = Journal(tmp_path / "journal.db")
    _, outcome = asyncio.run(reroute(topo, fake.switches, journal, INTENT))
    journal.close()
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert fake.snapshot() != before


def test_a_refused_reroute_changes_nothing(tmp_path: Path) -> None:
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    plan = asyncio.run(plan_on_devices(topo, fake.switches, INTENT))
    device = plan.steps()[0].device
    _surveyed(fake, device, entry(TRANSIT_PRIORITY, m(eth_type=IP)))
    before = fake.snapshot()
    journal = Journal(tmp_path / "journal.db")
    with pytest.raises(PlanError, match=device):
        asyncio.run(reroute(topo, fake.switches, journal, INTENT))
    assert fake.snapshot() == before
    assert all(s.applied == 0 for s in fake.switches.values())
    assert journal.history() == []
    journal.close()


def test_an_entry_over_a_transit_rule_already_there_refuses_the_plan() -> None:
    """The new path's transit rules are on the devices already (another flow uses them):
    the plan writes none of them, yet its traffic meets them, and a drop above one of them
    on br1 would swallow it after a "done"."""
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    for d in directions(topo.paths["temporary"]):
        for bridge, rule in transit_rules(d.hops, path_tag(topo, "temporary")):
            fake.switches[bridge].table[rule.key] = rule
    plan = asyncio.run(plan_on_devices(topo, fake.switches, INTENT))
    writes = [s for s in plan.steps() if s.kind in (StepKind.INSTALL, StepKind.SHIFT)]
    assert writes and not any(s.device == "br1" for s in writes)  # nothing written there
    drop = ForeignEntry(table=0, priority=500, match=m(in_port=4, eth_type=IP), more=False,
                        text="priority=500,ip,in_port=4 actions=drop")  # fmt: skip
    _surveyed(fake, "br1", drop)
    error = _plan_error(fake)
    assert "br1" in error and drop.text in error and "vlan_vid=3" in error, error


def test_the_rules_relied_on_are_the_paths_rules_of_the_moved_flows_where_asked() -> None:
    topo = load_topology(TOPO)
    plan = asyncio.run(plan_on_devices(topo, FakeFabric(topo).switches, INTENT))
    tag = path_tag(topo, "temporary")
    there: dict[str, list[FlowRule]] = {b: [] for b in ("br1", "br2", "br3", "br4")}
    for d in directions(topo.paths["temporary"]):
        for bridge, rule in transit_rules(d.hops, tag):
            there[bridge].append(rule)
        there[d.hops[0].node].append(
            ingress_rule(d.hops, tag, FLOW if d.forward else FLOW.reverse())
        )
    relied = relied_on(plan, topo)
    assert {b: set(rs) for b, rs in relied.items()} == {b: set(rs) for b, rs in there.items()}
    assert relied_on(plan, topo, where={"br1"}) == {"br1": relied["br1"]}
