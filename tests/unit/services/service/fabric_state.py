"""What the devices of the tests' fabric say, read independently of the service."""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address
from pathlib import Path

from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.engine import read_tables
from services.reroute.journal import Journal, Record, StepRecord
from services.reroute.rules import tag_of
from services.reroute.tables import Packet, Tables, deliver, lookup
from services.reroute.topology import Topology

VM2, VM3 = IPv4Address("10.0.0.2"), IPv4Address("10.0.0.3")


def tables(topo: Topology, fab: Fabric) -> Tables:
    async def read() -> Tables:
        async with fabric_drivers(topo, fab.state) as drivers:
            return await read_tables(drivers)

    return asyncio.run(read())


def path_of_flow(topo: Topology, fab: Fabric) -> str:
    """The one path vm2<->vm3 takes, both directions delivered on it (AssertionError if not)."""
    t = tables(topo, fab)
    names = list(topo.paths)
    found = set()
    for host, at, packet in (
        ("vm2", "br2", Packet(src=VM2, dst=VM3)),
        ("vm3", "br3", Packet(src=VM3, dst=VM2)),
    ):
        walk = deliver(topo, t, host, packet)
        assert walk.delivered, f"{host}: {walk.reason}"
        ingress = lookup(t[at], 1, packet)
        assert ingress is not None
        found.add(names[(tag_of(ingress) or 0) - 1])
    assert len(found) == 1, f"the two directions are on different paths: {found}"
    return found.pop()


def journal_records(path: Path) -> list[tuple[Record, list[StepRecord]]]:
    journal = Journal(path)
    try:
        return [(r, journal.steps(r.id)) for r in journal.history(10_000)]
    finally:
        journal.close()
