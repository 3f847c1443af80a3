"""The service's device states on fake switches: a switch that goes away makes ``/healthz``
``degraded`` (200, naming it); back with empty tables it is ``out_of_sync`` and resynced on
its own (``auto_resync``), its rules written from the journal, announced in the events;
with ``auto_resync: false`` it stays out of sync, named, until an operator resyncs."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from services.reroute.model.topology import Topology
from services.reroute.rules import initial_rules
from tests.unit.services.service.conftest import READER, ServerThread, settings
from tests.unit.services.service.fakes import FakeFabric

PATIENCE_S = 10.0  # the tracker probes every second (default timeout_s 2): well within


def until(http: httpx.Client, status: str, device: str | None = None) -> dict[str, object]:
    """``/healthz`` once it says ``status`` (and names ``device``, when given)."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        body: dict[str, object] = http.get("/healthz").json()
        named = device is None or device in body["devices"]  # type: ignore[operator]
        if body["status"] == status and named:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def test_a_switch_back_with_empty_tables_is_resynced(topo: Topology, tmp_path: Path) -> None:
    fake = FakeFabric(topo)
    br2 = fake.switches["br2"]
    with ServerThread(settings(topo, tmp_path / "j.sqlite"), fake.drivers) as srv:
        public = srv.http(None)
        healthy = public.get("/healthz").json()
        assert healthy["status"] == "ok" and healthy["devices"] == {}
        with srv.client().events() as events:
            br2.down = "connection refused"
            assert until(public, "degraded", "br2")["devices"] == {"br2": "down"}
            br2.table = {}  # it restarted cold
            br2.down = None
            until(public, "ok")
            kinds: list[tuple[str, object]] = []
            for event in events:  # in order; the last awaited is the device up again
                kinds.append((event.kind, event.data.get("state")))
                if kinds[-1] == ("device", "up"):
                    break
        assert sorted(map(str, br2.table.values())) == sorted(map(str, initial_rules(topo)["br2"]))
        states = [s for k, s in kinds if k == "device"]
        assert states[:3] == ["down", "out_of_sync", "up"], kinds
        assert ("resync", "started") in kinds and ("resync", "done") in kinds, kinds


def test_without_auto_resync_it_stays_out_of_sync(topo: Topology, tmp_path: Path) -> None:
    fake = FakeFabric(topo)
    br2 = fake.switches["br2"]
    config = settings(topo, tmp_path / "j.sqlite", auto_resync=False)
    with ServerThread(config, fake.drivers) as srv:
        br2.down = "connection refused"
        until(srv.http(None), "degraded", "br2")
        br2.table, br2.down = {}, None
        body = until(srv.http(None), "degraded", "br2")
        deadline = time.monotonic() + PATIENCE_S
        while body["devices"] != {"br2": "out_of_sync"}:
            assert time.monotonic() < deadline, body
            body = srv.http(None).get("/healthz").json()
        (health,) = [
            d for d in srv.http(READER).get("/v1/health").json()["devices"] if d["name"] == "br2"
        ]
        assert health["state"] == "out_of_sync" and "rules the journal expects" in health["error"]
        assert br2.table == {} and br2.applied == 0
