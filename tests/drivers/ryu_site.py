"""The Ryu ofctl_rest EMULATOR (``python -m fabric.ryu``) as a test peer, and a private OVS
whose bridge it controls (``controller_site``): network namespace ``NS``, bridge ``brryu``,
datapath id 1."""

from __future__ import annotations

from pathlib import Path

from tests.drivers.controller_site import (
    DPID,
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
NS, BRIDGE, HOST_IP = LAYOUT.ns, LAYOUT.bridge, LAYOUT.host_ip
__all__ = ["DPID", "HOST_IP", "NS", "Emulator", "RyuSite", "start_emulator", "start_site"]


class RyuSite(ControllerSite):
    """The site's OVS and the emulator controlling its bridge."""

    def reset(self) -> None:
        """An empty table, no table limit, every port's link up."""
        self.reset_bridge()


def start_emulator(workdir: Path, *, openflow_host: str) -> Emulator:
    """A Ryu emulator whose OpenFlow side listens on ``openflow_host``."""
    return Emulator.spawn(LAYOUT, workdir, openflow_host=openflow_host)


def connected(emulator: Emulator) -> bool:
    """The emulator lists the site's datapath."""
    with emulator.http() as http:
        return DPID in http.get("/stats/switches").json()


def start_site(workdir: Path) -> RyuSite:
    """OVS in ``NS`` with ``brryu``, and an emulator controlling it (stop with stop_site)."""
    ovs = build(LAYOUT, workdir)
    emulator = start_emulator(workdir / "emulator", openflow_host=HOST_IP)
    site = RyuSite(layout=LAYOUT, ovs=ovs, emulator=emulator)
    site.connect(emulator, connected)
    return site


def stop_site(workdir: Path, site: RyuSite | None) -> None:
    """Everything ``start_site`` made, stopped and removed."""
    tear_down(LAYOUT, workdir, None if site is None else site.emulator)
