"""``reroute serve`` as a real process on the fabric: SIGTERM drains, kill -9 mid-reroute
is recovered on restart from what the devices hold (finished forward once its shift
landed, else rolled back; "interrupted"; the flow on exactly one path), and ovs-vswitchd
restarted under it is reconnected to without restarting the service."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.fabric import Fabric
from fabric.restart import restart_vswitchd, saved_flows
from fabric.vswitch import alive
from services.reroute.errors import ApiError
from services.reroute.model.topology import Topology
from services.reroute.rules import path_tag, tag_of
from services.reroute.service.client import RerouteClient
from services.reroute.store.records import RerouteState
from services.reroute.tables import Tables
from tests.e2e.conftest import reroute as reroute_cli
from tests.e2e.service.conftest import serve_yaml
from tests.unit.services.service.conftest import NGNCS, OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import (
    ingress_paths,
    journal_records,
    path_of_flow,
    tables,
)

pytestmark = pytest.mark.fabric
FLOW = "10.0.0.2>10.0.0.3"
DEVICES = ("br1", "br2", "br3", "br4", "ost1")


@pytest.fixture
def config(svc_fabric: tuple[Topology, Fabric], tmp_path: Path) -> Iterator[Path]:
    _, fab = svc_fabric
    path = serve_yaml(fab, tmp_path, f"{{token: {OPERATOR}, role: operator}}")
    yield path
    topo, fab = svc_fabric
    assert path_of_flow(topo, fab) == "long"


def wait_for_step(client: RerouteClient, reroute_id: str, prefix: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if any(
            s.description.startswith(prefix) and s.state == "started"
            for s in client.get(reroute_id).steps
        ):
            return
        time.sleep(0.01)
    raise AssertionError(f"reroute {reroute_id} never started a {prefix!r} step")


def test_kill_9_mid_reroute_then_restart_finishes_or_rolls_it_back(
    svc_fabric: tuple[Topology, Fabric], config: Path
) -> None:
    """kill -9 while the reroute drains; the restart recovers it from what the devices
    held at the kill: forward (``done`` on temporary) once a shift landed there, back
    (``rolled_back`` to long) otherwise; either way only that path's rules are left."""
    topo, fab = svc_fabric
    serve = ServeProcess(config)
    try:
        client = serve.client()
        view = client.create([FLOW], "temporary", drain_ms=20_000)
        wait_for_step(client, view.id, "drain")  # shifted: traffic on temporary, old rules kept
        assert path_of_flow(topo, fab) == "temporary"
    finally:
        serve.kill()
    held = tables(topo, fab)  # what the devices hold at the kill
    tag = {p: path_tag(topo, p) for p in ("long", "temporary")}
    assert set(tag.values()) <= rule_tags(held), "killed after its cleanup"
    forward = "temporary" in ingress_paths(topo, held)  # a shift landed (no circuit needed)
    on, gone = ("temporary", "long") if forward else ("long", "temporary")
    serve = ServeProcess(config)  # healthy = recovered
    try:
        after = serve.client().get(view.id)
        state = RerouteState.DONE if forward else RerouteState.ROLLED_BACK
        assert after.state is state and "interrupted" in (after.error or ""), after
        assert [r.id for r in serve.client().list(state=state.value)] == [view.id]
        now = tables(topo, fab)
        assert path_of_flow(topo, fab, now) == on
        assert tag[gone] not in rule_tags(now), f"rules of {gone} left"  # exactly one path
        if forward:  # back where the fixture expects it
            back = serve.client().create([FLOW], "long", wait_s=30)
            assert back.state is RerouteState.DONE, back.error
    finally:
        assert serve.stop() == 0


def rule_tags(t: Tables) -> set[int]:
    """The path tags of every rule of ours on the bridges."""
    return {tag_of(r) or 0 for table in t.values() for r in table.values()}


