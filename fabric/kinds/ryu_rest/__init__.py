"""Switches driven through Ryu, as in seed 003's testbed: real Ryu 4.34 running
``ryu.app.ofctl_rest`` (``fabric.kinds.ryu_rest.peer``, built by ``fabric.peers``) or the fabric's
ofctl_rest EMULATOR (``emulators.ryu``) controls them over OpenFlow 1.3 on the management link,
and the engine programs them through the REST application (``drivers.ryu_rest``).

Which one (``fabric up --ryu``): ``real`` (fails naming what is missing when Ryu cannot be
had), ``emulator``, or ``auto`` (the default): real Ryu where it can be had, else the
emulator, saying why. The bridges are pinned to OpenFlow13 (ofctl_rest's action lists are
OpenFlow 1.3's) and their baseline flows are pushed through the REST side, as seed 003's
scripts did.
"""

from __future__ import annotations

import asyncio
import json
import time
from ipaddress import IPv4Address
from typing import Any

import httpx

from drivers.base import FlowChange, FlowOp
from drivers.ryu_rest import RyuRestDriver
from fabric import daemons, mgmt, peers
from fabric.errors import FabricError
from fabric.kinds.ryu_rest import peer as ryupeer
from fabric.player import Build, Node, Option, PacketPlayer, Player, Started, recorded, switches
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Switch, Topology
from services.reroute.rules import initial_rules

MODULE = "emulators.ryu"


CHOICES = ("auto", "real", "emulator")
EMULATOR = "the Ryu ofctl_rest EMULATOR (emulators.ryu)"


def choose(choice: str) -> tuple[bool, str]:
    """(real Ryu?, what plays the controller and why) for ``--ryu CHOICE``; PeerMissing /
    PeerBuildError when ``real`` cannot be had."""
    if choice not in CHOICES:
        raise FabricError(f"--ryu {choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "emulator":
        return False, EMULATOR
    try:
        peers.ryu_manager()
    except (peers.PeerMissing, peers.PeerBuildError) as exc:
        if choice == "real":
            raise
        return False, f"{EMULATOR}: real Ryu cannot be had here ({exc})"
    return True, ryupeer.NAME


def start(
    state: FabricState,
    ovs: OvsInstance,
    switches: list[Switch],
    root_side: IPv4Address,
    *,
    real: bool = False,
) -> dict[str, str]:
    """Start the controller (real Ryu, or the emulator), connect the switches to it;
    returns each switch's driver target (the REST base URL) once it lists them connected."""
    url, openflow = _real(state, root_side) if real else _emulator(state, root_side)
    for s in switches:
        ovs.vsctl(
            "--", "set", "bridge", s.name, "protocols=OpenFlow13",
            "--", "set-controller", s.name, f"tcp:{root_side}:{openflow}",
        )  # fmt: skip
    _wait_connected(url, [s.dpid for s in switches])
    return {s.name: url for s in switches}


def _emulator(state: FabricState, root_side: IPv4Address) -> tuple[str, int]:
    args = ["--listen", "127.0.0.1:0", "--openflow", f"{root_side}:0"]
    ports = json.loads(daemons.start(state.dir, "ryu", MODULE, args))
    return f"http://127.0.0.1:{ports['rest']}", int(ports["openflow"])


def _real(state: FabricState, root_side: IPv4Address) -> tuple[str, int]:
    ryu = ryupeer.start(state.dir, "ryu", openflow_host=str(root_side))
    return ryu.base_url, ryu.openflow_port


def install_baseline(topo: Topology, switches: list[Switch], targets: dict[str, str]) -> None:
    """The initial paths' rules of Ryu-driven switches, through ofctl_rest."""
    rules = initial_rules(topo)

    async def push() -> None:
        """Push every switch's initial rules through ofctl_rest."""
        for s in switches:
            async with RyuRestDriver(s.name, targets[s.name], s.dpid) as driver:
                await driver.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in rules[s.name]])

    asyncio.run(push())


def _wait_connected(url: str, dpids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    missing = dpids
    while time.monotonic() < deadline:
        try:
            listed = httpx.get(url + "/stats/switches", timeout=2.0).json()
            missing = [d for d in dpids if d not in listed]
            if not missing:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise FabricError(
        f"switches never connected to the Ryu controller at {url}: "
        f"{', '.join(f'{d:#x}' for d in missing)}"
    )


CONTROLLER = Option(
    name="ryu",
    flag="--ryu",
    help="what controls ryu_rest switches: real Ryu 4.34 (built once by make setup; needs a "
    "Python 3.9), its emulator, or auto (default): real Ryu where it can be had",
    default="auto",
    choices=CHOICES,
)


class RyuPlayer(PacketPlayer):
    kind = "ryu_rest"
    plays = "an OVS bridge controlled by real Ryu 4.34's ofctl_rest, or its EMULATOR"
    options: tuple[Option, ...] = (CONTROLLER,)
    controlled = True
    management = True

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """Real Ryu or the emulator (``--ryu``), the switches connected to it."""
        choice = str(build.options[CONTROLLER.name])
        real, played = choose(choice)
        build.progress(f"{played} controlling {', '.join(s.name for s in nodes)}")
        root_side = mgmt.addresses(build.state.name)[0]
        targets = start(build.state, build.ovs, switches(nodes), root_side, real=real)
        return Started(targets=targets, played=played, kept={CONTROLLER.name: choice})

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """Through ofctl_rest."""
        build.progress("baseline flows of the Ryu switches, through ofctl_rest")
        install_baseline(build.topo, switches(nodes), targets)

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """ofctl_rest's URL and the datapath id."""
        assert isinstance(node, Switch)
        return {"driver": self.kind, "target": recorded(node, target), "dpid": node.dpid}


PLAYER: Player = RyuPlayer()
