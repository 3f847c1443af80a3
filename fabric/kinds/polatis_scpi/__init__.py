"""Optical switches played by the Polatis SCPI EMULATOR (driver ``polatis_scpi``): one
emulator daemon per switch whose cross-connects are real layer-1 patches (``panel``), its
SCPI socket in the inventory, and the fabric's own control of it (``control``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fabric import daemons
from fabric.errors import FabricError
from fabric.kinds.polatis_scpi import control
from fabric.kinds.polatis_scpi.panel import MODULE
from fabric.player import Build, Node, OpticalControl, Option, Player, Role, Started, optical
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import OpticalSwitch

PORTS = "ports"  # what the player keeps: optical switch -> its emulator's SCPI port


@dataclass(frozen=True, slots=True)
class PolatisControl:
    """One emulator's control (``fabric.player.OpticalControl``) on its SCPI port."""

    port: int

    def connections(self) -> dict[int, int]:
        """ingress -> egress, as the emulator holds them."""
        return control.connections(self.port)

    def drawn_locks(self) -> dict[int, float]:
        """The lock time (ms) last drawn, by egress port."""
        return control.drawn_locks(self.port)

    def set_lock(self, lock_ms: float | None) -> None:
        """Every lock ``lock_ms`` from now on (None: drawn from seed 003 Table 4.3)."""
        control.set_lock(self.port, lock_ms)


class PolatisPlayer:
    kind = "polatis_scpi"
    role = Role.OPTICAL
    plays = "an OVS patch bridge whose cross-connects a Polatis SCPI EMULATOR makes"
    options: tuple[Option, ...] = ()
    controlled = False
    management = False
    on_site = False

    def check(self, node: Node) -> str | None:
        """Nothing to check (the topology checked the size and cross-connects)."""
        return None

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """One emulator daemon per optical switch (its lock draws seeded ``build.seed``)."""
        build.progress("optical switch emulators (Polatis SCPI)")
        ports = {}
        for node in optical(nodes):
            connect = ",".join(f"{c.ingress}:{c.egress}" for c in sorted(node.cross_connects))
            args = ["--fabric", build.state.name, "--node", node.name, "--listen", "127.0.0.1:0"]
            args += ["--size", f"{node.ingress_count}x{node.egress_count}"]
            args += ["--seed", str(build.seed)]
            args += ["--connect", connect] if connect else []
            ports[node.name] = int(daemons.start(build.state.dir, node.name, MODULE, args))
        return Started(kept={PORTS: ports})

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """Nothing: the emulators start with the topology's cross-connects."""

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The emulator's SCPI socket."""
        return {
            "driver": self.kind,
            "target": f"TCPIP0::127.0.0.1::{scpi_port(state, node.name)}::SOCKET",
        }

    def control(self, state: FabricState, node: OpticalSwitch) -> OpticalControl:
        """The emulator of ``node``, on its SCPI port."""
        return PolatisControl(scpi_port(state, node.name))


def scpi_ports(state: FabricState) -> dict[str, int]:
    """The SCPI port of every optical switch's emulator, by name (loopback)."""
    return dict(state.kinds.get(PLAYER.kind, {}).get(PORTS, {}))


def scpi_port(state: FabricState, name: str) -> int:
    """The SCPI port of optical switch ``name``'s emulator (loopback; FabricError: none)."""
    port = scpi_ports(state).get(name)
    if port is None:
        raise FabricError(f"{name}: fabric {state.name} started no Polatis emulator for it")
    return int(port)


PLAYER: Player = PolatisPlayer()
