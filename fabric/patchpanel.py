"""The optical layer of a fabric: a Polatis EMULATOR per optical switch whose cross-connects
are real layer-1 patches.

An optical switch is an OVS patch bridge in the fabric namespace (one port per attached
duplex transceiver). ``FabricLayer1`` is the emulator's ``Layer1``: a patch is a flow
``in_port=i -> output:(e - N)`` on that bridge, and a receiver without a locked signal is
its veth set down, so the packet switch at the far end sees its port go down (no carrier)
and its frames are dropped, as with a dark fibre. ``start`` runs one emulator daemon per
optical switch (``python -m fabric.patchpanel``) and returns their SCPI ports.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from drivers.base import DeviceUnreachable, FlowChange, FlowMatch, FlowOp, FlowRule, Output
from drivers.ovs import OvsDriver
from emulators.polatis.__main__ import main as polatis_main
from fabric import daemons
from fabric.errors import FabricError
from fabric.forwarding import PATCH_PRIORITY
from fabric.netlink import Links
from fabric.state import FabricState, load
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import OpticalSwitch, Topology, load_topology

log = logging.getLogger("reroute.fabric.patchpanel")
MODULE = "fabric.patchpanel"


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


def start(topo: Topology, state: FabricState, *, seed: int = 0) -> dict[str, int]:
    """One emulator daemon per optical switch; returns each one's SCPI port (loopback)."""
    ports = {}
    for node in topo.optical_switches:
        connect = ",".join(f"{c.ingress}:{c.egress}" for c in sorted(node.cross_connects))
        args = ["--fabric", state.name, "--node", node.name, "--listen", "127.0.0.1:0"]
        args += ["--size", f"{node.ingress_count}x{node.egress_count}", "--seed", str(seed)]
        args += ["--connect", connect] if connect else []
        ports[node.name] = int(daemons.start(state.dir, node.name, MODULE, args))
    return ports


def _layer1(args: argparse.Namespace) -> FabricLayer1:
    state = load(args.fabric)
    if state is None:
        raise FabricError(f"no fabric named {args.fabric!r} is up")
    node = load_topology(Path(state.topology)).nodes.get(args.node)
    if not isinstance(node, OpticalSwitch):
        raise FabricError(f"{args.node} is not an optical switch of fabric {args.fabric}")
    return FabricLayer1(state, node)


def main(argv: list[str] | None = None) -> int:
    """Run the Polatis emulator of one optical switch of a fabric, patching its bridge."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="Run a Polatis SCPI EMULATOR whose circuits are patches in a fabric.",
    )
    parser.add_argument("--fabric", required=True, help="name of the running fabric")
    parser.add_argument("--node", required=True, help="the optical switch it plays")
    return polatis_main(argv, _layer1, parser=parser)


if __name__ == "__main__":
    raise SystemExit(main())
