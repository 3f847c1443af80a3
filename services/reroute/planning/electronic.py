"""The electronic planner: flows move between electrical paths (``plan_electronic``).

Ordering policy (its phases' order and concurrency are rows of ``planning.order``; this
module computes their steps), make-before-break (MBB), for flows moving from path(s) P to
path Q:

  1. make     install Q's missing transit/egress rules, one atomic batch per bridge,
              listed downstream-first along the forward direction, run at once (they
              carry no traffic yet: only packets tagged for Q match them)
  2. verify   read those bridges back: every rule of Q present
  3. shift    rewrite the moved flows' ingress rules to tag for Q: one atomic batch at
              the forward ingress bridge, one at the reverse ingress bridge
  4. verify   read the ingress rules back
  5. drain    wait ``drain_s`` (default: P's one-way delay + 10 % + 5 ms, ``drain_for``)
              for packets still tagged for P, counted from when the shift's new rules
              have matched packets where the switches count them (a datapath that caches
              flows forwards by the old rules a while after the shift read back: OVS)
  6. clean    remove P's transit rules where no other flow still uses P, upstream-first

Every prefix of an MBB plan leaves every moved flow, in both directions, a complete path
(tested by walking the planned tables). Break-before-make (BBM) removes the ingress rules
first, optionally waits ``bbm_gap_s``, then makes Q and shifts; it declares ``OUTAGE``.

Each step carries its inverse (``undo``) computed from the tables it was planned on, so
the executor can roll back any prefix without reading the devices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter

from drivers.base import ETH_IPV4, FlowChange, FlowOp, FlowRule, Prefix, new_change, new_rule
from services.reroute.errors import PlanError, option
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.topology import Circuit, Path, Topology
from services.reroute.planning.order import Order
from services.reroute.planning.order import PhaseName as P
from services.reroute.planning.plan import Disruption, Plan, Step, StepKind, laid_out
from services.reroute.rules import (
    DEFAULT_SPACE,
    INGRESS_PRIORITY,
    ROLE_INGRESS,
    CookieSpace,
    Direction,
    check_tags,
    cookie,
    directions,
    ingress_actions,
    ingress_match,
    path_tag,
    tag_of,
    transit_rules,
)
from services.reroute.tables import RuleKey, Tables

DRAIN_MARGIN_S = 0.005  # beyond the old path's propagation delay: queues in the switches
DRAIN_JITTER = 0.1  # and this share of the delay (a long-haul line's delay varies)


def drain_for(paths: Iterable[Path]) -> float:
    """How long packets already sent on ``paths`` may still be on their way: the longest
    one-way delay, plus a share of it and a margin. What an MBB waits after the shift
    before it removes the old path's rules or cuts its circuit."""
    delay_s = max((p.delay_ms for p in paths), default=0.0) / 1000
    return delay_s * (1 + DRAIN_JITTER) + DRAIN_MARGIN_S


def _drain(intent: Intent, old: Iterable[Path], seen_on: Iterable[tuple[str, int]]) -> list[Step]:
    """The drain; one that waits at all also waits for the rules the shift added
    (``seen_on``: ingress bridge, cookie) to count packets (``engine.drain.quiet``)."""
    duration = intent.drain_s if intent.drain_s is not None else drain_for(old)
    seen = tuple(sorted(set(seen_on))) if duration > 0 else ()
    return [Step(kind=StepKind.DRAIN, duration_s=duration, seen_on=seen)]


def initial_optics(topo: Topology) -> frozenset[Circuit]:
    """The circuits the topology's optical switches start with."""
    return frozenset(c for o in topo.optical_switches for c in o.cross_connects)


