"""Recovery by a service that manages one switch of two (one site of the two-site
deployment): it plans only the directions whose ingress it owns."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.reroute.engine.engine import recover
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.fakes import FakeFabric

TOPO = Path(__file__).resolve().parents[3] / "topologies" / "two-site-containers.yaml"


def test_a_scoped_service_recovers_a_reroute_cut_in_the_middle(tmp_path: Path) -> None:
    topo = load_topology(TOPO)
    fake = FakeFabric(topo)
    scope = frozenset({"sw1"})
    before = fake.snapshot()["sw1"]
    intent = Intent(flows=(FlowSpec.parse("10.10.0.1>10.10.0.2"),), to_path="standby")
    tables = {n: dict(t) for n, t in fake.snapshot().items() if n in scope}
    cut = plan(topo, tables, intent, now=0.0, scope=scope)
    journal = Journal(tmp_path / "journal.sqlite")
    journal.create("cut", cut)  # the process died right after it began
    first = cut.steps()[0]  # its first change made, nothing more
    asyncio.run(fake.switches["sw1"].apply(first.changes))
    assert fake.snapshot()["sw1"] != before
    drivers = {"sw1": fake.switches["sw1"]}
    assert asyncio.run(recover(topo, drivers, journal, scope)) == ["cut"]
    record = journal.get("cut")
    assert record is not None and record.state is RerouteState.ROLLED_BACK
    after = fake.snapshot()["sw1"]
    # the flow's ingress is back on the long-haul path (a scoped service leaves the other
    # path's transit rules: it never collects garbage, restore.plan_restore)
    assert before.items() <= after.items()
    journal.close()
