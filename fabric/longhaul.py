"""Long-haul nodes of a fabric: one delay line (``emulators.delayline``, an EMULATOR of the
seeds' ANUE long-haul emulator) per node, bridging its two veths in the fabric namespace
with the node's one-way delay. Its HTTP control port (loopback, root namespace) changes the
delay at run time, as the seeds did with curl ("rtt extension")."""

from __future__ import annotations

from fabric import daemons
from fabric.delaycontrol import DelayControl
from fabric.errors import FabricError
from fabric.state import FabricState
from services.reroute.model.topology import LongHaul, Topology

MODULE = "emulators.delayline"


def start(topo: Topology, state: FabricState) -> dict[str, int]:
    """Start a delay line per long-haul node; returns each one's control port."""
    ports = {}
    for node in topo.of_kind(LongHaul):
        args = ["--netns", state.fabric_ns, "--a", f"{node.name}-p1", "--b", f"{node.name}-p2"]
        args += ["--delay-ms", str(node.delay_ms), "--control", "127.0.0.1:0"]
        ports[node.name] = int(daemons.start(state.dir, node.name, MODULE, args))
    return ports


def control(state: FabricState, node: str) -> DelayControl:
    """The HTTP control of a running fabric's long-haul node."""
    if node not in state.delay:
        known = ", ".join(state.delay) or "none"
        raise FabricError(f"fabric {state.name} has no long-haul node {node!r} (has: {known})")
    return DelayControl(f"http://127.0.0.1:{state.delay[node]}")
