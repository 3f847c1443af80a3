"""How a path is written into flow tables: per-path VLAN tags (two-phase consistent update).

For a path P with tag t (1 + its index in the topology file) and a flow F on it:

- **ingress** (first bridge, per flow):  in_port=host, ip, F's fields -> push_vlan:t, output
- **transit** (per path, not per flow):  in_port, vlan=t, ip -> output
- **egress** (last bridge, per path):    in_port, vlan=t, ip -> pop_vlan, output:host

Because transit rules match the tag, two paths never disturb each other even where they
enter the same bridge on the same port, every packet follows exactly one path version, and
moving N flows rewrites N ingress rules plus a handful of transit rules. The reverse
direction of a path uses the same tag over the reversed hops. A one-bridge path has no tag.

Cookies carry the tag: ``OWNER << 48 | tag << 8 | role`` so a table reads back as state.

A deployment's ``CookieSpace`` is its namespace of cookies: OWNER (bits 48..63) is
``0x5252 ^ cookie_tag`` (``cookie_tag`` 0..255, an inventory setting; 0, the default, is
the cookies of every fabric and journal before it). Two deployments on one switch (a second
lab, a staging service) then each read the other's entries as another writer's
(``drivers.foreign``), never as theirs. The tag goes into OWNER rather than into bits
16..47 because the OpenFlow 1.0 reference dpctl carries only OWNER and bits 0..15 of a
cookie (``drivers.hp_dpctl.cookies``): every deployment's cookies still pass it. The
space's mask is OWNER's bits, so tag and role decode the same in every space.

An entry in our space whose path tag is no path of the topology (0, or beyond the last)
is a ``PlanError`` naming the device and the cookie (``path_named``): never another path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from drivers.base import ETH_IPV4, Action, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec
from services.reroute.model.topology import Hop, Path, Topology
from services.reroute.tables import Tables

INGRESS_PRIORITY = 200
TRANSIT_PRIORITY = 300
OWNER = 0x5252  # bits 48..63 of our cookies ("RR"), for cookie_tag 0
OWNER_SHIFT = 48
COOKIE_BASE = OWNER << OWNER_SHIFT  # the default space's (cookie_tag 0)
COOKIE_MASK = 0xFFFF << OWNER_SHIFT
MAX_COOKIE_TAG = 0xFF
ROLE_INGRESS = 1
ROLE_TRANSIT = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CookieSpace:
    """One deployment's cookies: ``base | tag << 8 | role`` under ``mask`` (module doc)."""

    tag: int = 0  # the inventory's cookie_tag

    def __post_init__(self) -> None:
        if not 0 <= self.tag <= MAX_COOKIE_TAG:
            raise ValueError(f"cookie_tag must be 0..{MAX_COOKIE_TAG}, not {self.tag}")

    @property
    def base(self) -> int:
        """The owner bits of every cookie of this space."""
        return (OWNER ^ self.tag) << OWNER_SHIFT

    @property
    def mask(self) -> int:
        """The bits that say whose a cookie is."""
        return COOKIE_MASK

    def ours(self, cookie: int) -> bool:
        """``cookie`` is in this space."""
        return cookie & COOKIE_MASK == self.base


DEFAULT_SPACE = CookieSpace()


def path_tag(topo: Topology, path: str) -> int:
    """The VLAN tag of ``path``: its 1-based position in the topology (PlanError if unknown)."""
    try:
        return 1 + list(topo.paths).index(path)
    except ValueError:
        known = ", ".join(topo.paths)
        raise PlanError(f"topology {topo.name} has no path {path!r} (paths: {known})") from None


def cookie(tag: int, role: int, space: CookieSpace = DEFAULT_SPACE) -> int:
    """The cookie of our rules for path ``tag`` in ``role``."""
    return space.base | tag << 8 | role


def tag_of(rule: FlowRule, space: CookieSpace = DEFAULT_SPACE) -> int | None:
    """The path tag a rule belongs to, from its cookie (None: not ours)."""
    if not space.ours(rule.cookie):
        return None
    return rule.cookie >> 8 & 0xFFFF


