"""Make an Open vSwitch bridge play an HP/Aruba OpenFlow switch for the "dpctl method".

What the seeds' HP switches offered, and the bridge then offers: OpenFlow 1.0 only, a
passive listener (HP: ``openflow`` -> ``instance`` -> ``listen-port``) that a host tool
(``dpctl`` / ``ovs-ofctl``) connects to, no controller, and fail-secure (an empty table
drops). ``drivers.hp_dpctl.HpDpctlDriver`` drives it at the returned target.

The listener belongs to the network namespace ovs-vswitchd runs in: with the fabric's OVS
in a namespace, ``address`` must be an address of that namespace the driver can reach
(127.0.0.1 only serves tools run inside it).
"""

from __future__ import annotations

from typing import Any

from drivers.hp_dpctl.tool import Dpctl
from drivers.hp_dpctl.which import find_tool
from fabric import mgmt, peers
from fabric.player import Build, Node, Option, PacketPlayer, Player, Started, recorded
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Switch

HP_LISTEN_PORT = 6633


def play_hp(
    ovs: OvsInstance, bridge: str, port: int = HP_LISTEN_PORT, *, address: str = "127.0.0.1"
) -> str:
    """Make ``bridge`` an OpenFlow-1.0-only switch listening on ``address:port``; the
    driver target (``tcp:ADDRESS:PORT``). ovs-vsctl returns once the listener is open."""
    ovs.vsctl(
        "--", "set", "bridge", bridge, "protocols=OpenFlow10", "fail_mode=secure",
        "--", "set-controller", bridge, f"ptcp:{port}:{address}",
    )  # fmt: skip
    return f"tcp:{address}:{port}"


TOOL = Option(
    name="hp_tool",
    flag="--hp-tool",
    help="the tool hp_dpctl switches get in the inventory: dpctl (the OpenFlow 1.0 reference, "
    "built once by make setup; needs gcc and make), ovs-ofctl, or auto (default: the "
    "driver's choice, a reference dpctl on PATH, else ovs-ofctl)",
    default="auto",
    choices=("auto", "dpctl", "ovs-ofctl"),
)


class HpPlayer(PacketPlayer):
    kind = "hp_dpctl"
    plays = "an OVS bridge playing an HP switch (OpenFlow 1.0, passive TCP listener)"
    options: tuple[Option, ...] = (TOOL,)
    management = True

    def check(self, node: Node) -> str | None:
        """An HP switch speaks OpenFlow 1.0 (the bridge must offer it)."""
        protocols = node.protocols if isinstance(node, Switch) else ()
        if "OpenFlow10" not in protocols:
            return "an hp_dpctl switch speaks OpenFlow10: list it in protocols"
        return None

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """Each bridge an HP switch listening on the management link's fabric side."""
        names = ", ".join(s.name for s in nodes)
        build.progress(f"{names} play HP switches (OpenFlow 1.0, dpctl)")
        inside = str(mgmt.addresses(build.state.name)[1])
        targets = {
            s.name: play_hp(build.ovs, s.name, HP_LISTEN_PORT + n, address=inside)
            for n, s in enumerate(nodes)
        }
        choice = str(build.options[TOOL.name])
        played = tool_description(choice)
        build.progress(f"their tool: {played}")
        return Started(targets=targets, played=played, kept={TOOL.name: choice})

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The listener, and the tool ``fabric up --hp-tool`` chose."""
        choice = str(state.kinds.get(self.kind, {}).get(TOOL.name, TOOL.default))
        return {"driver": self.kind, "target": recorded(node, target), **hp_tool(choice)}


def tool_description(choice: str) -> str:
    """What drives the HP switches (the reference dpctl is built here, once, when asked for
    and not built yet)."""
    if choice == "dpctl":
        return f"the OpenFlow 1.0 reference dpctl at {peers.dpctl()} (--hp-tool dpctl)"
    tool = find_tool(5.0, kind=choice)  # what the driver takes on this machine
    name = "the OpenFlow 1.0 reference dpctl" if isinstance(tool, Dpctl) else "ovs-ofctl"
    return f"{name} at {tool.path} (--hp-tool {choice})"


def hp_tool(choice: str) -> dict[str, str]:
    """The ``tool`` keys of an hp_dpctl entry: ``dpctl`` is the OpenFlow 1.0 reference
    built from the peers (``fabric.peers``), ``auto`` the driver's own choice."""
    if choice == "dpctl":
        return {"tool": "dpctl", "tool_path": str(peers.dpctl())}
    return {} if choice == "auto" else {"tool": choice}


PLAYER: Player = HpPlayer()
