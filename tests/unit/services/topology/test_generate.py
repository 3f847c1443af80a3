"""``reroute topo generate leaf-spine``: the file validates, and an MBB of many flows over it
plans hitless (spine to spine, and onto an OCS circuit that needs reconfiguring)."""

from __future__ import annotations

import pytest

from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import NodeKind, parse_topology
from services.reroute.planning import plan
from services.reroute.planning.plan import Disruption, StepKind
from services.reroute.rules import initial_rules, path_rules
from services.reroute.tables import tables_from


def test_a_generated_leaf_spine_validates_with_its_sizes() -> None:
    topo = parse_topology(to_yaml(leaf_spine(8, 3, 2)))
    kinds = [n.kind for n in topo.nodes.values()]
    counts = [kinds.count(k) for k in (NodeKind.HOST, NodeKind.OVS, NodeKind.OPTICAL)]
    assert counts == [8, 11, 2]
    assert len(topo.links) == 8 + 8 * 3 + 8 * 2
    assert len(topo.paths) == 4 * (3 + 2)
    assert [p.name for p in topo.paths.values() if p.initial] == [
        "r1-2-s1", "r3-4-s1", "r5-6-s1", "r7-8-s1",
    ]  # fmt: skip
    o2 = topo.paths["r1-2-o2"]
    assert [h.node for h in o2.hops] == ["leaf1", "leaf2"] and len(o2.circuits) == 2


@pytest.mark.parametrize(("racks", "spines", "ocs"), [(1, 1, 0), (3, 1, 1), (4, 0, 1)])
def test_impossible_sizes_are_refused(racks: int, spines: int, ocs: int) -> None:
    with pytest.raises(ValueError, match=r"racks|spines"):
        leaf_spine(racks, spines, ocs)


def test_an_mbb_of_thousands_of_flows_across_it_plans() -> None:
    topo = parse_topology(to_yaml(leaf_spine(4, 2, 2)))
    start = topo.paths["r1-2-s1"]
    flows = [
        FlowSpec.parse(f"{start.src_ip}>{start.dst_ip},udp,dport={1000 + i}") for i in range(2000)
    ]
    rules = initial_rules(topo)
    for bridge, extra in path_rules(topo, start, flows).items():
        rules.setdefault(bridge, []).extend(extra)
    tables = tables_from(rules)
    spine = plan(topo, tables, Intent(flows=tuple(flows), to_path="r1-2-s2"), now=0.0)
    shifts = [s for s in spine.steps() if s.kind is StepKind.SHIFT]
    assert sorted(len(s.changes) for s in shifts) == [2000, 2000]
    optical = plan(
        topo, tables, Intent(flows=tuple(flows), to_path="r1-2-o2", via="r1-2-s2"), now=0.0
    )
    assert optical.disruption is Disruption.HITLESS
    assert [s.kind for s in optical.steps()].count(StepKind.CIRCUITS) == 1
