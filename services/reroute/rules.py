"""How a path is written into flow tables: per-path VLAN tags (two-phase consistent update).

For a path P with tag t (1 + its index in the topology file) and a flow F on it:

- **ingress** (first bridge, per flow):  in_port=host, ip, F's fields -> push_vlan:t, output
- **transit** (per path, not per flow):  in_port, vlan=t, ip -> output
- **egress** (last bridge, per path):    in_port, vlan=t, ip -> pop_vlan, output:host

Because transit rules match the tag, two paths never disturb each other even where they
enter the same bridge on the same port, every packet follows exactly one path version, and
moving N flows rewrites N ingress rules plus a handful of transit rules. The reverse
direction of a path uses the same tag over the reversed hops. A one-bridge path has no tag.

Cookies carry the tag: ``COOKIE_BASE | tag << 8 | role`` so a table reads back as state.
"""

from __future__ import annotations

from dataclasses import dataclass

from drivers.base import ETH_IPV4, Action, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from services.reroute.errors import PlanError
from services.reroute.model import FlowSpec
from services.reroute.topology import Hop, Path, Topology

INGRESS_PRIORITY = 200
TRANSIT_PRIORITY = 300
COOKIE_BASE = 0x5252_0000_0000_0000
COOKIE_MASK = 0xFFFF_0000_0000_0000
ROLE_INGRESS = 1
ROLE_TRANSIT = 2


def path_tag(topo: Topology, path: str) -> int:
    """The VLAN tag of ``path``: its 1-based position in the topology (PlanError if unknown)."""
    try:
        return 1 + list(topo.paths).index(path)
    except ValueError:
        known = ", ".join(topo.paths)
        raise PlanError(f"topology {topo.name} has no path {path!r} (paths: {known})") from None


def cookie(tag: int, role: int) -> int:
    """The cookie of our rules for path ``tag`` in ``role``."""
    return COOKIE_BASE | tag << 8 | role


def tag_of(rule: FlowRule) -> int | None:
    """The path tag a rule belongs to, from its cookie (None: not ours)."""
    if rule.cookie & COOKIE_MASK != COOKIE_BASE:
        return None
    return rule.cookie >> 8 & 0xFFFF


@dataclass(frozen=True, slots=True, kw_only=True)
class Direction:
    """One direction of a path: its hops and the flow as it travels that way."""

    hops: tuple[Hop, ...]
    forward: bool


def directions(path: Path) -> tuple[Direction, Direction]:
    """The forward and reverse directions of ``path``."""
    return Direction(hops=path.hops, forward=True), Direction(hops=path.reverse_hops, forward=False)


def ingress_match(hops: tuple[Hop, ...], flow: FlowSpec) -> FlowMatch:
    """The match of ``flow`` entering at the first hop of ``hops``."""
    return FlowMatch(
        in_port=hops[0].in_port,
        eth_type=ETH_IPV4,
        ipv4_src=flow.src,
        ipv4_dst=flow.dst,
        ip_proto=flow.ip_proto,
        l4_src=flow.l4_src,
        l4_dst=flow.l4_dst,
    )


def ingress_actions(hops: tuple[Hop, ...], tag: int) -> tuple[Action, ...]:
    """Tag for the path and send out of the first hop (no tag on a one-switch path)."""
    out = Output(hops[0].out_port)
    return (PushVlan(tag), out) if len(hops) > 1 else (out,)


def ingress_rule(hops: tuple[Hop, ...], tag: int, flow: FlowSpec) -> FlowRule:
    """The ingress rule sending ``flow`` onto the path of ``hops`` tagged ``tag``."""
    return retag(ingress_match(hops, flow), ingress_actions(hops, tag), tag)


def retag(match: FlowMatch, actions: tuple[Action, ...], tag: int) -> FlowRule:
    """The ingress rule putting ``match`` on the path of ``tag`` (``actions`` from that path)."""
    return FlowRule(
        match=match, priority=INGRESS_PRIORITY, actions=actions, cookie=cookie(tag, ROLE_INGRESS)
    )


def transit_rules(hops: tuple[Hop, ...], tag: int) -> list[tuple[str, FlowRule]]:
    """(bridge, rule) for every hop after the first, last hop popping the tag."""
    rules = []
    for i, hop in enumerate(hops[1:], start=1):
        last = i == len(hops) - 1
        pop: tuple[PopVlan, ...] = (PopVlan(),) if last else ()
        rules.append(
            (
                hop.node,
                FlowRule(
                    match=FlowMatch(in_port=hop.in_port, eth_type=ETH_IPV4, vlan_vid=tag),
                    priority=TRANSIT_PRIORITY,
                    actions=(*pop, Output(hop.out_port)),
                    cookie=cookie(tag, ROLE_TRANSIT),
                ),
            )
        )
    return rules


def host_flow(path: Path) -> FlowSpec:
    """The default flow of a path: all IPv4 from its src host to its dst host."""
    return FlowSpec(src=Prefix.parse(str(path.src_ip)), dst=Prefix.parse(str(path.dst_ip)))


def path_rules(topo: Topology, path: Path, flows: list[FlowSpec]) -> dict[str, list[FlowRule]]:
    """Every rule that puts ``flows`` (forward; reverse implied) on ``path``, by bridge."""
    tag = path_tag(topo, path.name)
    out: dict[str, list[FlowRule]] = {}
    for d in directions(path):
        for bridge, rule in transit_rules(d.hops, tag):
            out.setdefault(bridge, []).append(rule)
        for flow in flows:
            spec = flow if d.forward else flow.reverse()
            out.setdefault(d.hops[0].node, []).append(ingress_rule(d.hops, tag, spec))
    return out


def initial_rules(topo: Topology) -> dict[str, list[FlowRule]]:
    """The rules of every ``initial`` path's host-to-host flow: a fabric's starting tables."""
    out: dict[str, list[FlowRule]] = {}
    for path in topo.paths.values():
        if path.initial:
            for bridge, rules in path_rules(topo, path, [host_flow(path)]).items():
                out.setdefault(bridge, []).extend(rules)
    return out
