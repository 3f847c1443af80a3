"""What the devices of the tests' fabric say, read independently of the service."""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address
from pathlib import Path

from drivers.ovs import OvsDriver
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine.engine import read_optics, read_tables
from services.reroute.model.topology import Circuit, Endpoint, Host, Topology
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK, tag_of
from services.reroute.store.records import Record, StepRecord
from services.reroute.store.sqlite import Journal
from services.reroute.tables import Packet, Tables, deliver, lookup, tables_from

VM2, VM3 = IPv4Address("10.0.0.2"), IPv4Address("10.0.0.3")


def tables(topo: Topology, fab: Fabric) -> Tables:
    async def read() -> Tables:
        async with fabric_drivers(topo, fab.state) as drivers:
            return await read_tables(drivers)

    return asyncio.run(read())


def bridge_tables(topo: Topology, fab: Fabric) -> Tables:
    """Our rules as the fabric's bridges hold them, read over OpenFlow whatever programs
    them (a P4Runtime switch EMULATOR's entries are its bridge's flows): no session of
    the switches' own drivers is opened beside the service's (one P4Runtime primary)."""

    async def read() -> Tables:
        found = {}
        for s in topo.switches:
            async with OvsDriver(s.name, fab.ovs.mgmt(s.name)) as bridge:
                found[s.name] = await bridge.read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK)
        return tables_from(found)

    return asyncio.run(read())


def optics(topo: Topology, fab: Fabric) -> frozenset[Circuit]:
    """The optical switches' cross-connects, read from them."""

    async def read() -> frozenset[Circuit]:
        async with fabric_drivers(topo, fab.state) as drivers:
            return await read_optics(drivers)

    return asyncio.run(read())


def path_of_flow(
    topo: Topology,
    fab: Fabric,
    t: Tables | None = None,
    circuits: frozenset[Circuit] | None = None,
    hosts: tuple[str, str] = ("vm2", "vm3"),
) -> str:
    """The one path between ``hosts`` (vm2<->vm3) takes, both directions delivered on it
    (AssertionError if not), through ``circuits`` (default: the topology's initial ones)."""
    t = tables(topo, fab) if t is None else t
    names = list(topo.paths)
    found = set()
    for host, other in (hosts, hosts[::-1]):
        src, dst = topo.nodes[host], topo.nodes[other]
        assert isinstance(src, Host) and isinstance(dst, Host)
        packet = Packet(src=src.address, dst=dst.address)
        walk = deliver(topo, t, host, packet, circuits)
        assert walk.delivered, f"{host}: {walk.reason}"
        at = topo.peer(Endpoint(node=host, port=src.interfaces[0].name))
        assert at is not None
        ingress = lookup(t[at.node], 1, packet)
        assert ingress is not None
        found.add(names[(tag_of(ingress) or 0) - 1])
    assert len(found) == 1, f"the two directions are on different paths: {found}"
    return found.pop()


def ingress_paths(topo: Topology, t: Tables) -> set[str]:
    """The paths vm2<->vm3's ingress rules (at br2, at br3) send it on, in ``t``: one
    while it is on one path, two in the middle of a shift."""
    names = list(topo.paths)
    found = set()
    for at, packet in (("br2", Packet(src=VM2, dst=VM3)), ("br3", Packet(src=VM3, dst=VM2))):
        ingress = lookup(t[at], 1, packet)
        if ingress is not None:
            found.add(names[(tag_of(ingress) or 0) - 1])
    return found


def journal_records(path: Path) -> list[tuple[Record, list[StepRecord]]]:
    journal = Journal(path)
    try:
        return [(r, journal.steps(r.id)) for r in journal.history(10_000)]
    finally:
        journal.close()
