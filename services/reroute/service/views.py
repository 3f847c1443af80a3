"""Engine values -> API bodies: journal records, plans, the topology, installed flows."""

from __future__ import annotations

import re
from collections.abc import Mapping

from drivers.base import FlowRule
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Circuit, Path, Topology
from services.reroute.planning.electronic import scoped_directions
from services.reroute.planning.order import STAGE, PhaseName
from services.reroute.planning.plan import Plan
from services.reroute.rules import DEFAULT_SPACE, ROLE_INGRESS, CookieSpace, path_tag, tag_of
from services.reroute.service.schemas import (
    FlowsView,
    IntentView,
    NodeView,
    OpticalSwitchView,
    OpticsView,
    PathFlows,
    PathView,
    PlanStepView,
    PlanView,
    RerouteView,
    StepView,
    TopologyView,
)
from services.reroute.store.records import Record, RerouteState, StepRecord
from services.reroute.tables import Tables

_PHASE = re.compile(r"^  phase (\S+)")
_STEP = re.compile(r"^    +\d+\. ")


def intent_view(intent: Intent) -> IntentView:
    """The intent as the API shows it."""
    return IntentView(
        flows=[str(f) for f in intent.flows],
        to_path=intent.to_path,
        strategy=intent.strategy,
        drain_ms=None if intent.drain_s is None else intent.drain_s * 1000,
        bbm_gap_ms=intent.bbm_gap_s * 1000,
        via=intent.via,
        lock_timeout_ms=None if intent.lock_timeout_s is None else intent.lock_timeout_s * 1000,
    )


def reroute_view(
    record: Record, steps: list[StepRecord], queue_position: int | None = None
) -> RerouteView:
    """A journal record and its steps as the API shows them."""
    return RerouteView(
        id=record.id,
        state=record.state,
        summary=_summary(record),
        intent=intent_view(record.intent) if record.intent else None,
        plan=record.plan_text or None,
        steps=step_views(record.step_names, steps, step_phases(record.plan_text)),
        error=record.error,
        created=record.created,
        started=record.started,
        finished=record.finished,
        queue_position=queue_position,
    )


def step_phases(plan_text: str) -> list[PhaseName | None]:
    """The phase of each step, in plan order, read from the plan's text (``Plan.describe``:
    a line ``  phase NAME ...`` heads the numbered lines of its steps); None where the name
    is none of ``PhaseName`` (a record written before a phase was renamed)."""
    phases: list[PhaseName | None] = []
    current: PhaseName | None = None
    for line in plan_text.splitlines():
        if heading := _PHASE.match(line):
            current = _phase(heading.group(1))
        elif _STEP.match(line):
            phases.append(current)
    return phases


def _phase(name: str) -> PhaseName | None:
    try:
        return PhaseName(name)
    except ValueError:
        return None


def step_views(
    names: tuple[str, ...],
    steps: list[StepRecord],
    phases: list[PhaseName | None] | None = None,
) -> list[StepView]:
    """The plan's step names with their journal state, in plan order."""
    by_index = {s.index: s for s in steps}
    known = phases if phases is not None and len(phases) == len(names) else None
    views = []
    for i, name in enumerate(names):
        s = by_index.get(i)
        ms = (s.finished - s.started) * 1000 if s and s.finished is not None else None
        phase = known[i] if known else None
        views.append(
            StepView(
                index=i + 1,
                phase=phase,
                stage=STAGE[phase] if phase else None,
                description=name,
                state=s.state if s else "planned",
                started=s.started if s else None,
                finished=s.finished if s else None,
                ms=ms,
                error=s.error if s else None,
            )
        )
    return views


def plan_view(plan: Plan) -> PlanView:
    """A plan as the API shows it (dry run)."""
    rows = [(phase.name, step) for phase in plan.phases for step in phase.steps]
    steps = [
        PlanStepView(
            index=i,
            phase=name,
            stage=STAGE[name],
            kind=s.kind,
            device=s.device,
            description=s.describe(),
        )
        for i, (name, s) in enumerate(rows, start=1)
    ]
    return PlanView(
        summary=plan.describe().splitlines()[0],
        from_paths=list(plan.from_paths),
        to_path=plan.to_path,
        disruption=plan.disruption,
        flow_count=plan.flow_count,
        steps=steps,
        text=plan.describe(),
    )


