"""Planning: ``plan(topology, tables, intent, now) -> Plan``. Pure: no I/O, time injected.

``plan`` chooses the planner: a target path whose cross-connects are all present moves
flows between electrical paths (``electronic``); one that needs new cross-connects
reconfigures an optical switch (``optical``, built on ``electronic``): make-before-break
from where the flows are when the change leaves their path, else parked on ``via``.
``restore`` plans recoveries; ``plan`` (the module) holds the types every planner returns;
``order`` is the ordering table every planner lays its steps out by (phases, concurrency,
checkpoints, one row per kind of plan).

The package attribute ``plan`` is the function (defined after the submodule is imported):
take the types with ``from services.reroute.planning.plan import Plan``, not with
``import services.reroute.planning.plan as ...`` (that form finds the function).
"""

from __future__ import annotations

from drivers.gcpause import gc_paused
from services.reroute.errors import PlanError, option
from services.reroute.model.intent import Intent, Strategy
from services.reroute.model.topology import Circuit, Topology
from services.reroute.planning.electronic import initial_optics, plan_electronic
from services.reroute.planning.optical import plan_optical
from services.reroute.planning.plan import Plan
from services.reroute.rules import DEFAULT_SPACE, CookieSpace
from services.reroute.tables import Tables

__all__ = ["no_lock_to_wait", "plan"]


def plan(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    optics: frozenset[Circuit] | None = None,
    scope: frozenset[str] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> Plan:
    """The plan of ``intent`` on ``tables`` with the optical switches' current circuits
    ``optics`` (default: the topology's initial ones). A target path that needs circuits not
    present is an optical reconfiguration (``services.reroute.planning.optical``).

    ``scope``: the switches this instance manages (one site of a two-site fabric); only
    their rules are planned, and nothing is cleaned (the other site may still send on the
    old path; per-path receive rules are harmless). None: every switch.

    ``space``: the deployment's cookies (``rules.CookieSpace``), those ``tables`` were read
    with and the plan writes."""
    with gc_paused():
        return _plan(topo, tables, intent, now, optics, scope, space)


def _plan(
    topo: Topology,
    tables: Tables,
    intent: Intent,
    now: float,
    optics: frozenset[Circuit] | None,
    scope: frozenset[str] | None,
    space: CookieSpace,
) -> Plan:
    _refuse_unused(intent)
    if optics is None:
        optics = initial_optics(topo)
    to = topo.paths.get(intent.to_path)
    if to is not None and not to.circuits <= optics:
        return plan_optical(topo, tables, optics, intent, now, space)
    if intent.via is not None:
        via = option("via")
        raise PlanError(
            f"{via} is for moves that reconfigure an optical switch; path {intent.to_path} "
            f"needs no new cross-connects, and the flows move to it from where they are: "
            f"leave out {via}"
        )
    if intent.lock_timeout_s is not None:
        raise PlanError(no_lock_to_wait(topo, intent.to_path))
    return plan_electronic(topo, tables, intent, now, partial_ok=False, scope=scope, space=space)


def no_lock_to_wait(topo: Topology, to_path: str) -> str:
    """The refusal of a lock timeout on a move to ``to_path`` that waits for no optical
    lock: the path crosses no optical switch, or its cross-connects are all made."""
    lock = option("lock_timeout_ms")
    to = topo.paths.get(to_path)
    why = (
        "its cross-connects are all made" if to and to.circuits else "it crosses no optical switch"
    )
    return (
        f"{lock} bounds the wait for a new optical circuit to lock; the move to path "
        f"{to_path} has no optical step ({why}): leave it out"
    )


def _refuse_unused(intent: Intent) -> None:
    """An option the intent's strategy would ignore is refused, never silently dropped."""
    if intent.strategy is Strategy.MBB and intent.bbm_gap_s:
        raise PlanError(
            f"{option('bbm_gap_ms')} is the extra outage of a break-before-make; a "
            f"make-before-break has none: leave it out, or ask {option('strategy', 'bbm')}"
        )
    if intent.strategy is Strategy.BBM and intent.drain_s is not None:
        raise PlanError(
            f"{option('drain_ms')} lets packets in flight on the old path arrive before its "
            "rules go, in a make-before-break; a break-before-make removes them first: "
            f"leave it out, or ask {option('strategy', 'mbb')}"
        )
    if intent.strategy is Strategy.BBM and intent.via is not None:
        raise PlanError(
            f"{option('via')} parks the flows during a make-before-break; a break-before-make "
            f"parks nothing: leave it out, or ask {option('strategy', 'mbb')}"
        )
