"""Ryu ofctl_rest as a test peer, controlling a private OVS bridge (``controller_site``):

- the EMULATOR (``python -m emulators.ryu``): network namespace ``NS``, bridge ``brryu``;
- real Ryu 4.34 (``fabric.kinds.ryu_rest.peer``, built by ``fabric.peers``): namespace
  ``rr-test-ryupeer``, bridge ``brryupeer``.

Both bridges have datapath id 1 (each its own OVS)."""

from __future__ import annotations

from pathlib import Path

import httpx

from fabric.kinds.ryu_rest import peer as ryupeer
from tests.drivers.controller_site import (
    DPID,
    Controller,
    ControllerSite,
    Emulator,
    Layout,
    build,
    tear_down,
)

LAYOUT = Layout(
    kind="ryu", ns="rr-test-ryu", bridge="brryu", mgmt_host="rrryu-host",
    mgmt_switch="rrryu-sw", host_ip="169.254.215.1", switch_ip="169.254.215.2", rest="rest",
)  # fmt: skip
REAL = Layout(
    kind="ryupeer", ns="rr-test-ryupeer", bridge="brryupeer", mgmt_host="rrryup-host",
    mgmt_switch="rrryup-sw", host_ip="169.254.216.1", switch_ip="169.254.216.2", rest="",
)  # fmt: skip
NS, BRIDGE, HOST_IP = LAYOUT.ns, LAYOUT.bridge, LAYOUT.host_ip
__all__ = [
    "DPID", "HOST_IP", "NS", "Emulator", "RyuSite", "start_emulator", "start_real_site",
    "start_site",
]  # fmt: skip


class RyuSite(ControllerSite):
    """The site's OVS and the controller (emulator or real Ryu) controlling its bridge."""

    def reset(self) -> None:
        """An empty table, no table limit, every port's link up."""
        self.reset_bridge()


def start_emulator(workdir: Path, *, openflow_host: str) -> Emulator:
    """A Ryu emulator whose OpenFlow side listens on ``openflow_host``."""
    return Emulator.spawn(LAYOUT, workdir, openflow_host=openflow_host)


def connected(controller: Controller) -> bool:
    """The controller lists the site's datapath."""
    with httpx.Client(base_url=controller.base_url, timeout=5.0) as http:
        return DPID in http.get("/stats/switches").json()


def start_site(workdir: Path) -> RyuSite:
    """OVS in ``NS`` with ``brryu``, and an emulator controlling it (stop with stop_site)."""
    ovs = build(LAYOUT, workdir)
    emulator = start_emulator(workdir / "emulator", openflow_host=HOST_IP)
    site = RyuSite(layout=LAYOUT, ovs=ovs, emulator=emulator)
    site.connect(emulator, connected)
    return site


def start_real_site(workdir: Path) -> RyuSite:
    """OVS in ``rr-test-ryupeer`` with ``brryupeer``, controlled by real Ryu 4.34 (stop
    with stop_real_site; PeerMissing when Ryu cannot be had here)."""
    ovs = build(REAL, workdir)
    ryu = ryupeer.start(workdir / "ryu", "ryu", openflow_host=REAL.host_ip)
    site = RyuSite(layout=REAL, ovs=ovs, emulator=ryu)
    site.connect(ryu, connected)
    return site


def stop_site(workdir: Path, site: RyuSite | None) -> None:
    """Everything ``start_site`` made, stopped and removed."""
    tear_down(LAYOUT, workdir, None if site is None else site.emulator)


def stop_real_site(workdir: Path, site: RyuSite | None) -> None:
    """Everything ``start_real_site`` made, stopped and removed."""
    tear_down(REAL, workdir, None if site is None else site.emulator)