def topology_view(topo: Topology, fabric: str, scope: frozenset[str] | None) -> TopologyView:
    """The topology as the API shows it (nodes, links, paths)."""
    return TopologyView(
        name=topo.name,
        fabric=fabric,
        nodes=[
            NodeView(name=n.name, kind=n.kind, managed=_managed(topo, n.name, scope))
            for n in topo.nodes.values()
        ],
        links=[[str(link.a), str(link.b)] for link in topo.links],
        paths=[_path_view(p) for p in topo.paths.values()],
    )


def _managed(topo: Topology, name: str, scope: frozenset[str] | None) -> bool:
    switches = {s.name for s in topo.switches} | {o.name for o in topo.optical_switches}
    return name in switches and (scope is None or name in scope)


def _path_view(path: Path) -> PathView:
    return PathView(
        name=path.name,
        src=path.src,
        dst=path.dst,
        hops=[f"{h.node}[{h.in_port}>{h.out_port}]" for h in path.hops],
        circuits=sorted(str(c) for c in path.circuits),
        initial=path.initial,
    )


def flows_view(
    topo: Topology,
    tables: Tables,
    scope: frozenset[str] | None,
    space: CookieSpace = DEFAULT_SPACE,
) -> FlowsView:
    """Per path, the flows whose ingress rule (read from the devices, cookies of ``space``)
    tags it; a flow seen in either direction counts, written in the path's forward
    direction."""
    return FlowsView(
        paths=[
            PathFlows(
                path=p.name,
                flows=sorted(str(f) for f in _flows_on(topo, p, tables, scope, space)),
            )
            for p in topo.paths.values()
        ]
    )


def _flows_on(
    topo: Topology,
    path: Path,
    tables: Tables,
    scope: frozenset[str] | None,
    space: CookieSpace,
) -> set[FlowSpec]:
    tag = path_tag(topo, path.name)
    found = set()
    for d in scoped_directions(path, scope):
        for rule in tables.get(d.hops[0].node, {}).values():
            flow = _flow_of(rule) if _is_ingress(rule, d.hops[0].in_port, tag, space) else None
            if flow is not None:
                found.add(flow if d.forward else flow.reverse())
    return found


def _is_ingress(rule: FlowRule, in_port: int, tag: int, space: CookieSpace) -> bool:
    return (
        rule.cookie & 0xFF == ROLE_INGRESS
        and rule.match.in_port == in_port
        and (tag_of(rule, space) == tag)
    )


def _flow_of(rule: FlowRule) -> FlowSpec | None:
    m = rule.match
    if m.ipv4_src is None or m.ipv4_dst is None:
        return None
    return FlowSpec(
        src=m.ipv4_src, dst=m.ipv4_dst, ip_proto=m.ip_proto, l4_src=m.l4_src, l4_dst=m.l4_dst
    )


def optics_view(topo: Topology, circuits: frozenset[Circuit], read: frozenset[str]) -> OpticsView:
    """Each optical switch of the topology, with the cross-connects read from it now
    (``read``: the switches whose devices were read)."""
    by_switch: Mapping[str, list[tuple[int, int]]] = {
        o.name: sorted((c.ingress, c.egress) for c in circuits if c.switch == o.name)
        for o in topo.optical_switches
    }
    return OpticsView(
        switches=[
            OpticalSwitchView(
                name=o.name,
                ingress_count=o.ingress_count,
                egress_count=o.egress_count,
                managed=o.name in read,
                cross_connects=by_switch[o.name] if o.name in read else None,
            )
            for o in topo.optical_switches
        ]
    )


QUEUED = " (queued)"  # how the journal's summary of a reroute not yet planned ends


def _summary(record: Record) -> str:
    """The record's summary as its state is now: one that ended before it was planned
    (rejected, cancelled) is no longer queued."""
    if record.summary.endswith(QUEUED) and record.state is not RerouteState.PENDING:
        return record.summary.removesuffix(QUEUED) + f" ({record.state.value}, not run)"
    return record.summary
