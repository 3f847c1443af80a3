"""Baseline forwarding: the flows that make the initial paths work when a fabric comes up.

Flows are computed here (pure) and pushed by the fabric with one ``ovs-ofctl --bundle``
per bridge. Optical switches and long-haul nodes are, for now, static L1 patch panels:
OVS bridges with in_port -> output rules for each cross-connect.
"""

from __future__ import annotations

from services.reroute.topology import LongHaul, OpticalSwitch, Path, Topology

BASELINE_COOKIE = 0x1
BASELINE_PRIORITY = 100


def path_flows(path: Path) -> dict[str, list[str]]:
    """ovs-ofctl flow lines for both directions of a path, by bridge."""
    flows: dict[str, list[str]] = {}
    for hops, src, dst in (
        (path.hops, path.src_ip, path.dst_ip),
        (path.reverse_hops, path.dst_ip, path.src_ip),
    ):
        for hop in hops:
            flows.setdefault(hop.node, []).append(
                f"cookie={BASELINE_COOKIE:#x},priority={BASELINE_PRIORITY},ip,"
                f"in_port={hop.in_port},nw_src={src},nw_dst={dst},actions=output:{hop.out_port}"
            )
    return flows


def patch_flows(topo: Topology) -> dict[str, list[str]]:
    """The L1 patches of optical switches (their cross-connects) and long-haul nodes."""
    flows: dict[str, list[str]] = {}
    for node in topo.nodes.values():
        if isinstance(node, OpticalSwitch):
            for c in sorted(node.cross_connects):
                out = node.ingress_of(c.egress)
                if c.ingress in node.attachments and out in node.attachments:
                    flows.setdefault(node.name, []).append(
                        f"priority={BASELINE_PRIORITY},in_port={c.ingress},actions=output:{out}"
                    )
        elif isinstance(node, LongHaul):
            flows[node.name] = [
                f"priority={BASELINE_PRIORITY},in_port=1,actions=output:2",
                f"priority={BASELINE_PRIORITY},in_port=2,actions=output:1",
            ]
    return flows


def baseline_flows(topo: Topology) -> dict[str, list[str]]:
    flows = patch_flows(topo)
    for path in topo.paths.values():
        if path.initial:
            for bridge, lines in path_flows(path).items():
                flows.setdefault(bridge, []).extend(lines)
    return flows
