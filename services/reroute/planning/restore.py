"""Recovery plans: put flows back on their origin paths from whatever state an interrupted
reroute left, then remove what it left behind. Pure, like the planner.

The journal keeps only each reroute's origins (path -> flows) and the paths it touched;
recovery reads the devices afresh and plans from there (``engine.recover``), so it needs
no undo log and survives code changes. Every restore plan is itself make-before-break
(property-tested from every state an MBB run can stop in:
tests/unit/services/planning/test_planner.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology
from services.reroute.planning.electronic import (
    all_on,
    gc_steps,
    plan_electronic,
    scoped_directions,
)
from services.reroute.planning.order import Order
from services.reroute.planning.order import PhaseName as P
from services.reroute.planning.plan import Disruption, Plan, laid_out
from services.reroute.rules import (
    DEFAULT_SPACE,
    INGRESS_PRIORITY,
    CookieSpace,
    ingress_match,
    path_tag,
    tag_of,
)
from services.reroute.tables import Tables, apply_changes


def plan_restore(
    topo: Topology,
    tables: Tables,
    origins: Mapping[str, tuple[FlowSpec, ...]],
    touched: Iterable[str],
    now: float,
    scope: frozenset[str] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> list[Plan]:
    """Plans that put every flow back on its origin path (MBB, no drain), whatever state an
    interrupted reroute left, then remove the transit rules of ``touched`` paths no flow uses.

    Used by recovery: the journal keeps only the origins, and the devices are read afresh.
    """
    plans = []
    current = {b: dict(t) for b, t in tables.items()}
    for path, flows in origins.items():
        tag = path_tag(topo, path)
        on = topo.paths[path]
        away = tuple(f for f in flows if not all_on(on, current, f, tag, scope, space))
        if not away:
            continue
        intent = Intent(flows=away, to_path=path, drain_s=0.0)
        p = plan_electronic(topo, current, intent, now, partial_ok=True, scope=scope, space=space)
        plans.append(p)
        for step in p.steps():
            if step.changes:
                current = apply_changes(current, step.device, step.changes)
    tags = [path_tag(topo, t) for t in touched]
    gc = gc_steps(topo, current, tags, space=space) if scope is None else []
    if gc:
        plans.append(
            Plan(
                intent=Intent(flows=(), to_path="", drain_s=0.0),
                from_paths=tuple(touched),
                to_path="",
                disruption=Disruption.HITLESS,
                phases=laid_out(Order.CLEANUP, {P.CLEAN: gc}),
                planned_at=now,
            )
        )
    return plans


def moved_any(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    scope: frozenset[str] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> bool:
    """Some direction of some flow of ``intent`` has its ingress rule on the intent's
    target path in ``tables``: a shift of it landed (level-triggered recovery rolls such
    a reroute forward, ``engine.restore``)."""
    to = topo.paths.get(intent.to_path)
    if to is None:
        return False
    tag = path_tag(topo, intent.to_path)
    for flow in intent.flows:
        for d in scoped_directions(to, scope):
            key = (
                0,
                INGRESS_PRIORITY,
                ingress_match(d.hops, flow if d.forward else flow.reverse()),
            )
            rule = tables.get(d.hops[0].node, {}).get(key)
            if rule is not None and tag_of(rule, space) == tag:
                return True
    return False


def found_on(
    topo: Topology,
    tables: Tables,
    flows: Iterable[FlowSpec],
    paths: Iterable[str],
    scope: frozenset[str] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> dict[str, tuple[FlowSpec, ...]]:
    """The flows each of ``paths`` carries whole (every direction's ingress on it) in
    ``tables``: where they are, as origins (path -> flows)."""
    out: dict[str, list[FlowSpec]] = {}
    for flow in flows:
        for name in paths:
            on = topo.paths.get(name)
            if on is not None and all_on(on, tables, flow, path_tag(topo, name), scope, space):
                out.setdefault(name, []).append(flow)
                break
    return {p: tuple(f) for p, f in out.items()}
