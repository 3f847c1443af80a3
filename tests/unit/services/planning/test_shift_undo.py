"""The undo of a shift puts back exactly the rules it replaces, also when the optical swap
reuses the park's changes for it (no new objects for 100,000s of flows)."""

from __future__ import annotations

from drivers.base import FlowChange, FlowOp
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, parse_topology
from services.reroute.planning import plan
from services.reroute.planning.electronic import plan_electronic
from services.reroute.planning.optical import _after
from services.reroute.planning.plan import Plan, StepKind
from services.reroute.rules import initial_rules, path_rules
from services.reroute.tables import Tables, tables_from


def _fabric(n: int) -> tuple[Topology, Tables, tuple[FlowSpec, ...]]:
    topo = parse_topology(to_yaml(leaf_spine(4, 2, 2)))
    start = topo.paths["r1-2-s1"]
    flows = tuple(
        FlowSpec.parse(f"{start.src_ip}>{start.dst_ip},udp,dport={100 + i}") for i in range(n)
    )
    rules = initial_rules(topo)
    for bridge, extra in path_rules(topo, start, list(flows)).items():
        rules.setdefault(bridge, []).extend(extra)
    return topo, tables_from(rules), flows


def _shifts(p: Plan) -> dict[str, tuple[FlowChange, ...]]:
    return {s.device: s.undo for s in p.steps() if s.kind is StepKind.SHIFT}


def test_the_swap_undo_puts_the_parked_rules_back() -> None:
    topo, tables, flows = _fabric(50)
    optical = plan(topo, tables, Intent(flows=flows, to_path="r1-2-o2", via="r1-2-s2"), now=0.0)
    park = plan_electronic(topo, tables, Intent(flows=flows, to_path="r1-2-s2"), 0.0,
                           partial_ok=True)  # fmt: skip
    parked = _after(tables, park)
    swap_steps = [s for p in optical.phases if p.name == "swap-shift" for s in p.steps]
    assert {s.device for s in swap_steps} == {"leaf1", "leaf2"}
    for step in swap_steps:
        undo = [(c.op, c.rule) for c in step.undo]
        olds = [parked[step.device][c.rule.key] for c in step.changes]
        assert undo == [(FlowOp.ADD, r) for r in olds]
        assert all(r.cookie != c.rule.cookie for r, c in zip(olds, step.changes, strict=True))


def test_changes_of_other_rules_are_not_taken_for_the_undo() -> None:
    topo, tables, flows = _fabric(20)
    intent = Intent(flows=flows, to_path="r1-2-s2")
    other = plan_electronic(topo, tables, Intent(flows=flows[:10], to_path="r1-2-s2"), 0.0,
                            partial_ok=True)  # fmt: skip
    made = {s.device: s.changes for s in other.steps() if s.kind is StepKind.SHIFT}
    plain = _shifts(plan_electronic(topo, tables, intent, 0.0, partial_ok=True))
    given = _shifts(plan_electronic(topo, tables, intent, 0.0, partial_ok=True, made=made))
    assert given == plain
    assert all(len(u) == 20 and u is not made[b] for b, u in given.items())
