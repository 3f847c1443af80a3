"""The ordering table (``planning.order``): every planner lays its steps out by its row,
and a change to a row changes the plans (no planner orders phases itself)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import MappingProxyType

import pytest

from services.reroute.engine.resync import plan_resync
from services.reroute.model.intent import Intent, Strategy
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.planning.order import ORDER, STAGE, Order, PhaseName, Row
from services.reroute.planning.plan import Plan, Step, StepKind, laid_out
from services.reroute.planning.restore import plan_restore
from services.reroute.rules import host_flow, initial_rules
from services.reroute.tables import Tables, apply_changes, tables_from

ROOT = Path(__file__).resolve().parents[4]
NGNCS = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
LONG = host_flow(NGNCS.paths["long"])
TABLES = tables_from(initial_rules(NGNCS))


def _run(tables: Tables, p: Plan, phases: int | None = None) -> Tables:
    """``tables`` once the first ``phases`` phases of ``p`` ran (all: None)."""
    for phase in p.phases[:phases]:
        for step in phase.steps:
            if step.changes:
                tables = apply_changes(tables, step.device, step.changes)
    return tables


def _to(path: str, strategy: Strategy = Strategy.MBB, via: str | None = None) -> Intent:
    return Intent(flows=(LONG,), to_path=path, strategy=strategy, via=via)


def plans() -> dict[Order, Plan]:
    """A plan of every order, from the planner that makes it."""
    on_temporary = _run(TABLES, plan(NGNCS, TABLES, _to("temporary"), 0.0))
    made_only = _run(TABLES, plan(NGNCS, TABLES, _to("temporary"), 0.0), phases=1)
    cleanup = plan_restore(NGNCS, made_only, {"long": (LONG,)}, ["temporary"], 0.0)
    empty_br2 = {**TABLES, "br2": {}}
    resync = plan_resync(NGNCS, empty_br2, {n: (host_flow(p),) for n, p in NGNCS.paths.items()
                                            if p.initial}, 0.0)  # fmt: skip
    assert resync is not None and len(cleanup) == 1
    return {
        Order.ELECTRONIC_MBB: plan(NGNCS, TABLES, _to("temporary"), 0.0),
        Order.ELECTRONIC_BBM: plan(NGNCS, TABLES, _to("temporary", Strategy.BBM), 0.0),
        Order.OPTICAL_MBB_PARKED: plan(NGNCS, TABLES, _to("short", via="temporary"), 0.0),
        Order.OPTICAL_MBB_FROM_HERE: plan(NGNCS, on_temporary, _to("short"), 0.0),
        Order.OPTICAL_BBM: plan(NGNCS, TABLES, _to("short", Strategy.BBM), 0.0),
        Order.CLEANUP: cleanup[0],
        Order.RESYNC: resync,
    }


@pytest.mark.parametrize("order", list(Order))
def test_every_plan_follows_its_row(order: Order) -> None:
    """The plan's phases are its row's, in its order, concurrent where the row says; its
    checkpoint (if any) at the row's (or, that phase empty, the phase before it)."""
    p = plans()[order]
    rows = {r.phase: r for r in ORDER[order]}
    names = [ph.name for ph in p.phases]
    assert names == [r.phase for r in ORDER[order] if r.phase in names]
    assert len(names) >= 2 or order is Order.CLEANUP
    for phase in p.phases:
        assert phase.concurrent is rows[phase.name].concurrent, phase.name
    marked = [r.phase for r in ORDER[order] if r.checkpoint]
    assert [ph.name for ph in p.phases if ph.rest] == [m for m in marked if m in names]


def test_a_changed_row_changes_the_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reordered rows (the old path's removal before the circuits change) and a changed
    concurrency reach the plans: the planners take both from the table."""
    P = PhaseName
    parked = [r for r in ORDER[Order.OPTICAL_MBB_PARKED] if r.phase is not P.PARK_CLEAN]
    at = [r.phase for r in parked].index(P.CIRCUITS)
    parked.insert(at, Row(phase=P.PARK_CLEAN, concurrent=True))
    serial = tuple(Row(phase=r.phase) for r in ORDER[Order.ELECTRONIC_MBB])
    table = {**ORDER, Order.OPTICAL_MBB_PARKED: tuple(parked), Order.ELECTRONIC_MBB: serial}
    module = importlib.import_module("services.reroute.planning.plan")  # not the function
    monkeypatch.setattr(module, "ORDER", MappingProxyType(table))
    optical = plan(NGNCS, TABLES, _to("short", via="temporary"), 0.0)
    names = [ph.name for ph in optical.phases]
    assert names.index(P.PARK_CLEAN) == names.index(P.CIRCUITS) - 1
    assert next(ph for ph in optical.phases if ph.name is P.PARK_CLEAN).concurrent
    electronic = plan(NGNCS, TABLES, _to("temporary"), 0.0)
    assert not any(ph.concurrent for ph in electronic.phases)


def test_a_phase_the_order_lacks_is_refused_and_an_empty_checkpoint_passes_back() -> None:
    wait = (Step(kind=StepKind.WAIT, duration_s=0.1),)
    with pytest.raises(ValueError, match="electronic-mbb order has no phase await-lock"):
        laid_out(Order.ELECTRONIC_MBB, {PhaseName.MAKE: wait, PhaseName.AWAIT_LOCK: wait})
    rest = (("temporary", (LONG,)),)
    steps = {PhaseName.PARK_SHIFT: wait, PhaseName.PARK_VERIFY_SHIFT: ()}
    phases = laid_out(Order.OPTICAL_MBB_PARKED, steps, rest)
    assert [(ph.name, ph.rest) for ph in phases] == [(PhaseName.PARK_SHIFT, rest)]


def test_every_phase_has_a_stage_and_a_row() -> None:
    assert set(STAGE) == set(PhaseName)
    assert {r.phase for rows in ORDER.values() for r in rows} == set(PhaseName)
    for rows in ORDER.values():
        assert len({r.phase for r in rows}) == len(rows)  # a phase once per order
