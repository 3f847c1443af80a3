"""The inventory of an emulated fabric's own devices, written by ``fabric up``.

The engine, the service and the monitors reach the emulated devices exactly as they reach
real ones: through an inventory (``services.reroute.model.inventory``). Each switch is listed with
the driver the topology chose for it and the target the fabric made for it, as the
player of its driver writes it (``fabric.kinds``: ``ovs`` the bridge's management socket,
``odl`` the northbound emulator's URL, node and password file, ``polatis_scpi`` the
emulator's SCPI socket, ...).

The inventory's ``state_dir`` is the fabric's run directory: journals and device locks live
and die with the fabric.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

from drivers.base import Driver
from fabric.kinds import node_player
from fabric.player import Node
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.inventory import load_inventory, open_drivers
from services.reroute.model.topology import Topology

HEADER = """\
# The inventory of emulated fabric {name} (written by `reroute fabric up`; removed by
# `reroute fabric down {name}`). The same format reaches real devices: see README.md,
# "Using it with real equipment", and `reroute inventory schema`.
"""


def devices(topo: Topology, state: FabricState) -> dict[str, dict[str, Any]]:
    """Each switching node's inventory entry, as the player of its driver wrote it."""
    ovs = OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns)
    nodes: list[Node] = [*topo.switches, *topo.optical_switches]
    return {
        n.name: node_player(n).inventory_entry(n, state.targets.get(n.name), state, ovs)
        for n in nodes
    }


def write(topo: Topology, state: FabricState) -> Path:
    """Write ``<run dir>/inventory.yaml`` (atomically) and check it loads; its path."""
    body = {"topology": topo.name, "state_dir": str(state.dir), "devices": devices(topo, state)}
    text = HEADER.format(name=topo.name) + yaml.safe_dump(body, sort_keys=False)
    path = state.inventory
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    load_inventory(path)  # what we write, we can read: a broken one fails `up`, not a reroute
    return path


@asynccontextmanager
async def fabric_drivers(
    topo: Topology, state: FabricState, scope: frozenset[str] | None = None
) -> AsyncIterator[Mapping[str, Driver]]:
    """Connected drivers for the switches of a running fabric (those in ``scope``), built
    from the inventory ``fabric up`` wrote: the path real equipment takes."""
    async with open_drivers(load_inventory(state.inventory), topo, scope) as drivers:
        yield drivers


def journal_path(state: FabricState) -> Path:
    """The journal of engines on this fabric (in its inventory's ``state_dir``)."""
    return load_inventory(state.inventory).journal


def lock_dir(state: FabricState) -> Path:
    """Where engines on this fabric lock the switches they work on."""
    return load_inventory(state.inventory).lock_dir