def test_sigterm_finishes_the_running_reroute_and_keeps_the_pending_one(
    svc_fabric: tuple[Topology, Fabric], config: Path
) -> None:
    topo, fab = svc_fabric
    serve = ServeProcess(config)
    try:  # a failure here must not leave the service running on the fabric (it would
        # resync the next tests' cold-restarted switches to its own journal)
        client = RerouteClient(serve.url, OPERATOR, retries=0)
        running = client.create([FLOW], "temporary", drain_ms=1000)
        pending = client.create([FLOW], "long", drain_ms=0)
        wait_for_step(client, running.id, "drain")
        serve.terminate()
        deadline = time.monotonic() + 5
        while client.health().status != "draining":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(ApiError) as refused:
            client.create([FLOW], "long")
        assert refused.value.status == 503
        assert serve.stop() == 0
    finally:
        if serve.proc.poll() is None:
            serve.kill()
    states = {r.id: r.state for r, _ in journal_records(config.parent / "journal.sqlite")}
    assert states == {running.id: RerouteState.DONE, pending.id: RerouteState.PENDING}
    assert path_of_flow(topo, fab) == "temporary"
    serve = ServeProcess(config)  # the pending one runs after the restart
    try:
        assert serve.client().get(pending.id, wait_s=10).state is RerouteState.DONE
    finally:
        assert serve.stop() == 0
    log = serve.log.read_text()  # the operator's lines, one per reroute and per request
    for reroute in (running, pending):
        assert len(re.findall(rf"reroute id={reroute.id} state=done ms=[\d.]+\n", log)) == 1
        assert re.search(
            rf"request method=POST path=/v1/reroutes status=20[12] .*{reroute.id}", log
        )
    assert "request method=POST path=/v1/reroutes status=503" in log


