"""Admission reads the devices once: the warm-up at start changes nothing, and an idle
reroute is planned by the worker on its own read (the admission adds none)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.reroute.engine.engine import Engine
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from tests.unit.services.service.conftest import ROOT, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric

FLOW = "10.10.0.1>10.10.0.2"


def two_site() -> Topology:
    return load_topology(ROOT / "topologies" / "two-site-longhaul.yaml")


def test_the_warm_up_at_start_reads_but_changes_and_records_nothing(tmp_path: Path) -> None:
    topo = two_site()
    fake = FakeFabric(topo)
    before = fake.snapshot()
    with ServerThread(
        settings(topo, tmp_path / "j.sqlite", scope=frozenset({"sw1"})), fake.drivers
    ):
        assert fake.switches["sw1"].reads > 0  # it ran the read path before serving
        assert fake.snapshot() == before
        assert fake.switches["sw1"].applied == 0
    journal = Journal(tmp_path / "j.sqlite")
    try:
        assert journal.history(10) == []
    finally:
        journal.close()


def test_an_idle_reroute_reads_the_devices_as_often_as_the_engine_alone(tmp_path: Path) -> None:
    topo = two_site()
    alone = FakeFabric(topo)
    intent = Intent(flows=(FlowSpec.parse(FLOW),), to_path="standby")
    engine = Engine(
        topo=topo,
        drivers={"sw1": alone.switches["sw1"]},
        journal=Journal(None),
        scope=frozenset({"sw1"}),
    )
    _, outcome = asyncio.run(engine.apply(intent))
    assert outcome.state is RerouteState.DONE, outcome.error
    fake = FakeFabric(topo)
    with ServerThread(
        settings(topo, tmp_path / "j.sqlite", scope=frozenset({"sw1"})), fake.drivers
    ) as srv:
        client = srv.client()
        sw1 = fake.switches["sw1"]
        reads = sw1.reads
        view = client.create([FLOW], "standby", wait_s=5)
        assert view.state is RerouteState.DONE, view.error
        assert sw1.reads - reads == alone.switches["sw1"].reads
        assert fake.snapshot()["sw1"] == alone.snapshot()["sw1"]
        reads = sw1.reads
        again = client.create([FLOW], "standby", wait_s=0)  # refused at once: one read
        assert again.status == 201 and again.state is RerouteState.REJECTED
        assert sw1.reads - reads == 1
