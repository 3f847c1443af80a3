"""Switches that are P4Runtime switches: one P4Runtime switch EMULATOR (``emulators.p4rt``)
per bridge, running ``p4/reroute.p4`` with the bridge as its dataplane; the engine
programs them through P4Runtime (``drivers.p4runtime``) and reads their port state over
gNMI (OpenConfig oper-status of the bridge's ports), which each emulator serves on its
P4Runtime port, as Stratum does (P4Runtime itself has none).

Each emulator runs in the root namespace and reaches its bridge at the bridge's unix
management socket; its gRPC server listens on 127.0.0.1 (device id 1). It empties the
bridge's flow table when it starts: the initial paths' rules then go in as table entries.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from drivers.base import FlowChange, FlowOp
from fabric import daemons
from fabric.player import Build, Node, PacketPlayer, Player, Started, recorded, switches
from fabric.state import FabricState
from fabric.vswitch import OvsInstance, alive
from services.reroute.model.topology import Switch, Topology
from services.reroute.rules import initial_rules

MODULE = "emulators.p4rt"
WAIT_S = 15.0  # an emulator's start (gRPC and the P4Runtime protos to import)
DEVICE_ID = 1
ELECTION_ID = 10  # the engine's: p4runtime-shell at a lower id can watch as a backup
# the program's P4Info (drivers.p4runtime needs the p4rt extra: imported only when used)
P4INFO = Path(__file__).resolve().parents[2] / "p4" / "reroute.p4info.txtpb"


def start(state: FabricState, ovs: OvsInstance, switches: list[Switch]) -> dict[str, str]:
    """An emulator per switch, all started at once (their start-ups overlap); returns each
    switch's P4Runtime target (``HOST:PORT``)."""
    each = [(f"p4rt-{s.name}", MODULE, _args(ovs, s.name, "127.0.0.1:0")) for s in switches]
    ports = daemons.start_all(state.dir, each, timeout=WAIT_S)
    return {s.name: f"127.0.0.1:{port}" for s, port in zip(switches, ports, strict=True)}


def _start(state: FabricState, ovs: OvsInstance, name: str, listen: str, *more: str) -> str:
    port = daemons.start(state.dir, f"p4rt-{name}", MODULE, _args(ovs, name, listen, *more), WAIT_S)
    return f"127.0.0.1:{port}"


def _args(ovs: OvsInstance, name: str, listen: str, *more: str) -> list[str]:
    args = ["--listen", listen, "--bridge-mgmt", ovs.mgmt(name)]
    return [*args, "--device-id", str(DEVICE_ID), "--p4info", str(P4INFO), *more]


def kill(state: FabricState, name: str) -> None:
    """The P4Runtime agent of switch ``name`` dies (SIGKILL); its bridge keeps forwarding."""
    pid = int((state.dir / f"p4rt-{name}.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    while alive(pid):
        time.sleep(0.005)


def restart_warm(state: FabricState, ovs: OvsInstance, name: str, target: str) -> None:
    """The agent of switch ``name`` started again on its old ``target`` as a warm restart
    (Stratum's --warmboot): it takes its table from the bridge, which kept it."""
    _start(state, ovs, name, target, "--warm")


def restart_cold(state: FabricState, ovs: OvsInstance, name: str, target: str) -> None:
    """The agent of switch ``name`` started again on its old ``target`` as a cold restart:
    no program installed and its table (the bridge's flows) emptied."""
    _start(state, ovs, name, target, "--no-pipeline")


def install_baseline(
    topo: Topology, ovs: OvsInstance, switches: list[Switch], targets: dict[str, str]
) -> None:
    """The initial paths' rules, written as table entries through P4Runtime."""
    from drivers.p4runtime import P4RuntimeDriver

    rules = initial_rules(topo)

    async def push() -> None:
        """Push every switch's pipeline and initial rules through P4Runtime."""
        for s in switches:
            driver = P4RuntimeDriver(
                s.name, targets[s.name], device_id=DEVICE_ID, election_id=ELECTION_ID
            )
            async with driver:
                await driver.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in rules[s.name]])

    asyncio.run(push())


def inventory_entry(switch: Switch, target: str, ovs: OvsInstance) -> dict[str, object]:
    """The inventory entry of a P4Runtime switch on ``target``."""
    return {
        "driver": "p4runtime",
        "target": target,
        "device_id": DEVICE_ID,
        "election_id": ELECTION_ID,
        "p4info": str(P4INFO),
        "gnmi": target,  # the emulator serves gNMI on its P4Runtime port, as Stratum does
    }


class P4rtPlayer(PacketPlayer):
    kind = "p4runtime"
    plays = "an OVS bridge as the dataplane of a P4Runtime switch EMULATOR (p4/reroute.p4)"
    controlled = True

    def start(self, build: Build, nodes: list[Node]) -> Started:
        """One emulator per switch, its bridge the dataplane."""
        names = ", ".join(s.name for s in nodes)
        build.progress(f"P4Runtime switch emulators (p4/reroute.p4) on {names}")
        return Started(targets=start(build.state, build.ovs, switches(nodes)))

    def install_baseline(self, build: Build, nodes: list[Node], targets: dict[str, str]) -> None:
        """As table entries."""
        build.progress("baseline flows of the P4Runtime switches, as table entries")
        install_baseline(build.topo, build.ovs, switches(nodes), targets)

    def inventory_entry(
        self, node: Node, target: str | None, state: FabricState, ovs: OvsInstance
    ) -> dict[str, Any]:
        """The gRPC address (P4Runtime, and gNMI for port state), the P4Info."""
        assert isinstance(node, Switch)
        return inventory_entry(node, recorded(node, target), ovs)


PLAYER: Player = P4rtPlayer()
