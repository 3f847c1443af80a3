"""Resync (services/reroute/engine/resync.py): the intended placement from the initial paths and
the journal, and the plan from any tables to its rules."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from drivers.base import FlowChange, FlowOp, FlowRule
from drivers.errors import DeviceUnreachable
from services.reroute.engine.engine import Engine
from services.reroute.engine.resync import intended, plan_resync, wanted
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.planning.plan import StepKind
from services.reroute.rules import initial_rules
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import apply_changes, tables_from
from tests.unit.services.service.fakes import FakeSwitch

NGNCS = Path(__file__).resolve().parents[3] / "topologies" / "ngncs-ost.yaml"
TOPO = load_topology(NGNCS)
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")
DIRECT = FlowSpec.parse("10.0.0.1>10.0.0.4")


def test_the_initial_paths_are_intended_until_the_journal_says_otherwise() -> None:
    journal = Journal(None)
    assert intended(TOPO, journal) == {"direct": (DIRECT,), "long": (FLOW,)}
    start = tables_from(initial_rules(TOPO))
    moved = plan(TOPO, start, Intent(flows=(FLOW,), to_path="temporary"), now=0.0)
    journal.create("a", moved)
    journal.finish("a", RerouteState.DONE)
    assert intended(TOPO, journal) == {"direct": (DIRECT,), "temporary": (FLOW,)}
    back = plan(TOPO, start, Intent(flows=(FLOW,), to_path="temporary"), now=1.0)
    journal.create("b", back)  # origins: long (planned on the start tables)
    journal.finish("b", RerouteState.FAILED, "rollback failed")
    assert intended(TOPO, journal) == {"direct": (DIRECT,), "long": (FLOW,)}


def test_empty_tables_get_every_intended_rule_transit_before_ingress() -> None:
    placement = {"direct": (DIRECT,), "long": (FLOW,)}
    empty = {b: {} for b in initial_rules(TOPO)}
    the_plan = plan_resync(TOPO, empty, placement, now=0.0)
    assert the_plan is not None
    assert [p.name for p in the_plan.phases] == ["make", "shift"]
    written = [c.rule for s in the_plan.steps() for c in s.changes]
    assert sorted(map(str, written)) == sorted(
        str(r) for rs in initial_rules(TOPO).values() for r in rs
    )
    assert all(c.op is FlowOp.ADD for s in the_plan.steps() for c in s.changes)
    # and each step's undo takes it back out
    assert all(u.op is FlowOp.DELETE for s in the_plan.steps() for u in s.undo)


def test_tables_as_intended_need_nothing_and_strays_are_removed_last() -> None:
    placement = {"direct": (DIRECT,), "long": (FLOW,)}
    start = tables_from(initial_rules(TOPO))
    assert plan_resync(TOPO, start, placement, now=0.0) is None
    stray = next(iter(wanted(TOPO, {"temporary": (FLOW,)})["br1"].values()))
    dirty = apply_changes(start, "br1", (FlowChange(op=FlowOp.ADD, rule=stray),))
    the_plan = plan_resync(TOPO, dirty, placement, now=0.0)
    assert the_plan is not None
    (step,) = the_plan.steps()
    assert step.kind is StepKind.REMOVE and step.device == "br1"
    assert [c.rule for c in step.changes] == [stray]


def test_one_switch_is_resynced_alone_while_another_is_down() -> None:
    """br2 came back empty, br3 does not answer: br2 gets its intended rules (transit
    before ingress, as the whole resync does); br3 is neither read nor written."""

    class Down(FakeSwitch):
        async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
            raise DeviceUnreachable(self.name, "connection refused")

        async def apply(self, changes: Sequence[FlowChange]) -> None:
            raise DeviceUnreachable(self.name, "connection refused")

    rules = initial_rules(TOPO)
    switches = {s.name: FakeSwitch(s.name, rules.get(s.name, [])) for s in TOPO.switches}
    switches["br3"] = Down("br3", rules["br3"])
    switches["br2"].table = {}
    journal = Journal(None)
    engine = Engine(topo=TOPO, drivers=switches, journal=journal)  # type: ignore[arg-type]
    outcome = asyncio.run(engine.resync_device("br2"))
    assert outcome is not None and outcome.state is RerouteState.DONE, outcome
    assert sorted(map(str, switches["br2"].table.values())) == sorted(map(str, rules["br2"]))
    assert switches["br3"].applied == 0
    assert asyncio.run(engine.resync_device("br2")) is None  # nothing differs now
    only = plan_resync(TOPO, {"br2": {}, "br3": {}}, intended(TOPO, journal), 0.0, devices={"br2"})
    assert only is not None and {s.device for s in only.steps()} == {"br2"}
