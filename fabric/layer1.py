"""An optical switch's layer 1 in a running fabric, for the emulator of any optical kind.

An optical switch is an OVS patch bridge in the fabric namespace (one port per attached
duplex transceiver). ``FabricLayer1`` is what an optical emulator drives (the Polatis one's
``Layer1``): a patch is a flow ``in_port=i -> output:(e - N)`` on that bridge, and a
receiver without a locked signal is its veth set down, so the packet switch at the far end
sees its port go down (no carrier) and its frames are dropped, as with a dark fibre.
``fabric_layer1`` finds the switch of a fabric up.
"""

from __future__ import annotations

from pathlib import Path

from drivers.base import DeviceUnreachable, FlowChange, FlowMatch, FlowOp, FlowRule, Output
from drivers.ovs import OvsDriver
from fabric.errors import FabricError
from fabric.forwarding import PATCH_PRIORITY
from fabric.netlink import Links
from fabric.state import FabricState, load
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import OpticalSwitch, load_topology


class FabricLayer1:
    """Layer 1 of optical switch ``node`` in a running fabric: OpenFlow patch flows on its
    bridge, netlink link state of its veths."""

    def __init__(self, state: FabricState, node: OpticalSwitch) -> None:
        self.node = node
        ovs = OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns)
        self.bridge = OvsDriver(node.name, ovs.mgmt(node.name))
        self.links = Links(state.fabric_ns)
        self.connected = False

    def _duplex(self, egress: int) -> int | None:
        port = self.node.ingress_of(egress)
        return port if port in self.node.attachments else None

    async def patch(self, ingress: int, egress: int) -> None:
        """Patch ``ingress`` to ``egress`` on the bridge."""
        out = self._duplex(egress)
        if ingress in self.node.attachments and out is not None:
            await self._flow(FlowOp.ADD, ingress, out)

    async def unpatch(self, ingress: int, egress: int) -> None:
        """Remove the patch of ``ingress``."""
        if ingress in self.node.attachments:
            await self._flow(FlowOp.DELETE, ingress, 0)

    async def signal(self, egress: int, lit: bool) -> None:
        """Light or darken the receiver of ``egress`` (its veth up or down)."""
        port = self._duplex(egress)
        if port is not None:
            self.links.set(f"{self.node.name}-p{port}", lit)

    async def _flow(self, op: FlowOp, ingress: int, out: int) -> None:
        rule = FlowRule(
            match=FlowMatch(in_port=ingress),
            priority=PATCH_PRIORITY,
            actions=(Output(out),) if out else (),
        )
        try:
            await self._apply(FlowChange(op=op, rule=rule))
        except DeviceUnreachable:  # ovs-vswitchd restarted since: a new connection, once
            await self.bridge.close()
            self.connected = False
            await self._apply(FlowChange(op=op, rule=rule))

    async def _apply(self, change: FlowChange) -> None:
        if not self.connected:
            await self.bridge.open()
            self.connected = True
        await self.bridge.apply([change])


def fabric_layer1(fabric: str, node: str) -> FabricLayer1:
    """The layer 1 of optical switch ``node`` of fabric ``fabric`` (FabricError: no such
    fabric up, or no such optical switch in it)."""
    state = load(fabric)
    if state is None:
        raise FabricError(f"no fabric named {fabric!r} is up")
    found = load_topology(Path(state.topology)).nodes.get(node)
    if not isinstance(found, OpticalSwitch):
        raise FabricError(f"{node} is not an optical switch of fabric {fabric}")
    return FabricLayer1(state, found)
