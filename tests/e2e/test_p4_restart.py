"""A P4Runtime switch's agent restarted under ``reroute serve`` (issue 22, part 3): killed,
then started again as a warm restart (Stratum's --warmboot: the dataplane kept its
table). Meanwhile ``/v1/health`` names it down and a reroute fails before it changes
anything; afterwards the driver arbitrates again with its election id and the next
reroutes succeed on the same service, the flow on one path, read back. Then restarted
cold (no program, no entries): the service resyncs it on its own (issue 29, part 2)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from fabric.kinds import p4runtime as p4rtsite
from services.reroute.model.topology import load_topology
from services.reroute.store.records import RerouteState
from tests.e2e.conftest import NGNCS, running
from tests.unit.services.service.conftest import OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import bridge_tables, path_of_flow

pytestmark = pytest.mark.fabric
P4 = NGNCS.with_name("ngncs-ost-p4.yaml")
FLOW = "10.0.0.2>10.0.0.3"


def test_a_p4runtime_agent_restarted_under_the_service(tmp_path: Path) -> None:
    topo = load_topology(P4)
    with running(topo) as fab:
        (tmp_path / "serve.yaml").write_text(
            f"topology: {P4}\ninventory: {fab.state.inventory}\njournal: journal.sqlite\n"
            f"tokens: [{{token: {OPERATOR}, role: operator}}]\nstep_timeout_s: 5\n"
        )
        target = fab.state.inventory.read_text().split("br2:", 1)[1].split("target: ")[1]
        target = target.split()[0].strip("'\"")
        serve = ServeProcess(tmp_path / "serve.yaml")
        try:
            client = serve.client()
            assert client.devices().down == []
            p4rtsite.kill(fab.state, "br2")
            try:
                assert "br2" in client.devices().down
                during = client.create([FLOW], "temporary", wait_s=30)
                assert during.state is RerouteState.REJECTED, during
            finally:
                p4rtsite.restart_warm(fab.state, fab.ovs, "br2", target)
            assert (
                path_of_flow(topo, fab, bridge_tables(topo, fab)) == "long"
            )  # nothing of it half-applied
            deadline = time.monotonic() + 15
            while client.devices().down:
                assert time.monotonic() < deadline, client.devices()
                time.sleep(0.2)
            moved = client.create([FLOW], "temporary", wait_s=30)
            assert moved.state is RerouteState.DONE, moved.error
            assert path_of_flow(topo, fab, bridge_tables(topo, fab)) == "temporary"
            back = client.create([FLOW], "long", wait_s=30)
            assert back.state is RerouteState.DONE, back.error
            moved = client.create([FLOW], "temporary", wait_s=30)
            assert moved.state is RerouteState.DONE, moved.error
            # a cold restart: no program, no entries. The service finds it so (no_pipeline
            # or out of sync), puts the program back and rewrites our entries from the
            # journal (auto_resync), then reports every device up again
            p4rtsite.kill(fab.state, "br2")
            p4rtsite.restart_cold(fab.state, fab.ovs, "br2", target)
            deadline = time.monotonic() + 20
            while (health := client.health()).status != "ok" or "br2" not in seen(serve):
                assert time.monotonic() < deadline, (health, client.devices())
                time.sleep(0.1)
            assert path_of_flow(topo, fab, bridge_tables(topo, fab)) == "temporary"
            home = client.create([FLOW], "long", wait_s=30)
            assert home.state is RerouteState.DONE, home.error
        finally:
            assert serve.stop() == 0


def seen(serve: ServeProcess) -> str:
    """The devices the service's log says it resynced."""
    return " ".join(re.findall(r"resync device=(\S+) state=done", serve.log.read_text()))
