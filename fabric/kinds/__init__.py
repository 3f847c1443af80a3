"""The one registry of how the fabric plays each driver kind: kind -> its ``Player``
(``fabric.player``). Each module or package here is named after the driver kind it plays
and defines ``PLAYER``; they are found by scanning this package (``players``), so adding a
kind is adding its module, and nothing outside it names the kind."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from fabric.errors import FabricError
from fabric.player import Node, OpticalControl, Player, Role
from fabric.state import FabricState
from services.reroute.model.topology import OpticalSwitch, Topology, load_topology


@cache
def players() -> dict[str, Player]:
    """Every player, by kind (sorted: the order the fabric starts them)."""
    found: dict[str, Player] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        played: Player | None = getattr(module, "PLAYER", None)
        if played is None:
            continue
        if played.kind != info.name:
            raise FabricError(f"fabric.kinds.{info.name} plays {played.kind!r}: name it so")
        found[played.kind] = played
    return found


def player(kind: str, role: Role, where: str = "") -> Player:
    """The player of driver ``kind`` for nodes of ``role`` (FabricError naming those there
    are, if none)."""
    found = players().get(kind)
    if found is None or found.role is not role:
        there = ", ".join(k for k, p in players().items() if p.role is role)
        raise FabricError(
            f"{where}the emulated fabric cannot play {role} switches of driver {kind} "
            f"(it plays: {there}); real ones are reached through an inventory"
        )
    return found


def node_player(node: Node) -> Player:
    """The player of ``node``'s driver."""
    return player(node.driver, _role(node))


def by_player(topo: Topology) -> list[tuple[Player, list[Node]]]:
    """The players ``topo`` needs, each with its nodes: packet players first (in kind
    order), then optical ones. FabricError for a node no player plays, or one its player
    finds wrong (``Player.check``), naming the topology file and the node."""
    nodes: list[Node] = [*topo.switches, *topo.optical_switches]
    out: dict[str, list[Node]] = {}
    for node in nodes:
        where = f"{topo.file}: node {node.name}: "
        found = player(node.driver, _role(node), where)
        problem = found.check(node)
        if problem is not None:
            raise FabricError(f"{where}{problem}")
        out.setdefault(found.kind, []).append(node)
    ordered = sorted(out.items(), key=lambda kv: (players()[kv[0]].role is Role.OPTICAL, kv[0]))
    return [(players()[k], v) for k, v in ordered]


def _role(node: Node) -> Role:
    return Role.OPTICAL if isinstance(node, OpticalSwitch) else Role.PACKET


def optical_controls(state: FabricState) -> dict[str, OpticalControl]:
    """The emulator control of every optical switch of the fabric ``state`` describes
    (``fabric.player.OpticalControl``), by name."""
    topo = load_topology(Path(state.topology))
    return {o.name: node_player(o).control(state, o) for o in topo.optical_switches}


def optical_control(state: FabricState, name: str) -> OpticalControl:
    """The emulator control of optical switch ``name`` (FabricError: no such switch)."""
    node = load_topology(Path(state.topology)).nodes.get(name)
    if not isinstance(node, OpticalSwitch):
        raise FabricError(f"{name} is not an optical switch of fabric {state.name}")
    return node_player(node).control(state, node)
