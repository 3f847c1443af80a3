"""Replicas of ``reroute serve`` on the service fabric with the devices' write history
recorded: the bridges reached through recording OpenFlow relays, the Polatis emulator's
write log (``conftest.write_log``); the history merged per device, the flow's path read
back, and the fabric put back as the package's next tests expect it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from fabric.kinds.polatis_scpi import scpi_ports
from services.reroute.engine.engine import read_optics
from services.reroute.model.topology import Circuit, Topology
from services.reroute.store.records import RerouteState
from tests.e2e.checker import History
from tests.e2e.history import emulator_writes, merged, relay_writes
from tests.e2e.recording import RecordingRelay
from tests.e2e.service.conftest import WRITES, serve_yaml
from tests.unit.services.service.conftest import NGNCS, OPERATOR, ServeProcess
from tests.unit.services.service.fabric_state import bridge_tables, path_of_flow

FLOW = "10.0.0.2>10.0.0.3"
TTL_S = 2
DONE = RerouteState.DONE


RELAYED = ("ovs", "hp_dpctl")  # the drivers that speak OpenFlow to the switch itself


def inventory(
    fab: Fabric,
    into: Path,
    relays: dict[str, RecordingRelay],
    topology: str = "ngncs-ost",
    timeout_s: float | None = None,
) -> Path:
    """The fabric's inventory (for the topology file named ``topology``) with every switch
    the service speaks OpenFlow to reached through its recording relay (and every device's
    ``timeout_s`` set, if given: etcd's lock-delay is the step cap + the longest)."""
    body = yaml.safe_load(fab.state.inventory.read_text())
    body["topology"] = topology
    for name, device in body["devices"].items():
        if timeout_s is not None:
            device["timeout_s"] = timeout_s
        for key, value in device.items():  # a secret's file is beside the fabric's inventory
            if isinstance(value, dict) and "file" in value:
                device[key] = {"file": str(fab.state.inventory.parent / value["file"])}
        if device["driver"] in RELAYED:
            relays[name] = RecordingRelay(name, device["target"])
            device["target"] = relays[name].endpoint
    path = into / "inventory.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def config(
    inventory: Path,
    into: Path,
    name: str,
    endpoints: list[str],
    prefix: str,
    topology: Path = NGNCS,
) -> Path:
    path = into / f"{name}.yaml"
    path.write_text(
        f"topology: {topology}\ninventory: {inventory}\njournal: {into / name}.sqlite\n"
        f"tokens: [{{token: {OPERATOR}, role: operator}}]\nstep_timeout_s: 5\n"
        f"store: {{kind: etcd, endpoints: [{', '.join(endpoints)}], "
        f"prefix: {prefix}, lease_ttl_s: {TTL_S}}}\n"
    )
    return path


def history(
    fab: Fabric,
    relays: dict[str, RecordingRelay],
    pids: dict[int, str],
    logged: Mapping[str, str] | None = None,
) -> History:
    """Every device's history so far, writers named by ``pids``: the relays', the Polatis
    emulators' and ``logged``'s (the write log's device name -> the topology's)."""
    optical = {f"polatis@127.0.0.1:{port}": name for name, port in scpi_ports(fab.state).items()}
    devices = {**optical, **(logged or {})}
    logged_ = emulator_writes(fab.state.dir / WRITES, devices, pids)
    return merged(relay_writes(relays, pids), logged_)


def logged_devices(inventory: Path) -> dict[str, str]:
    """The write log's names of the switches whose EMULATOR logs their writes (a P4Runtime
    switch: ``p4rt@HOST:PORT``; one behind the Ryu or OpenDaylight emulator:
    ``ryu@HOST:PORT/DPID``, ``odl@HOST:PORT/DPID``) -> the topology's."""
    names = {}
    for name, device in yaml.safe_load(inventory.read_text())["devices"].items():
        if device["driver"] == "p4runtime":
            names[f"p4rt@{device['target']}"] = name
        elif device["driver"] == "ryu_rest":
            server = urlsplit(device["target"]).netloc
            names[f"ryu@{server}/{int(str(device['dpid']), 0)}"] = name
        elif device["driver"] == "odl":
            server = urlsplit(device["target"]).netloc
            names[f"odl@{server}/{int(device['node'].removeprefix('openflow:'))}"] = name
    return names


def where(topo: Topology, fab: Fabric, hosts: tuple[str, str] = ("vm2", "vm3")) -> list[str]:
    """The one path the flow between ``hosts`` is on, read back from the switches and the
    optical switches (``[]``: none)."""
    names = frozenset(o.name for o in topo.optical_switches)

    async def circuits() -> frozenset[Circuit]:
        async with fabric_drivers(topo, fab.state, names) as drivers:
            return await read_optics(drivers)

    devices = yaml.safe_load(fab.state.inventory.read_text())["devices"].values()
    # a P4Runtime switch's own session would have to be its primary, which a replica is:
    # its tables as its bridge holds them (over OpenFlow 1.3, which dpctl's bridges lack)
    over_openflow = any(d["driver"] == "p4runtime" for d in devices)
    try:
        t = bridge_tables(topo, fab) if over_openflow else None
        return [path_of_flow(topo, fab, t, asyncio.run(circuits()), hosts)]
    except AssertionError as exc:
        print(f"the flow {hosts[0]} -> {hosts[1]} is on no one path: {exc}")
        return []


def restore(serve: ServeProcess, topo: Topology, fab: Fabric, found: list[str]) -> None:
    """The flow back on long (``found``: where it is), the circuits too, for the package's
    next tests."""
    client = serve.client()
    if found != ["long"] and client.create([FLOW], "long", wait_s=30).state is not DONE:
        for to, via in (("short", None), ("long", "temporary")):  # ost1 still set for short
            client.create([FLOW], to, via=via, wait_s=30)
    assert where(topo, fab) == ["long"], "the flow could not be put back on long"


def restore_alone(topo: Topology, fab: Fabric, into: Path) -> None:
    """``restore`` by a service of its own (SQLite, no replicas): after a run that may have
    left the replicas' queue stuck."""
    serve = ServeProcess(serve_yaml(fab, into, f"{{token: {OPERATOR}, role: operator}}"))
    try:
        restore(serve, topo, fab, where(topo, fab))
    finally:
        serve.stop()


def close(relays: dict[str, RecordingRelay]) -> None:
    for relay in relays.values():
        relay.close()
