"""What ``reroute fabric status`` shows: bridges, ports with link state and counters, hosts,
and each device's state as the service would report it (``services.reroute.devicecheck``)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fabric.errors import FabricError
from fabric.run import run
from fabric.state import FabricState
from fabric.vswitch import OvsInstance
from services.reroute.errors import RerouteError


@dataclass(frozen=True, slots=True, kw_only=True)
class PortStatus:
    name: str
    ofport: int
    link: str
    rx_packets: int
    tx_packets: int


def ports(ovs: OvsInstance) -> dict[str, list[PortStatus]]:
    """Ports of every bridge, by bridge name, sorted by OpenFlow port number."""
    iface = _table(ovs, "Interface", "name,ofport,link_state,statistics")
    by_uuid = {row["_uuid"]: row for row in _table(ovs, "Port", "_uuid,name,interfaces")}
    result: dict[str, list[PortStatus]] = {}
    by_name = {row["name"]: row for row in iface}
    for bridge in _table(ovs, "Bridge", "name,ports"):
        found = []
        for uuid in bridge["ports"]:
            name = by_uuid[uuid]["name"]
            row = by_name.get(name)
            if row is None or name == bridge["name"]:
                continue
            stats = row["statistics"]
            found.append(
                PortStatus(
                    name=name,
                    ofport=int(row["ofport"] or -1),
                    link=str(row["link_state"] or "?"),
                    rx_packets=int(stats.get("rx_packets", 0)),
                    tx_packets=int(stats.get("tx_packets", 0)),
                )
            )
        result[bridge["name"]] = sorted(found, key=lambda p: p.ofport)
    return dict(sorted(result.items()))


def _table(ovs: OvsInstance, table: str, columns: str) -> list[dict[str, Any]]:
    """Rows of an OVSDB table as plain Python values (sets -> lists, maps -> dicts)."""
    out = json.loads(ovs.vsctl("--format=json", f"--columns={columns}", "list", table))
    cols = out["headings"]
    return [{c: _value(v) for c, v in zip(cols, row, strict=True)} for row in out["data"]]


def _value(v: Any) -> Any:
    if isinstance(v, list) and len(v) == 2 and v[0] in ("set", "map", "uuid"):
        kind, inner = v
        if kind == "uuid":
            return inner
        if kind == "set":
            return [_value(x) for x in inner]
        return {k: _value(x) for k, x in inner}
    return v


def render(state: FabricState) -> str:
    """The fabric's status as text: bridges, ports, link states, hosts."""
    ovs = OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns)
    lines = [f"fabric {state.name} ({state.phase}) from {state.topology}"]
    lines.append(f"  switches: netns {state.fabric_ns}, OVS run dir {state.ovs_dir}")
    lines += [f"  {kind} switches: {what}" for kind, what in state.peers.items()]
    for bridge, plist in ports(ovs).items():
        flows = ovs.ofctl("-O", "OpenFlow10,OpenFlow13", "dump-aggregate", ovs.mgmt(bridge)).split()
        count = next((f.split("=")[1] for f in flows if f.startswith("flow_count=")), "?")
        via = f", driven by {state.targets[bridge]}" if bridge in state.targets else ""
        lines.append(f"  bridge {bridge}: {count} flows{via}")
        for p in plist:
            lines.append(
                f"    {p.ofport:>5} {p.name:<12} {p.link:<5} rx {p.rx_packets:<8} tx {p.tx_packets}"
            )
    lines += _optical(state)
    lines += [_longhaul(state, name) for name in state.delay]
    for host, ns in state.host_ns.items():
        addrs = run(["ip", "-brief", "-4", "addr", "show", "scope", "global"], ns=ns, check=False)
        lines.append(f"  host {host} (netns {ns}): {' '.join(addrs.split()) or '-'}")
    lines += _devices(state)
    return "\n".join(lines)


def _devices(state: FabricState) -> list[str]:
    """Each device of the fabric's inventory: up, down, hung, no_pipeline, out_of_sync
    (against the journal in the inventory's state directory), since when, the error."""
    from services.reroute import devicecheck
    from services.reroute.model.inventory import load_inventory
    from services.reroute.model.topology import load_topology

    try:
        inv = load_inventory(state.inventory)  # written by ``fabric up`` for this topology
        topo = replace(load_topology(Path(state.topology)), name=inv.topology)
        statuses = asyncio.run(devicecheck.check_devices(inv, topo))
    except RerouteError as exc:
        return [f"  devices: cannot be checked ({exc})"]
    return ["  devices:", *(f"    {line}" for line in devicecheck.table(statuses).splitlines())]


def port_counters(ovs: OvsInstance, bridge: str) -> dict[int, tuple[int, int]]:
    """Live (rx_packets, tx_packets) by OpenFlow port, from OpenFlow port statistics.

    OVSDB's ``statistics`` column is refreshed only every few seconds; tests and
    experiments that count packets need these.
    """
    out = ovs.ofctl("-O", "OpenFlow13", "dump-ports", ovs.mgmt(bridge))
    counters: dict[int, tuple[int, int]] = {}
    port, rx = -1, 0
    for raw in out.splitlines():
        line = raw.strip()
        if line.startswith("port"):
            name = line.split(":")[0].split()[1]
            port = -1 if name == "LOCAL" else int(name)
            rx = int(line.split("pkts=")[1].split(",")[0])
        elif line.startswith("tx pkts=") and port >= 0:
            counters[port] = (rx, int(line.split("pkts=")[1].split(",")[0]))
    return counters


def _optical(state: FabricState) -> list[str]:
    """Each optical switch's circuits, asked of its emulator (its player's control)."""
    from fabric.kinds import node_player
    from services.reroute.model.topology import load_topology

    lines = []
    for node in load_topology(Path(state.topology)).optical_switches:
        where = f"{node.driver} emulator"
        try:
            pairs = node_player(node).control(state, node).connections()
        except FabricError as exc:
            lines.append(f"  optical {node.name} ({where}): unreachable ({exc})")
            continue
        circuits = " ".join(f"{i}->{e}" for i, e in sorted(pairs.items())) or "none"
        lines.append(f"  optical {node.name} ({where}): {circuits}")
    return lines


def _longhaul(state: FabricState, name: str) -> str:
    from fabric import longhaul

    try:
        now = longhaul.control(state, name).get()
    except RerouteError as exc:
        return f"  long-haul {name} (delay line): unreachable ({exc})"
    return (
        f"  long-haul {name} (delay line, control 127.0.0.1:{state.delay[name]}): "
        f"{now.a_to_b_ms:g} ms p1->p2, {now.b_to_a_ms:g} ms p2->p1"
    )
