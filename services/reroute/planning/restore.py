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

from services.reroute.model import FlowSpec, Intent
from services.reroute.planning.electronic import all_on, gc_steps, plan_electronic
from services.reroute.planning.plan import Disruption, Phase, Plan
from services.reroute.rules import DEFAULT_SPACE, CookieSpace, path_tag
from services.reroute.tables import Tables, apply_changes
from services.reroute.topology import Topology


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
                phases=(Phase(name="clean", steps=tuple(gc)),),
                planned_at=now,
            )
        )
    return plans
