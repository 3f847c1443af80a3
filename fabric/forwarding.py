"""Baseline forwarding: the flows that make the initial paths work when a fabric comes up.

The initial paths are written with the engine's own rules (``services.reroute.rules``), so
the engine can move the flows the fabric starts with. Flows are computed here (pure) and
pushed with one ``ovs-ofctl --bundle`` per bridge. Optical switches and long-haul nodes
are OVS patch bridges driven by the emulator of their driver kind (``fabric.kinds``); long-haul
nodes are userspace delay lines (``fabric.longhaul``).
"""

from __future__ import annotations

from collections.abc import Iterable

from drivers.base import FlowRule, Output, PopVlan, PushVlan
from services.reroute.model.topology import OpticalSwitch, Topology
from services.reroute.rules import initial_rules

PATCH_PRIORITY = 100


def ofctl_line(rule: FlowRule) -> str:
    """A rule in ``ovs-ofctl add-flow`` syntax."""
    m = rule.match
    fields = [f"cookie={rule.cookie:#x}", f"table={rule.table}", f"priority={rule.priority}"]
    for name, value in (
        ("in_port", m.in_port),
        ("dl_type", None if m.eth_type is None else f"{m.eth_type:#06x}"),
        ("dl_vlan", m.vlan_vid),
        ("nw_src", m.ipv4_src),
        ("nw_dst", m.ipv4_dst),
        ("nw_proto", m.ip_proto),
        ("tp_src", m.l4_src),
        ("tp_dst", m.l4_dst),
    ):
        if value is not None:
            fields.append(f"{name}={value}")
    actions = []
    for a in rule.actions:
        if isinstance(a, PushVlan):
            actions += ["push_vlan:0x8100", f"set_field:{0x1000 | a.vid}->vlan_vid"]
        elif isinstance(a, PopVlan):
            actions.append("pop_vlan")
        elif isinstance(a, Output):
            actions.append(f"output:{a.port}")
    return ",".join(fields) + ",actions=" + (",".join(actions) or "drop")


def patch_flows(topo: Topology) -> dict[str, list[str]]:
    """The L1 patches of optical switches (their initial cross-connects). Long-haul nodes are
    delay lines (``fabric.longhaul``), not bridges."""
    flows: dict[str, list[str]] = {}
    for node in topo.nodes.values():
        if isinstance(node, OpticalSwitch):
            pairs = sorted((c.ingress, c.egress) for c in node.cross_connects)
            if lines := patch_lines(node, pairs):
                flows[node.name] = lines
    return flows


def patch_lines(node: OpticalSwitch, pairs: Iterable[tuple[int, int]]) -> list[str]:
    """The patch flows of an optical switch's (ingress, egress) cross-connects."""
    lines = []
    for ingress, egress in pairs:
        out = node.ingress_of(egress)
        if ingress in node.attachments and out in node.attachments:
            lines.append(f"priority={PATCH_PRIORITY},in_port={ingress},actions=output:{out}")
    return lines


def baseline_flows(topo: Topology) -> dict[str, list[str]]:
    """Patch panels plus the engine's rules for each initial path's host-to-host flow."""
    flows = patch_flows(topo)
    for bridge, rules in initial_rules(topo).items():
        flows.setdefault(bridge, []).extend(ofctl_line(r) for r in rules)
    return flows
