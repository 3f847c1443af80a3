"""The planner: ``plan(topology, tables, intent, now) -> Plan``. Pure: no I/O, time injected.

Ordering policy, make-before-break (MBB), for flows moving from path(s) P to path Q:

  1. make     install Q's missing transit/egress rules, one atomic batch per bridge,
              downstream-first along the forward direction (they carry no traffic yet:
              only packets tagged for Q match them)
  2. verify   read those bridges back: every rule of Q present
  3. shift    rewrite the moved flows' ingress rules to tag for Q: one atomic batch at
              the forward ingress bridge, one at the reverse ingress bridge
  4. verify   read the ingress rules back
  5. drain    wait ``drain_s`` (>= the longest path delay) for packets still tagged for P
  6. clean    remove P's transit rules where no other flow still uses P, upstream-first

Every prefix of an MBB plan leaves every moved flow, in both directions, a complete path
(tested by walking the planned tables). Break-before-make (BBM) removes the ingress rules
first, optionally waits ``bbm_gap_s``, then makes Q and shifts; it declares ``OUTAGE``.

Each step carries its inverse (``undo``) computed from the tables it was planned on, so
the executor can roll back any prefix without reading the devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from drivers.base import FlowChange, FlowOp, FlowRule
from services.reroute.errors import PlanError
from services.reroute.model import FlowSpec, Intent, Strategy
from services.reroute.rules import (
    INGRESS_PRIORITY,
    ROLE_INGRESS,
    Direction,
    directions,
    ingress_actions,
    ingress_match,
    path_tag,
    retag,
    tag_of,
    transit_rules,
)
from services.reroute.tables import RuleKey, Tables
from services.reroute.topology import Circuit, Path, Topology


class StepKind(StrEnum):
    INSTALL = "install"
    VERIFY = "verify"
    SHIFT = "shift"
    REMOVE = "remove"
    DRAIN = "drain"
    WAIT = "wait"
    CIRCUITS = "circuits"  # optical switch: remove ``disconnect``, then add ``connect``
    AWAIT_LOCK = "await-lock"  # until every port in ``ports`` is up, at most ``duration_s``


class Disruption(StrEnum):
    HITLESS = "hitless"  # every prefix keeps every moved flow on a working path
    OUTAGE = "outage"  # traffic of moved flows is dropped between break and make


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    kind: StepKind
    device: str = ""
    changes: tuple[FlowChange, ...] = ()
    undo: tuple[FlowChange, ...] = ()
    expect: tuple[FlowRule, ...] = ()  # VERIFY: rules that must read back
    duration_s: float = 0.0  # DRAIN / WAIT; AWAIT_LOCK: the timeout
    connect: tuple[Circuit, ...] = ()  # CIRCUITS
    disconnect: tuple[Circuit, ...] = ()  # CIRCUITS
    ports: tuple[tuple[str, int], ...] = ()  # AWAIT_LOCK: (switch, port) that must come up

    def describe(self) -> str:
        if self.kind in (StepKind.DRAIN, StepKind.WAIT):
            return f"{self.kind} {self.duration_s * 1000:.0f} ms"
        if self.kind is StepKind.CIRCUITS:
            gone = " ".join(f"{c.ingress}->{c.egress}" for c in self.disconnect) or "none"
            new = " ".join(f"{c.ingress}->{c.egress}" for c in self.connect) or "none"
            return f"circuits {self.device}: remove {gone}; add {new}"
        if self.kind is StepKind.AWAIT_LOCK:
            ports = " ".join(f"{d}:p{p}" for d, p in self.ports)
            return f"await lock: {ports} up (timeout {self.duration_s * 1000:.0f} ms)"
        if self.kind is StepKind.VERIFY:
            return f"verify {self.device}: {len(self.expect)} rules read back"
        adds = sum(c.op is FlowOp.ADD for c in self.changes)
        dels = len(self.changes) - adds
        return f"{self.kind} {self.device}: +{adds} -{dels} (one batch)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    """Steps run in order; ``concurrent`` phases run their steps at once (any subset of a
    concurrent phase may have happened when something fails: the tests check them all)."""

    name: str
    steps: tuple[Step, ...]
    concurrent: bool = False
    # a checkpoint: after this phase every flow rests on a working path, placed like this
    # (path, forward flows); a later failure rolls back to here, not to the start
    rest: tuple[tuple[str, tuple[FlowSpec, ...]], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    intent: Intent
    from_paths: tuple[str, ...]
    to_path: str
    disruption: Disruption
    phases: tuple[Phase, ...]
    planned_at: float
    flow_count: int = field(default=0)
    # where the moved flows were: (path, forward flows) -- what recovery restores
    origins: tuple[tuple[str, tuple[FlowSpec, ...]], ...] = ()

    def steps(self) -> list[Step]:
        return [s for p in self.phases for s in p.steps]

    def describe(self) -> str:
        head = (
            f"{self.intent.strategy.value.upper()}: {self.flow_count} flow(s) "
            f"{','.join(self.from_paths)} -> {self.to_path} ({self.disruption})"
        )
        lines = [head]
        n = 0
        for phase in self.phases:
            tags = " (concurrent)" if phase.concurrent else ""
            tags += " [checkpoint]" if phase.rest else ""
            lines.append(f"  phase {phase.name}{tags}")
            for step in phase.steps:
                n += 1
                lines.append(f"    {n:>2}. {step.describe()}")
        return "\n".join(lines)


def plan(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    optics: frozenset[Circuit] | None = None,
    scope: frozenset[str] | None = None,
) -> Plan:
    """The plan of ``intent`` on ``tables`` with the optical switches' current circuits
    ``optics`` (default: the topology's initial ones). A target path that needs circuits not
    present is an optical reconfiguration (``services.reroute.optical``).

    ``scope``: the switches this instance manages (one site of a two-site fabric); only
    their rules are planned, and nothing is cleaned (the other site may still send on the
    old path; per-path receive rules are harmless). None: every switch."""
    if optics is None:
        optics = initial_optics(topo)
    to = topo.paths.get(intent.to_path)
    if to is not None and not to.circuits <= optics:
        from services.reroute.optical import plan_optical

        return plan_optical(topo, tables, optics, intent, now)
    if intent.via is not None:
        raise PlanError(
            f"--via is for optical reconfigurations; path {intent.to_path} needs no new "
            "cross-connects"
        )
    return plan_electronic(topo, tables, intent, now, partial_ok=False, scope=scope)


def _drain(intent: Intent) -> tuple[Step, ...]:
    return (Step(kind=StepKind.DRAIN, duration_s=intent.drain_s),)


def initial_optics(topo: Topology) -> frozenset[Circuit]:
    return frozenset(c for o in topo.optical_switches for c in o.cross_connects)


def plan_electronic(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    *,
    partial_ok: bool,
    scope: frozenset[str] | None = None,
) -> Plan:
    if not intent.flows:
        raise PlanError("no flows to move")
    if intent.to_path not in topo.paths:
        path_tag(topo, intent.to_path)  # raises the PlanError listing the paths
    to = topo.paths[intent.to_path]
    tag = path_tag(topo, to.name)
    names = list(topo.paths)
    old_rules, origin_tags = _current_ingress(to, tables, intent.flows, scope)
    from_tags = sorted({tag_of(r) or 0 for r in old_rules.values()})
    if from_tags == [tag]:
        raise PlanError(f"the flows are already on path {to.name}")
    if tag in from_tags and not partial_ok:
        raise PlanError(f"some flows are already on path {to.name}: move the others alone")
    moving = {k: r for k, r in old_rules.items() if tag_of(r) != tag}
    make = _make_steps(to, tag, tables, scope)
    shift = _shift_steps(to, tag, moving)
    gone = [t for t in from_tags if t != tag]
    clean = _clean_steps(topo, tables, gone, old_rules) if scope is None else []
    make_verify = _verify_make(to, tag, scope)
    shift_verify = [_verify(s) for s in shift]
    verify = make_verify + shift_verify
    if intent.strategy is Strategy.MBB:
        phases = [
            Phase(name="make", steps=tuple(make)),
            Phase(name="verify-make", steps=tuple(make_verify), concurrent=True),
            Phase(name="shift", steps=tuple(shift), concurrent=True),
            Phase(name="verify-shift", steps=tuple(shift_verify), concurrent=True),
            # the drain only protects the removal of old rules: nothing to clean, no drain
            Phase(name="drain", steps=_drain(intent) if clean else ()),
            Phase(name="clean", steps=tuple(clean)),
        ]
        disruption = Disruption.HITLESS
    else:
        breaks = _break_steps(moving)
        gap = (Step(kind=StepKind.WAIT, duration_s=intent.bbm_gap_s),) if intent.bbm_gap_s else ()
        phases = [
            Phase(name="break", steps=tuple(breaks)),
            Phase(name="gap", steps=gap),
            Phase(name="make", steps=tuple(make + shift)),
            Phase(name="verify", steps=tuple(verify), concurrent=True),
            Phase(name="clean", steps=tuple(clean)),
        ]
        disruption = Disruption.OUTAGE
    by_origin: dict[str, list[FlowSpec]] = {}
    for flow, t in zip(intent.flows, origin_tags, strict=True):
        by_origin.setdefault(names[t - 1], []).append(flow)
    return Plan(
        intent=intent,
        from_paths=tuple(names[t - 1] for t in from_tags if t != tag),
        to_path=to.name,
        disruption=disruption,
        phases=tuple(p for p in phases if p.steps),
        planned_at=now,
        flow_count=len(intent.flows),
        origins=tuple((p, tuple(f)) for p, f in by_origin.items()),
    )


def all_on(
    path: Path, tables: Tables, flow: FlowSpec, tag: int, scope: frozenset[str] | None = None
) -> bool:
    for d in scoped_directions(path, scope):
        key = (0, INGRESS_PRIORITY, ingress_match(d.hops, flow if d.forward else flow.reverse()))
        rule = tables.get(d.hops[0].node, {}).get(key)
        if rule is None or tag_of(rule) != tag:
            return False
    return True


def _current_ingress(
    to: Path, tables: Tables, flows: Iterable[FlowSpec], scope: frozenset[str] | None
) -> tuple[dict[tuple[str, RuleKey], FlowRule], list[int]]:
    """The installed ingress rules of the moved flows, both directions (those in scope), by
    (bridge, key); and the tag each flow has in its first such direction (its origin)."""
    found: dict[tuple[str, RuleKey], FlowRule] = {}
    origins: list[int] = []
    dirs = scoped_directions(to, scope)
    if not dirs:
        raise PlanError(f"path {to.name} has no ingress on the switches managed here")
    for d in dirs:
        bridge = d.hops[0].node
        table = tables.get(bridge, {})
        for flow in flows:
            spec = flow if d.forward else flow.reverse()
            key = (0, INGRESS_PRIORITY, ingress_match(d.hops, spec))
            rule = table.get(key)
            if rule is None or tag_of(rule) is None:
                raise PlanError(
                    f"flow {spec} is not installed at {bridge} port {d.hops[0].in_port} "
                    f"(the ingress of path {to.name})"
                )
            found[(bridge, key)] = rule
            if d is dirs[0]:
                origins.append(tag_of(rule) or 0)
    return found, origins


def scoped_directions(path: Path, scope: frozenset[str] | None) -> list[Direction]:
    """The directions of ``path`` whose ingress switch is in ``scope`` (all when None)."""
    return [d for d in directions(path) if scope is None or d.hops[0].node in scope]


def _in(scope: frozenset[str] | None, bridge: str) -> bool:
    return scope is None or bridge in scope


def _downstream_first(to: Path) -> list[str]:
    return [h.node for h in reversed(to.hops)]


def _make_steps(to: Path, tag: int, tables: Tables, scope: frozenset[str] | None) -> list[Step]:
    wanted: dict[str, list[FlowRule]] = {}
    for d in directions(to):
        for bridge, rule in transit_rules(d.hops, tag):
            wanted.setdefault(bridge, []).append(rule)
    steps = []
    for bridge in filter(lambda b: _in(scope, b), _downstream_first(to)):
        rules = wanted.get(bridge, [])
        missing = [r for r in rules if tables.get(bridge, {}).get(r.key) != r]
        if missing:
            steps.append(_install(StepKind.INSTALL, bridge, missing, tables.get(bridge, {})))
    return steps


def _verify_make(to: Path, tag: int, scope: frozenset[str] | None) -> list[Step]:
    wanted: dict[str, list[FlowRule]] = {}
    for d in directions(to):
        for bridge, rule in transit_rules(d.hops, tag):
            wanted.setdefault(bridge, []).append(rule)
    return [
        Step(kind=StepKind.VERIFY, device=b, expect=tuple(wanted[b]))
        for b in _downstream_first(to)
        if b in wanted and _in(scope, b)
    ]


def _install(
    kind: StepKind, bridge: str, rules: list[FlowRule], table: Mapping[RuleKey, FlowRule]
) -> Step:
    changes = tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in rules)
    undo = tuple(
        FlowChange(op=FlowOp.ADD, rule=table[r.key])
        if r.key in table
        else FlowChange(op=FlowOp.DELETE, rule=r)
        for r in rules
    )
    return Step(kind=kind, device=bridge, changes=changes, undo=undo)


def _shift_steps(to: Path, tag: int, old: Mapping[tuple[str, RuleKey], FlowRule]) -> list[Step]:
    """Per direction, one batch rewriting the moved flows' ingress rules to ``tag``."""
    steps = []
    for d in directions(to):
        bridge = d.hops[0].node
        actions = ingress_actions(d.hops, tag)
        table = {key: r for (b, key), r in old.items() if b == bridge}
        if table:  # (none: the direction's ingress is not managed here, or already moved)
            rules = [retag(r.match, actions, tag) for r in table.values()]
            steps.append(_install(StepKind.SHIFT, bridge, rules, table))
    return steps


def _verify(step: Step) -> Step:
    return Step(
        kind=StepKind.VERIFY, device=step.device, expect=tuple(c.rule for c in step.changes)
    )


def _break_steps(old: Mapping[tuple[str, RuleKey], FlowRule]) -> list[Step]:
    by_bridge: dict[str, list[FlowRule]] = {}
    for (bridge, _), rule in old.items():
        by_bridge.setdefault(bridge, []).append(rule)
    return [
        Step(
            kind=StepKind.REMOVE,
            device=bridge,
            changes=tuple(FlowChange(op=FlowOp.DELETE, rule=r) for r in rules),
            undo=tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in rules),
        )
        for bridge, rules in by_bridge.items()
    ]


def _clean_steps(
    topo: Topology,
    tables: Tables,
    from_tags: list[int],
    moved: Mapping[tuple[str, RuleKey], FlowRule],
) -> list[Step]:
    """Remove the transit rules of old paths that keep no flow after the move."""
    return gc_steps(topo, tables, from_tags, moved)


def gc_steps(
    topo: Topology,
    tables: Tables,
    tags: Iterable[int],
    moved: Mapping[tuple[str, RuleKey], FlowRule] | None = None,
) -> list[Step]:
    """Remove the transit rules of the paths of ``tags`` that no ingress rule uses (not
    counting ``moved``), upstream-first along each path."""
    names = list(topo.paths)
    gone = moved or {}
    still_used = {
        tag_of(rule)
        for bridge, table in tables.items()
        for key, rule in table.items()
        if rule.cookie & 0xFF == ROLE_INGRESS and (bridge, key) not in gone
    }
    steps = []
    for tag in tags:
        if tag in still_used:
            continue
        old = topo.paths[names[tag - 1]]
        for bridge in [h.node for h in old.hops]:  # upstream-first
            rules = [
                r
                for r in tables.get(bridge, {}).values()
                if tag_of(r) == tag and r.cookie & 0xFF != ROLE_INGRESS
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