def plan_electronic(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    *,
    partial_ok: bool,
    scope: frozenset[str] | None = None,
    made: Mapping[str, tuple[FlowChange, ...]] = {},
    space: CookieSpace = DEFAULT_SPACE,
) -> Plan:
    """``made``: changes an earlier plan writes, by bridge (the optical swap's old rules are
    the park's new ones): where they add exactly the rules this shift undoes to, its undo
    is that tuple, not 100,000s of new ``FlowChange`` objects. ``space``: the deployment's
    cookies (``rules.CookieSpace``); a rule of ``tables`` in it whose tag is no path of
    ``topo`` is a PlanError naming its device and cookie."""
    if not intent.flows:
        raise PlanError(f"no flows to move: name at least one in {option('flows')}")
    if intent.to_path not in topo.paths:
        path_tag(topo, intent.to_path)  # raises the PlanError listing the paths
    check_tags(topo, tables, space)
    to = topo.paths[intent.to_path]
    tag = path_tag(topo, to.name)
    names = list(topo.paths)
    old_rules, origin_tags = _current_ingress(to, tables, intent.flows, scope, space)
    from_tags = sorted({c >> 8 & 0xFFFF for rs in old_rules.values() for c in _cookies(rs)})
    if from_tags == [tag]:
        raise PlanError(f"the flows are already on path {to.name}")
    if tag in from_tags and not partial_ok:
        raise PlanError(
            f"some flows are already on path {to.name}: move the others alone (leave those "
            f"out of {option('flows')})"
        )
    mine = cookie(tag, ROLE_INGRESS, space)
    moving = {b: [r for r in rs if r.cookie != mine] for b, rs in old_rules.items()}
    make = _make_steps(to, tag, tables, scope, space)
    shift = _shift_steps(to, tag, moving, made, space)
    gone = [t for t in from_tags if t != tag]
    old_paths = [topo.paths[names[t - 1]] for t in gone]
    clean = _clean_steps(topo, tables, gone, old_rules, space) if scope is None else []
    make_verify = _verify_make(to, tag, scope, space)
    shift_verify = [_verify(s) for s in shift]
    verify = make_verify + shift_verify
    if intent.strategy is Strategy.MBB:
        # the drain only protects the removal of old rules: nothing to clean, no drain
        drain = _drain(intent, old_paths, ((s.device, mine) for s in shift)) if clean else []
        steps = {P.MAKE: make, P.VERIFY_MAKE: make_verify, P.SHIFT: shift,
                 P.VERIFY_SHIFT: shift_verify, P.DRAIN: drain, P.CLEAN: clean}  # fmt: skip
        phases = laid_out(Order.ELECTRONIC_MBB, steps)
        disruption = Disruption.HITLESS
    else:
        gap = [Step(kind=StepKind.WAIT, duration_s=intent.bbm_gap_s)] if intent.bbm_gap_s else []
        steps = {P.BREAK: _break_steps(moving), P.GAP: gap, P.MAKE: make + shift,
                 P.VERIFY: verify, P.CLEAN: clean}  # fmt: skip
        phases = laid_out(Order.ELECTRONIC_BBM, steps)
        disruption = Disruption.OUTAGE
    by_origin: dict[str, list[FlowSpec]] = {}
    for flow, t in zip(intent.flows, origin_tags, strict=True):
        by_origin.setdefault(names[t - 1], []).append(flow)
    return Plan(
        intent=intent,
        from_paths=tuple(names[t - 1] for t in from_tags if t != tag),
        to_path=to.name,
        disruption=disruption,
        phases=phases,
        planned_at=now,
        flow_count=len(intent.flows),
        origins=tuple((p, tuple(f)) for p, f in by_origin.items()),
        undo_drain_s=intent.drain_s if intent.drain_s is not None else drain_for((to,)),
    )


