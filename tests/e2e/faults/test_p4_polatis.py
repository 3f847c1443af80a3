"""Faults under ``reroute serve`` on the P4Runtime fabric (one P4Runtime switch emulator
per bridge, the Polatis emulator for ost1), one device at a time (issue 29, part 6):
paused (SIGSTOP: hung) and killed. For each: a reroute that does not need the device
succeeds, hitless under the probe; one that needs it is refused within 2 x
device_timeout_s naming it, nothing changed (the flow read back on its one path); health
names it while it lasts; once it is back the next reroute succeeds on the same service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric import p4rtsite
from fabric.fabric import Fabric
from services.reroute.topology import Topology, load_topology
from tests.e2e.conftest import NGNCS, running
from tests.e2e.faults.harness import Service, paused, pid_of, serving

pytestmark = pytest.mark.fabric
P4 = NGNCS.with_name("ngncs-ost-p4.yaml")


@pytest.fixture(scope="module")
def p4() -> Iterator[tuple[Topology, Fabric]]:
    topo = load_topology(P4)
    with running(topo) as fab:
        yield topo, fab


@pytest.fixture
def svc(p4: tuple[Topology, Fabric], tmp_path: Path) -> Iterator[Service]:
    topo, fab = p4
    with serving(topo, fab, tmp_path) as svc:
        yield svc


def test_the_optical_switch_paused(svc: Service) -> None:
    """ost1 hung: an electrical move (long -> temporary) does not need it and succeeds; a
    move onto a path through it is refused; after SIGCONT it succeeds."""
    assert svc.path() == "long"
    with paused(pid_of(svc.fab, "ost1")):
        svc.health_names("ost1")
        svc.move("temporary")
        svc.refused_in_time("ost1", "long")
        assert svc.path() == "temporary"
    svc.until_up()
    svc.move("long")
    assert svc.path() == "long"


def test_a_p4_switch_paused_then_killed(svc: Service) -> None:
    """br1 (on long and temporary, not on short) hung: the flows leave temporary for short
    without it (its rules there owed, cleaned once it answers); a move back through it is
    refused. Then its agent killed (refused connections): the same refusal."""
    assert svc.path() == "long"
    svc.move("temporary")
    with paused(pid_of(svc.fab, "p4rt-br1")):
        svc.health_names("br1")
        moved = svc.move("short")  # from where the flows are: no parking needed
        assert moved.cleanup_pending == ("br1",), moved
        svc.refused_in_time("br1", "long", via="temporary")
    svc.until_up()
    svc.until_cleaned(moved.id)
    target = svc.fab.state.targets["br1"]
    p4rtsite.kill(svc.fab.state, "br1")
    try:
        svc.health_names("br1")
        svc.refused_in_time("br1", "long", via="temporary")
        assert svc.path(svc.circuits()) == "short"
    finally:
        p4rtsite.restart_warm(svc.fab.state, svc.fab.ovs, "br1", target)
    svc.until_up()
    svc.move("long", via="temporary")
    assert svc.path() == "long"
