"""Resync: every flow back on the path the journal says it is on, whatever the switches hold.

For a switch that lost its tables (``ovs-vswitchd`` restarted: a userspace datapath keeps
no flows) or a reroute whose rollback failed (``failed``: "needs an operator"), recovery
by origins (``restore``) cannot help: it moves flows that are still installed somewhere.
Resync plans from the *intended* placement instead:

- every ``initial`` path carries its host-to-host flow (what ``fabric up`` installs);
- then the journal, oldest first: a ``done`` reroute put its flows on its ``to_path``; a
  ``rolled_back`` or ``failed`` one meant them to be on its origins (after a checkpoint,
  where the checkpoint rests them).

The plan writes the difference between the rules of that placement and the tables read
(make-before-break ordered: transit rules first, then ingress rules, then our rules no
path needs), and runs through the executor. Each ``failed`` reroute whose flows are then
where its origins say ends ``rolled_back``, its error saying it was resynced.

``resync_device`` does the same for one switch alone (one that came back with empty
tables): its rules of the intended placement written, our others there removed, nothing
read or written on any other device (which may be down meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from drivers.base import FlowChange, FlowOp, FlowRule
from services.reroute.engine.executor import Driver, Executor, Outcome
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology
from services.reroute.planning.electronic import install_step
from services.reroute.planning.order import Order
from services.reroute.planning.order import PhaseName as P
from services.reroute.planning.plan import Disruption, Plan, Step, StepKind, laid_out
from services.reroute.rules import DEFAULT_SPACE, ROLE_INGRESS, CookieSpace, host_flow, path_rules
from services.reroute.store.journaling import Journaling
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import RuleKey, Tables

Placement = dict[str, tuple[FlowSpec, ...]]  # path -> the flows on it
ROLE_MASK = 0xFF


def intended(topo: Topology, journal: Journaling) -> Placement:
    """Where every flow should be: the initial paths, then the journal's outcomes (those of
    pruned reroutes first, as the journal settled them)."""
    where: dict[FlowSpec, str] = {host_flow(p): name for name, p in topo.paths.items() if p.initial}
    where.update(journal.settled())
    for record in reversed(journal.history(limit=-1)):
        where.update(record.placed())
    placement: dict[str, list[FlowSpec]] = {}
    for flow, path in where.items():
        placement.setdefault(path, []).append(flow)
    return {p: tuple(f) for p, f in placement.items()}


def wanted(
    topo: Topology, placement: Placement, space: CookieSpace = DEFAULT_SPACE
) -> dict[str, dict[RuleKey, FlowRule]]:
    """Our rules (cookies of ``space``) of ``placement``, by bridge and key."""
    out: dict[str, dict[RuleKey, FlowRule]] = {}
    for path, flows in placement.items():
        for bridge, rules in path_rules(topo, topo.paths[path], list(flows), space).items():
            out.setdefault(bridge, {}).update((r.key, r) for r in rules)
    return out


def plan_resync(
    topo: Topology,
    tables: Tables,
    placement: Placement,
    now: float,
    space: CookieSpace = DEFAULT_SPACE,
    devices: Collection[str] | None = None,
) -> Plan | None:
    """The steps from ``tables`` (read in ``space``) to ``placement``'s rules (on
    ``devices`` only, when given); None when they are there."""
    want = wanted(topo, placement, space)
    make: list[Step] = []
    shift: list[Step] = []
    clean: list[Step] = []
    for bridge in sorted(set(want) | set(tables)):
        if devices is not None and bridge not in devices:
            continue
        have, need = tables.get(bridge, {}), want.get(bridge, {})
        adds = [r for k, r in need.items() if have.get(k) != r]
        ingress = [r for r in adds if r.cookie & ROLE_MASK == ROLE_INGRESS]
        transit = [r for r in adds if r.cookie & ROLE_MASK != ROLE_INGRESS]
        extra = [r for k, r in have.items() if k not in need]
        for rules, kind, into in (
            (transit, StepKind.INSTALL, make),
            (ingress, StepKind.SHIFT, shift),
        ):
            if rules:
                into.append(install_step(kind, bridge, rules, have))
        if extra:
            changes = tuple(FlowChange(op=FlowOp.DELETE, rule=r) for r in extra)
            undo = tuple(FlowChange(op=FlowOp.ADD, rule=r) for r in extra)
            clean.append(Step(kind=StepKind.REMOVE, device=bridge, changes=changes, undo=undo))
    phases = laid_out(Order.RESYNC, {P.MAKE: make, P.SHIFT: shift, P.CLEAN: clean})
    if not phases:
        return None
    flows = tuple(f for fs in placement.values() for f in fs)
    return Plan(
        intent=Intent(flows=flows, to_path="", drain_s=0.0),
        from_paths=tuple(sorted(placement)),
        to_path="",
        disruption=Disruption.HITLESS,
        phases=phases,
        planned_at=now,
        flow_count=len(flows),
    )


async def resync(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journaling,
    tables: Tables,
    space: CookieSpace = DEFAULT_SPACE,
) -> Outcome | None:
    """Write the intended placement's rules where ``tables`` (read now) differ; mark the
    ``failed`` reroutes it settles. None when nothing differed."""
    placement = intended(topo, journal)
    the_plan = plan_resync(topo, tables, placement, now=time.time(), space=space)
    if the_plan is None:
        outcome = None
    else:
        scratch = Journal(None)
        try:
            outcome = await Executor(drivers, scratch).run(f"resync-{int(time.time())}", the_plan)
        finally:
            scratch.close()
        if outcome.state is not RerouteState.DONE:
            return outcome
    rules = sum(len(s.changes) for s in the_plan.steps()) if the_plan else 0
    for record in journal.history(limit=-1, state=RerouteState.FAILED):
        if all(f in placement.get(p, ()) for p, fs in record.origins.items() for f in fs):
            journal.finish(
                record.id,
                RerouteState.ROLLED_BACK,
                f"{record.error}; resynced: every flow back on its path from the journal's "
                f"intended state ({rules} rule change(s))",
            )
    return outcome


async def resync_device(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journaling,
    name: str,
    tables: Tables,
    space: CookieSpace = DEFAULT_SPACE,
) -> Outcome | None:
    """Write switch ``name``'s rules of the intended placement where ``tables`` (its table,
    read now) differs, and remove our rules there no path needs; None when nothing
    differed. No other device is read or written."""
    placement = intended(topo, journal)
    the_plan = plan_resync(topo, tables, placement, time.time(), space, frozenset({name}))
    if the_plan is None:
        return None
    scratch = Journal(None)
    try:
        return await Executor(drivers, scratch).run(f"resync-{name}-{int(time.time())}", the_plan)
    finally:
        scratch.close()