def all_on(
    path: Path,
    tables: Tables,
    flow: FlowSpec,
    tag: int,
    scope: frozenset[str] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> bool:
    """Every direction of ``flow`` has its ingress rule tagged ``tag`` on ``path``."""
    for d in scoped_directions(path, scope):
        key = (0, INGRESS_PRIORITY, ingress_match(d.hops, flow if d.forward else flow.reverse()))
        rule = tables.get(d.hops[0].node, {}).get(key)
        if rule is None or tag_of(rule, space) != tag:
            return False
    return True


def _current_ingress(
    to: Path,
    tables: Tables,
    flows: Sequence[FlowSpec],
    scope: frozenset[str] | None,
    space: CookieSpace,
) -> tuple[dict[str, list[FlowRule]], list[int]]:
    """The installed ingress rules of the moved flows, both directions (those in scope), by
    bridge in flow order (each rule once); and the tag each flow has in its first such
    direction (its origin).

    Looked up through an index of each ingress bridge's rules by their match fields as a
    plain tuple: building a ``FlowMatch`` per flow and hashing it was most of the time of
    planning 10,000 flows."""
    found: dict[str, list[FlowRule]] = {}
    origins: list[int] = []
    dirs = scoped_directions(to, scope)
    if not dirs:
        ends = " and ".join(sorted({d.hops[0].node for d in directions(to)}))
        raise PlanError(
            f"path {to.name} has no ingress on the switches managed here: reroute it where "
            f"{ends} are managed"
        )
    for d in dirs:
        bridge, port = d.hops[0].node, d.hops[0].in_port
        index = _ingress_index(tables.get(bridge, {}), port, space)
        if d.forward:
            keys = [(f.src, f.dst, f.ip_proto, f.l4_src, f.l4_dst) for f in flows]
        else:
            keys = [(f.dst, f.src, f.ip_proto, f.l4_dst, f.l4_src) for f in flows]
        rules = [index.get(k) for k in keys]
        missing = next((i for i, r in enumerate(rules) if r is None), None)
        if missing is not None:
            flow = flows[missing]
            spec = flow if d.forward else flow.reverse()
            raise PlanError(
                f"flow {spec} is not installed: no path carries it (no rule of ours "
                f"matches it at {bridge} port {port}, where path {to.name} and the other "
                "paths from there begin)"
            )
        ours = [r for r in rules if r is not None]
        if d is dirs[0]:
            origins = [c >> 8 & 0xFFFF for c in _cookies(ours)]
        # each rule once, in flow order (a flow listed twice is moved once)
        found.setdefault(bridge, []).extend(dict(zip(keys, ours, strict=True)).values())
    return found, origins


def _cookies(rules: Iterable[FlowRule]) -> list[int]:
    return [r.cookie for r in rules]


IngressFields = tuple[Prefix | None, Prefix | None, int | None, int | None, int | None]


def _ingress_index(
    table: Mapping[RuleKey, FlowRule], port: int, space: CookieSpace
) -> dict[IngressFields, FlowRule]:
    """Our ingress rules of ``table`` for traffic entering at ``port`` (what ``ingress_match``
    writes: table 0, ingress priority, IPv4, no VLAN), by (src, dst, proto, l4 src, l4 dst)."""
    return {
        (m.ipv4_src, m.ipv4_dst, m.ip_proto, m.l4_src, m.l4_dst): r
        for (t, prio, m), r in table.items()
        if prio == INGRESS_PRIORITY
        and t == 0
        and m.in_port == port
        and m.eth_type == ETH_IPV4
        and m.vlan_vid is None
        and space.ours(r.cookie)
    }


def scoped_directions(path: Path, scope: frozenset[str] | None) -> list[Direction]:
    """The directions of ``path`` whose ingress switch is in ``scope`` (all when None)."""
    return [d for d in directions(path) if scope is None or d.hops[0].node in scope]


def _in(scope: frozenset[str] | None, bridge: str) -> bool:
    return scope is None or bridge in scope


def _downstream_first(to: Path) -> list[str]:
    return [h.node for h in reversed(to.hops)]


def _make_steps(
    to: Path, tag: int, tables: Tables, scope: frozenset[str] | None, space: CookieSpace
) -> list[Step]:
    wanted: dict[str, list[FlowRule]] = {}
    for d in directions(to):
        for bridge, rule in transit_rules(d.hops, tag, space):
            wanted.setdefault(bridge, []).append(rule)
    steps = []
    for bridge in filter(lambda b: _in(scope, b), _downstream_first(to)):
        rules = wanted.get(bridge, [])
        missing = [r for r in rules if tables.get(bridge, {}).get(r.key) != r]
        if missing:
            steps.append(install_step(StepKind.INSTALL, bridge, missing, tables.get(bridge, {})))
    return steps


def _verify_make(
    to: Path, tag: int, scope: frozenset[str] | None, space: CookieSpace
) -> list[Step]:
    wanted: dict[str, list[FlowRule]] = {}
    for d in directions(to):
        for bridge, rule in transit_rules(d.hops, tag, space):
            wanted.setdefault(bridge, []).append(rule)
    return [
        Step(kind=StepKind.VERIFY, device=b, expect=tuple(wanted[b]))
        for b in _downstream_first(to)
        if b in wanted and _in(scope, b)
    ]


def install_step(
    kind: StepKind, bridge: str, rules: list[FlowRule], table: Mapping[RuleKey, FlowRule]
) -> Step:
    """A step adding ``rules`` on ``bridge``; its undo puts back what ``table`` had there."""
    changes = tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in rules)
    undo = tuple(
        FlowChange(op=FlowOp.ADD, rule=table[r.key])
        if r.key in table
        else FlowChange(op=FlowOp.DELETE, rule=r)
        for r in rules
    )
    return Step(kind=kind, device=bridge, changes=changes, undo=undo)


