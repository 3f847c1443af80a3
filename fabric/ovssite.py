"""Switches that are plain Open vSwitch bridges (driver ``ovs``): the fabric makes them,
pushes their baseline with ovs-ofctl, and the driver reaches each on its OpenFlow
management socket."""

from __future__ import annotations

from typing import Any

from fabric.player import Build, Started
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Switch


class OvsPlayer:
    kind = "ovs"
    plays = "an OVS bridge, OpenFlow 1.3 on its management socket"
    controlled = False
    management = False
    on_site = True

    def start(self, build: Build, switches: list[Switch]) -> Started:
        """Nothing beyond the bridge (the driver takes its socket from the inventory)."""
        return Started()

    def install_baseline(
        self, build: Build, switches: list[Switch], targets: dict[str, str]
    ) -> None:
        """Nothing: the fabric pushed it with the bridges' flows."""

    def inventory_entry(
        self, switch: Switch, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The bridge's management socket."""
        return {"driver": self.kind, "target": ovs.mgmt(switch.name)}


PLAYER = OvsPlayer()
