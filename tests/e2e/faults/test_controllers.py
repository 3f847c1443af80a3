"""Faults of a controller under ``reroute serve`` (issue 29, part 6): seed 003's Ryu (real
Ryu 4.34 where it can be had, else the ofctl_rest emulator) paused (SIGSTOP: every switch
behind it hung). A reroute (every one needs the controller) is refused within 2 x
device_timeout_s naming a switch, nothing changed; health names the switches; after
SIGCONT the next reroute succeeds on the same service, hitless under the probe."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import NGNCS
from tests.e2e.faults.harness import Service, paused, pid_of

pytestmark = pytest.mark.fabric
TOPOLOGY = NGNCS.with_name("ngncs-ost-ryu.yaml")


def test_the_controller_paused(svc: Service) -> None:
    assert svc.path() == "long"
    with paused(pid_of(svc.fab, "ryu")):
        svc.health_names("br2", "hung")
        svc.refused_in_time("br", "temporary")  # the first switch of the new path it asks
        assert svc.path() == "long"
    svc.until_up()
    svc.move("temporary")
    svc.move("long")
    assert svc.path() == "long"
