"""The ODL northbound EMULATOR (``python -m emulators.odl``) as a test peer, and a private OVS
whose bridge it controls (``controller_site``): network namespace ``NS``, bridge ``brodl``,
node ``openflow:1``; its statistics poll every ``STATS_INTERVAL_S``."""

from __future__ import annotations

import os
from pathlib import Path
from shutil import which

import httpx

from tests.drivers.controller_site import (
    ControllerSite,
    Emulator,
    Layout,
    build,
    tear_down,
    wait_for,
)

AUTH = ("admin", "admin")
LAYOUT = Layout(
    kind="odl", ns="rr-test-odl", bridge="brodl", mgmt_host="rrodl-host",
    mgmt_switch="rrodl-sw", host_ip="169.254.214.1", switch_ip="169.254.214.2",
    rest="northbound", auth=AUTH,
)  # fmt: skip
NS, BRIDGE, HOST_IP = LAYOUT.ns, LAYOUT.bridge, LAYOUT.host_ip
NODE = "openflow:1"
STATS_INTERVAL_S = 0.2
NODES = "/rests/data/opendaylight-inventory:nodes"
CONFIG_NODE = f"{NODES}/node=openflow%3A1"
__all__ = [
    "AUTH", "CONFIG_NODE", "HOST_IP", "NS", "Emulator", "OdlSite", "start_emulator",
    "start_site", "stop_site", "wait_for",
]  # fmt: skip


class OdlSite(ControllerSite):
    """The site's OVS and the emulator controlling its bridge."""

    def reset(self) -> None:
        """No config flows, an empty table, no table limit, every port's link up."""
        with self.emulator.http() as http:
            for table in _config_tables(http):
                http.delete(f"{CONFIG_NODE}/flow-node-inventory:table={table}")
        self.reset_bridge()
        wait_for(lambda: not _operational_flows(self.emulator), "an empty operational table")

    def control(self, emulator: Emulator) -> None:
        """Make ``emulator`` the bridge's controller; returns once it has the node."""
        self.connect(emulator, has_node)


def start_emulator(workdir: Path, *, openflow_host: str, stats_interval_s: float) -> Emulator:
    """An ODL emulator whose OpenFlow side listens on ``openflow_host``."""
    args = ["--stats-interval-s", str(stats_interval_s)]
    return Emulator.spawn(LAYOUT, workdir, openflow_host=openflow_host, args=args)


def has_node(emulator: Emulator) -> bool:
    """The emulator's operational datastore has the site's node."""
    with emulator.http() as http:
        return http.get(f"{CONFIG_NODE}?content=nonconfig").status_code == 200


def _config_tables(http: httpx.Client) -> list[int]:
    response = http.get(f"{CONFIG_NODE}?content=config")
    if response.status_code == 404:
        return []
    (node,) = response.json()["opendaylight-inventory:node"]
    return [t["id"] for t in node.get("flow-node-inventory:table", [])]


def _operational_flows(emulator: Emulator) -> list[object]:
    with emulator.http() as http:
        (node,) = http.get(f"{CONFIG_NODE}?content=nonconfig").json()["opendaylight-inventory:node"]
    return [f for t in node.get("flow-node-inventory:table", []) for f in t.get("flow", [])]


def start_site(workdir: Path) -> OdlSite:
    """OVS in ``NS`` with ``brodl``, and an emulator controlling it (stop with stop_site)."""
    ovs = build(LAYOUT, workdir)
    emulator = start_emulator(
        workdir / "emulator", openflow_host=HOST_IP, stats_interval_s=STATS_INTERVAL_S
    )
    site = OdlSite(layout=LAYOUT, ovs=ovs, emulator=emulator)
    site.control(emulator)
    return site


def stop_site(workdir: Path, site: OdlSite | None) -> None:
    """Everything ``start_site`` made, stopped and removed."""
    tear_down(LAYOUT, workdir, None if site is None else site.emulator)


def is_root_with_ovs() -> bool:
    """Root, with Open vSwitch installed: the fabric tests can run."""
    return os.geteuid() == 0 and which("ovs-vswitchd") is not None