def path_named(topo: Topology, tag: int, device: str, cookie_: int) -> str:
    """The path of ``tag``, read from ``cookie_`` on ``device``: PlanError when the
    topology has no such path (tag 0, or beyond its last path)."""
    names = list(topo.paths)
    if 1 <= tag <= len(names):
        return names[tag - 1]
    raise PlanError(
        f"{device}: an entry with our cookie {cookie_:#x} names path tag {tag}, but topology "
        f"{topo.name} has paths 1..{len(names)} only: it was written for another topology, "
        "or by another deployment with the same cookie_tag; remove it from the device "
        "(or give that deployment its own cookie_tag)"
    )


_COOKIE = attrgetter("cookie")


def check_tags(
    topo: Topology,
    tables: Tables,
    space: CookieSpace = DEFAULT_SPACE,
) -> None:
    """PlanError naming the device and cookie of the first rule of ``tables`` in ``space``
    whose tag is no path of ``topo`` (distinct cookies only: 100,000s of rules)."""
    for device, table in tables.items():
        for c in _ours(set(map(_COOKIE, table.values())), space):
            path_named(topo, c >> 8 & 0xFFFF, device, c)


def _ours(cookies: Iterable[int], space: CookieSpace) -> list[int]:
    return sorted(c for c in cookies if space.ours(c))


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


def ingress_rule(
    hops: tuple[Hop, ...], tag: int, flow: FlowSpec, space: CookieSpace = DEFAULT_SPACE
) -> FlowRule:
    """The ingress rule sending ``flow`` onto the path of ``hops`` tagged ``tag``."""
    return retag(ingress_match(hops, flow), ingress_actions(hops, tag), tag, space)


def retag(
    match: FlowMatch,
    actions: tuple[Action, ...],
    tag: int,
    space: CookieSpace = DEFAULT_SPACE,
) -> FlowRule:
    """The ingress rule putting ``match`` on the path of ``tag`` (``actions`` from that path)."""
    return FlowRule(
        match=match,
        priority=INGRESS_PRIORITY,
        actions=actions,
        cookie=cookie(tag, ROLE_INGRESS, space),
    )


def transit_rules(
    hops: tuple[Hop, ...], tag: int, space: CookieSpace = DEFAULT_SPACE
) -> list[tuple[str, FlowRule]]:
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
                    cookie=cookie(tag, ROLE_TRANSIT, space),
                ),
            )
        )
    return rules


def host_flow(path: Path) -> FlowSpec:
    """The default flow of a path: all IPv4 from its src host to its dst host."""
    return FlowSpec(src=Prefix.parse(str(path.src_ip)), dst=Prefix.parse(str(path.dst_ip)))


def path_rules(
    topo: Topology, path: Path, flows: list[FlowSpec], space: CookieSpace = DEFAULT_SPACE
) -> dict[str, list[FlowRule]]:
    """Every rule that puts ``flows`` (forward; reverse implied) on ``path``, by bridge."""
    tag = path_tag(topo, path.name)
    out: dict[str, list[FlowRule]] = {}
    for d in directions(path):
        for bridge, rule in transit_rules(d.hops, tag, space):
            out.setdefault(bridge, []).append(rule)
        for flow in flows:
            spec = flow if d.forward else flow.reverse()
            out.setdefault(d.hops[0].node, []).append(ingress_rule(d.hops, tag, spec, space))
    return out


def initial_rules(topo: Topology, space: CookieSpace = DEFAULT_SPACE) -> dict[str, list[FlowRule]]:
    """The rules of every ``initial`` path's host-to-host flow: a fabric's starting tables."""
    out: dict[str, list[FlowRule]] = {}
    for path in topo.paths.values():
        if path.initial:
            for bridge, rules in path_rules(topo, path, [host_flow(path)], space).items():
                out.setdefault(bridge, []).extend(rules)
    return out
