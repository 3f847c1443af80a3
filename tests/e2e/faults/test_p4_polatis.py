"""Faults under ``reroute serve`` on the P4Runtime fabric (one P4Runtime switch emulator
per bridge, the Polatis emulator for ost1), one device at a time (issue 29, part 6):
paused (SIGSTOP: hung), cut off (its packets dropped) and killed. For each: a reroute
that does not need the device succeeds, hitless under the probe; one that needs it is
refused within 2 x device_timeout_s naming it, nothing changed (the flow read back on its
one path); health names it while it lasts; once it is back the next reroute succeeds on
the same service."""

from __future__ import annotations

import pytest

from fabric.kinds import p4runtime as p4rtsite
from tests.e2e.conftest import NGNCS
from tests.e2e.faults.harness import Service, cut_off, paused, pid_of

pytestmark = pytest.mark.fabric
TOPOLOGY = NGNCS.with_name("ngncs-ost-p4.yaml")
# every device's timeout_s in the service's inventory (the drivers' default: 5 s): health's
# probe of a hung device ends at its driver's deadline, 2 s, not 5. These emulators answer
# in milliseconds, and reads at plan time already need them within 2 s (the inventory's
# device_timeout_s: the bound refused_in_time checks, unchanged)
TIMEOUT_S = 2.0


def test_the_optical_switch_paused(svc: Service) -> None:
    """ost1 hung: an electrical move (long -> temporary) does not need it and succeeds; a
    move onto a path through it is refused; after SIGCONT it succeeds."""
    assert svc.path() == "long"
    with paused(pid_of(svc.fab, "ost1")):
        svc.health_names("ost1", "hung")
        svc.move("temporary")
        svc.refused_in_time("ost1", "long")
        assert svc.path() == "temporary"
    svc.until_up()
    svc.move("long")
    assert svc.path() == "long"


@pytest.mark.parametrize("fault", ["paused", "cut off"])
def test_a_p4_switch_hung(svc: Service, fault: str) -> None:
    """br1 (on long and temporary, not on short) hung, its agent paused or its packets
    dropped: the flows leave temporary for short without it (its rules there owed, cleaned
    once it answers); a move back through it is refused."""
    assert svc.path() == "long"
    svc.move("temporary")
    port = int(svc.fab.state.targets["br1"].rsplit(":", 1)[1])
    with paused(pid_of(svc.fab, "p4rt-br1")) if fault == "paused" else cut_off(port):
        svc.health_names("br1", "hung", "down")
        moved = svc.move("short")  # from where the flows are: no parking needed
        assert moved.cleanup_pending == ("br1",), moved
        svc.refused_in_time("br1", "long", via="temporary")
        assert svc.path(svc.circuits()) == "short"
    svc.until_up()
    svc.until_cleaned(moved.id)
    svc.move("long", via="temporary")
    assert svc.path() == "long"


def test_a_p4_switch_killed(svc: Service) -> None:
    """br1's agent killed (its port refuses): a move through it is refused; after a warm
    restart (Stratum's --warmboot) the next one succeeds on the same service."""
    assert svc.path() == "long"
    target = svc.fab.state.targets["br1"]
    p4rtsite.kill(svc.fab.state, "br1")
    try:
        svc.health_names("br1", "down")
        svc.refused_in_time("br1", "temporary")
        assert svc.path() == "long"
    finally:
        p4rtsite.restart_warm(svc.fab.state, svc.fab.ovs, "br1", target)
    svc.until_up()
    svc.move("temporary")
    svc.move("long")
