"""Switches that are plain Open vSwitch bridges (driver ``ovs``): the fabric makes them,
pushes their baseline with ovs-ofctl, and the driver reaches each on its OpenFlow
management socket."""

from __future__ import annotations

from typing import Any

from fabric.player import Build, Node, PacketPlayer, Player, Started
from fabric.state import FabricState
from fabric.vswitch import OvsInstance


class OvsPlayer(PacketPlayer):
    kind = "ovs"
    plays = "an OVS bridge, OpenFlow 1.3 on its management socket"
    on_site = True

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """Nothing beyond the bridge (the driver takes its socket from the inventory)."""
        return Started()

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The bridge's management socket."""
        return {"driver": self.kind, "target": ovs.mgmt(node.name)}


PLAYER: Player = OvsPlayer()
