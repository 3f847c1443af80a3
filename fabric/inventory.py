"""The inventory of an emulated fabric's own devices, written by ``fabric up``.

The engine, the service and the monitors reach the emulated devices exactly as they reach
real ones: through an inventory (``services.reroute.model.inventory``). Each switch is listed with
the driver the topology chose for it and the target the fabric made for it, as the
player of its kind writes it (``fabric.kinds``: ``ovs`` the bridge's management socket,
``odl`` the northbound emulator's URL, node and password file, ...); any other kind, the
target the fabric recorded for it (``state.targets``). Optical switches are the Polatis
SCPI emulators' sockets (``TCPIP0::127.0.0.1::PORT::SOCKET``).

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
from fabric.kinds import PLAYERS
from fabric.player import recorded
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.model.inventory import load_inventory, open_drivers
from services.reroute.model.topology import Switch, Topology

HEADER = """\
# The inventory of emulated fabric {name} (written by `reroute fabric up`; removed by
# `reroute fabric down {name}`). The same format reaches real devices: see README.md,
# "Using it with real equipment", and `reroute inventory schema`.
"""


def devices(topo: Topology, state: FabricState) -> dict[str, dict[str, Any]]:
    """Each switching node's inventory entry, as the fabric built it."""
    ovs = OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns)
    out: dict[str, dict[str, Any]] = {s.name: _switch(s, state, ovs) for s in topo.switches}
    for o in topo.optical_switches:
        out[o.name] = {
            "driver": "polatis_scpi",
            "target": f"TCPIP0::127.0.0.1::{state.scpi[o.name]}::SOCKET",
        }
    return out


def _switch(switch: Switch, state: FabricState, ovs: OvsInstance) -> dict[str, Any]:
    target = state.targets.get(switch.name)
    found = PLAYERS.get(switch.driver)
    if found is None:
        return {"driver": switch.driver, "target": recorded(switch, target)}
    return found.inventory_entry(switch, target, state, ovs)


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
