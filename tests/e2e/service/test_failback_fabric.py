"""The cycle a failover monitor starts, through the HTTP API on the real fabric under the
probe: long -> temporary (the monitor's failover), temporary -> short (the operator's
optical reconfiguration: no ``via``, the flows wait on temporary while ost1 switches and
the new circuit locks), short -> long later (``via`` temporary: that change cuts short).
Each is hitless: the probe loses nothing beyond the fabric's own drops, and the flow reads
back on each path (both directions delivered through the circuits ost1 holds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.measuring import fabric_drops
from fabric.fabric import Fabric
from services.reroute.model.topology import Topology
from services.reroute.store.records import RerouteState
from tests.e2e.conftest import Probe, wait_arriving
from tests.unit.services.service.conftest import ServerThread, settings
from tests.unit.services.service.fabric_state import optics, path_of_flow

pytestmark = pytest.mark.fabric
FLOW = "10.0.0.2>10.0.0.3"
CYCLE = (("temporary", None), ("short", None), ("long", "temporary"))  # (to_path, via)
PROBE_S = 8.0  # the cycle took 1.5 s here: room for a busy 2-core machine
RATE = 1000


def test_failover_then_failback_through_the_api_loses_nothing(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> None:
    topo, fab = svc_fabric
    assert path_of_flow(topo, fab) == "long"
    with ServerThread(settings(topo, tmp_path / "journal.sqlite")) as srv:
        client = srv.client()
        drops = fabric_drops(fab)
        probe = Probe(fab, PROBE_S, RATE)
        wait_arriving(fab, "vm3")
        seen = []
        for to, via in CYCLE:
            view = client.create([FLOW], to, via=via, wait_s=30)
            on = path_of_flow(topo, fab, circuits=optics(topo, fab))
            seen.append((to, view.state, view.error, on, client.flows().get(to, ())))
        sending = probe.send.poll() is None
        report = probe.report()
        dropped = fabric_drops(fab) - drops
    print(f"failover and failback: probe lost {report['lost']} of {report['sent']}, "
          f"the fabric's OVS dropped {dropped}")  # fmt: skip
    for to, state, error, on, listed in seen:
        assert state is RerouteState.DONE, (to, error)
        assert on == to and listed == ("10.0.0.2/32>10.0.0.3/32",), (to, on, listed)
    assert sending, f"the probe ended before the cycle did: lengthen PROBE_S ({PROBE_S} s)"
    assert report["sent"] > 0 and report["lost"] <= dropped, report
    assert path_of_flow(topo, fab) == "long"  # and ost1 back to its initial circuits