def _shift_steps(
    to: Path,
    tag: int,
    old: Mapping[str, list[FlowRule]],
    made: Mapping[str, tuple[FlowChange, ...]],
    space: CookieSpace,
) -> list[Step]:
    """Per direction, one batch rewriting the moved flows' ingress rules to ``tag``; its
    undo puts the old rules back (same keys: an ADD replaces)."""
    steps = []
    for d in directions(to):
        bridge = d.hops[0].node
        actions = ingress_actions(d.hops, tag)
        olds = old.get(bridge, [])
        if olds:  # (none: the direction's ingress is not managed here, or already moved)
            add, ingress = FlowOp.ADD, cookie(tag, ROLE_INGRESS, space)
            changes = tuple(  # 100,000s: the fast builders (drivers.base)
                new_change(add, new_rule(r.match, INGRESS_PRIORITY, actions, ingress, 0))
                for r in olds
            )
            undo = _undo_of(olds, made.get(bridge, ()))
            steps.append(Step(kind=StepKind.SHIFT, device=bridge, changes=changes, undo=undo))
    return steps


def _undo_of(olds: list[FlowRule], made: tuple[FlowChange, ...]) -> tuple[FlowChange, ...]:
    """ADDs putting ``olds`` back: ``made`` itself when it adds exactly these rules."""
    if len(made) == len(olds) and all(
        c.rule is r and c.op is FlowOp.ADD for c, r in zip(made, olds, strict=True)
    ):
        return made
    add = FlowOp.ADD
    return tuple(new_change(add, r) for r in olds)


def _verify(step: Step) -> Step:
    return Step(
        kind=StepKind.VERIFY, device=step.device, expect=tuple(c.rule for c in step.changes)
    )


def _break_steps(old: Mapping[str, list[FlowRule]]) -> list[Step]:
    return [
        Step(
            kind=StepKind.REMOVE,
            device=bridge,
            changes=tuple(FlowChange(op=FlowOp.DELETE, rule=r) for r in rules),
            undo=tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in rules),
        )
        for bridge, rules in old.items()
        if rules
    ]


def _clean_steps(
    topo: Topology,
    tables: Tables,
    from_tags: list[int],
    moved: Mapping[str, Sequence[FlowRule]],
    space: CookieSpace,
) -> list[Step]:
    """Remove the transit rules of old paths that keep no flow after the move."""
    return gc_steps(topo, tables, from_tags, moved, space)


def gc_steps(
    topo: Topology,
    tables: Tables,
    tags: Iterable[int],
    moved: Mapping[str, Sequence[FlowRule]] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> list[Step]:
    """Remove the transit rules of the paths of ``tags`` that no ingress rule uses (not
    counting ``moved``, installed rules by bridge), upstream-first along each path."""
    names = list(topo.paths)
    still_used = _ingress_tags(tables, moved or {}, space)
    steps = []
    for tag in tags:
        if tag in still_used:
            continue
        if not 1 <= tag <= len(names):  # the callers' tags are paths' (check_tags)
            raise PlanError(f"topology {topo.name} has no path of tag {tag}")
        old = topo.paths[names[tag - 1]]
        mine = (space.base | tag << 8) >> 8
        for bridge in [h.node for h in old.hops]:  # upstream-first
            rules = [
                r
                for r in tables.get(bridge, {}).values()
                if r.cookie >> 8 == mine and r.cookie & 0xFF != ROLE_INGRESS
            ]
            if rules:
                steps.append(
                    Step(
                        kind=StepKind.REMOVE,
                        device=bridge,
                        changes=tuple(FlowChange(op=FlowOp.DELETE, rule=r) for r in rules),
                        undo=tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in rules),
                    )
                )
    return steps


def _ingress_tags(
    tables: Tables, moved: Mapping[str, Sequence[FlowRule]], space: CookieSpace
) -> set[int]:
    """The path tags some ingress rule of ``tables`` still uses, ``moved`` not counted
    (counted by cookie, which carries tag and role: no rule is hashed)."""
    counts: Counter[int] = Counter()
    gone: Counter[int] = Counter()
    for table in tables.values():
        counts.update(map(_COOKIE, table.values()))  # counted in C: 100,000s of rules
    for rules in moved.values():
        gone.update(map(_COOKIE, rules))
    return {
        c >> 8 & 0xFFFF
        for c, n in counts.items()
        if n > gone[c] and space.ours(c) and c & 0xFF == ROLE_INGRESS
    }


_COOKIE = attrgetter("cookie")