def test_ovs_vswitchd_restarted_under_the_service(
    svc_fabric: tuple[Topology, Fabric], config: Path
) -> None:
    """ovs-vswitchd dies under ``reroute serve`` and comes back as ``ovs-ctl restart`` brings
    it (its tables saved and put back): meanwhile ``/v1/health`` names the switches down and
    a reroute fails before it changes anything; afterwards the flow is on one path, read
    back, the switches are up again and the next reroutes succeed on the same service."""
    topo, fab = svc_fabric
    serve = ServeProcess(config)
    try:
        client = serve.client()
        assert client.devices().down == []
        flows = saved_flows(fab, topo)
        pid = int((fab.state.ovs_dir / "ovs-vswitchd.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.005)
        try:
            health = client.devices()
            assert health.status == "degraded", health
            assert {"br1", "br2", "br3", "br4"} <= set(health.down), health
            during = client.create([FLOW], "temporary", wait_s=30)
            assert during.state is RerouteState.REJECTED, during
            assert "reconnecting" in (during.error or ""), during.error
        finally:
            restart_vswitchd(fab, topo, flows)
        assert path_of_flow(topo, fab) == "long"  # nothing of it half-applied
        deadline = time.monotonic() + 15
        while client.devices().down:
            assert time.monotonic() < deadline, client.devices()
            time.sleep(0.2)
        moved = client.create([FLOW], "temporary", wait_s=30)
        assert moved.state is RerouteState.DONE, moved.error
        assert path_of_flow(topo, fab) == "temporary"
        back = client.create([FLOW], "long", wait_s=30)
        assert back.state is RerouteState.DONE, back.error
    finally:
        assert serve.stop() == 0


def test_a_switch_restarted_cold_is_found_out_of_sync_and_resynced(
    svc_fabric: tuple[Topology, Fabric], config: Path
) -> None:
    """ovs-vswitchd dies and comes back with empty tables (no ``ovs-save``): ``/healthz``
    answers ``degraded`` (200) naming the switches while they are down or lack our rules;
    the service resyncs each from the journal on its own (``auto_resync``, the default),
    says so in its log, and is ``ok`` again: the flows are on their paths, read back from
    the switches, and the next reroute succeeds on the same service."""
    topo, fab = svc_fabric
    serve = ServeProcess(config)
    try:
        client = serve.client()
        moved = client.create([FLOW], "temporary", wait_s=30)  # the journal now says temporary
        assert moved.state is RerouteState.DONE, moved.error
        pid = int((fab.state.ovs_dir / "ovs-vswitchd.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.005)
        try:
            seen = _degraded(client, {"br1", "br2", "br3", "br4"})
            assert set(seen.values()) <= {"down", "hung"}, seen
        finally:
            restart_vswitchd(fab, topo)  # cold: the switches' tables are empty
        deadline = time.monotonic() + 20
        while (health := client.health()).status != "ok":
            assert health.status == "degraded", health
            assert time.monotonic() < deadline, client.devices()
            time.sleep(0.1)
        assert path_of_flow(topo, fab) == "temporary"  # rewritten from the journal
        log = serve.log.read_text()
        assert re.search(r"device name=br2 state=out_of_sync", log), log
        assert re.search(r"resync device=br2 state=done", log), log
        back = client.create([FLOW], "long", wait_s=30)
        assert back.state is RerouteState.DONE, back.error
    finally:
        assert serve.stop() == 0


def _degraded(client: RerouteClient, devices: set[str]) -> dict[str, str]:
    """``/healthz`` once it names every one of ``devices`` (within 10 s); their states."""
    deadline = time.monotonic() + 10
    while not devices <= set((health := client.health()).devices):
        assert time.monotonic() < deadline, health
        time.sleep(0.05)
    assert health.status == "degraded", health
    return {n: s for n, s in health.devices.items() if n in devices}


def test_the_command_line_names_switches_restarted_cold_out_of_sync(
    svc_fabric: tuple[Topology, Fabric], config: Path
) -> None:
    """No service running: ``reroute inventory check`` shows each device's state against
    the inventory's journal (none yet: the initial paths); after a cold restart of the
    switches it names them out_of_sync (exit 1), ``reroute fabric status`` too; after
    ``reroute recover --resync`` they are up again."""
    topo, fab = svc_fabric
    inventory = config.parent / "inventory.yaml"
    state_dir = f"state_dir: {config.parent / 'state'}"  # a journal of its own: none yet
    inventory.write_text(re.sub(r"(?m)^state_dir: .*$", state_dir, inventory.read_text()))
    check = ("inventory", "check", "--topology", str(NGNCS), "--inventory", str(inventory))
    before = reroute_cli(*check, check=False)
    assert before.returncode == 0, before.stdout + before.stderr
    assert _states(before.stdout) == dict.fromkeys(DEVICES, "up"), before.stdout
    pid = int((fab.state.ovs_dir / "ovs-vswitchd.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    while alive(pid):
        time.sleep(0.005)
    restart_vswitchd(fab, topo)  # cold: the switches' tables are empty
    cold = reroute_cli(*check, check=False)
    assert cold.returncode == 1, cold.stdout + cold.stderr
    states = _states(cold.stdout)
    assert {n: states[n] for n in ("br1", "br2", "br3", "br4")} == dict.fromkeys(
        ("br1", "br2", "br3", "br4"), "out_of_sync"
    ), cold.stdout
    assert "rules the journal expects on it are missing" in cold.stdout
    status = reroute_cli("fabric", "status", fab.state.name).stdout
    assert re.search(r"br2\s+ovs\s+out_of_sync", status), status
    resync = ("recover", "--resync", "--topology", str(NGNCS), "--inventory", str(inventory))
    reroute_cli(*resync)
    after = reroute_cli(*check, check=False)
    assert after.returncode == 0 and set(_states(after.stdout).values()) == {"up"}, after.stdout


def _states(out: str) -> dict[str, str]:
    """DEVICE -> STATE from the state table of ``reroute inventory check``."""
    rows = [line.split() for line in out.split("\nstate (", 1)[1].splitlines()[2:]]
    return {row[0]: row[2] for row in rows if row and row[0] in DEVICES}
