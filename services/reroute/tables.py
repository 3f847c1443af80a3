"""Flow tables as values: apply changes, and ask "is this packet delivered?".

``Tables`` maps a bridge to its rules (keyed by (table, priority, match)). ``deliver``
walks a packet from a host through the topology, looking up the highest-priority matching
rule at each bridge, applying its actions, following links, optical cross-connects and
long-haul nodes, until it reaches a host (delivered if it is the destination and the
packet is untagged) or is dropped. Pure; used by the planner's property tests and by
dry runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from ipaddress import IPv4Address

from drivers.base import (
    ETH_IPV4,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    PopVlan,
    PushVlan,
)
from services.reroute.model.topology import (
    Circuit,
    Endpoint,
    Host,
    LongHaul,
    OpticalSwitch,
    Topology,
)

RuleKey = tuple[int, int, FlowMatch]
Tables = Mapping[str, Mapping[RuleKey, FlowRule]]


def tables_from(rules: Mapping[str, Iterable[FlowRule]]) -> dict[str, dict[RuleKey, FlowRule]]:
    """Rules by bridge as tables keyed by rule identity."""
    return {bridge: {r.key: r for r in rs} for bridge, rs in rules.items()}


def apply_changes(
    tables: Tables, bridge: str, changes: Iterable[FlowChange]
) -> dict[str, dict[RuleKey, FlowRule]]:
    """The tables after ``changes`` on ``bridge`` (ADD replaces the entry with the same key)."""
    out = {b: dict(t) for b, t in tables.items()}
    table = out.setdefault(bridge, {})
    for change in changes:
        if change.op is FlowOp.ADD:
            table[change.rule.key] = change.rule
        else:
            table.pop(change.rule.key, None)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Packet:
    src: IPv4Address
    dst: IPv4Address
    ip_proto: int = 17
    l4_src: int = 40000
    l4_dst: int = 5001
    vlan: int | None = None


def matches(m: FlowMatch, in_port: int, p: Packet) -> bool:
    """The match ``m`` accepts an IPv4 packet ``p`` arriving on ``in_port``."""
    return (
        (m.in_port is None or m.in_port == in_port)
        and (m.eth_type is None or m.eth_type == ETH_IPV4)
        and (m.vlan_vid is None or m.vlan_vid == p.vlan)
        and (m.ipv4_src is None or m.ipv4_src.contains(p.src))
        and (m.ipv4_dst is None or m.ipv4_dst.contains(p.dst))
        and (m.ip_proto is None or m.ip_proto == p.ip_proto)
        and (m.l4_src is None or m.l4_src == p.l4_src)
        and (m.l4_dst is None or m.l4_dst == p.l4_dst)
    )


def lookup(table: Mapping[RuleKey, FlowRule], in_port: int, p: Packet) -> FlowRule | None:
    """The highest-priority rule of ``table`` matching the packet, or None."""
    best: FlowRule | None = None
    for rule in table.values():
        if matches(rule.match, in_port, p) and (best is None or rule.priority > best.priority):
            best = rule
    return best


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    delivered: bool
    bridges: tuple[str, ...]
    reason: str


def deliver(
    topo: Topology,
    tables: Tables,
    src_host: str,
    packet: Packet,
    circuits: frozenset[Circuit] | None = None,
    max_hops: int = 64,
) -> Delivery:
    """Walk ``packet`` from ``src_host``; ``circuits`` default to the topology's initial ones."""
    if circuits is None:
        circuits = frozenset(c for o in topo.optical_switches for c in o.cross_connects)
    host = topo.nodes[src_host]
    assert isinstance(host, Host)
    at = topo.peer(Endpoint(node=src_host, port=host.interfaces[0].name))
    seen: list[str] = []
    while at is not None and len(seen) < max_hops:
        node = topo.nodes[at.node]
        if isinstance(node, Host):
            ok = packet.dst == node.address and packet.vlan is None
            why = "delivered" if ok else f"reached {node.name} (vlan {packet.vlan})"
            return Delivery(delivered=ok, bridges=tuple(seen), reason=why)
        if isinstance(node, LongHaul):
            at = topo.peer(Endpoint(node=node.name, port="p2" if at.port == "p1" else "p1"))
            continue
        if isinstance(node, OpticalSwitch):
            ingress = int(at.port[1:])
            egress = next(
                (c.egress for c in circuits if c.switch == node.name and c.ingress == ingress), None
            )
            if egress is None:
                return Delivery(delivered=False, bridges=tuple(seen), reason=f"dark at {at}")
            at = topo.peer(Endpoint(node=node.name, port=f"p{node.ingress_of(egress)}"))
            continue
        seen.append(node.name)
        rule = lookup(tables.get(node.name, {}), int(at.port[1:]), packet)
        if rule is None:
            return Delivery(delivered=False, bridges=tuple(seen), reason=f"no rule at {at}")
        out: int | None = None
        for action in rule.actions:
            if isinstance(action, PushVlan):
                packet = replace(packet, vlan=action.vid)
            elif isinstance(action, PopVlan):
                packet = replace(packet, vlan=None)
            elif isinstance(action, Output):
                out = action.port
        if out is None:
            return Delivery(delivered=False, bridges=tuple(seen), reason=f"dropped at {at}")
        at = topo.peer(Endpoint(node=node.name, port=f"p{out}"))
    return Delivery(delivered=False, bridges=tuple(seen), reason="loop or unlinked port")
