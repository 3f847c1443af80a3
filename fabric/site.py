"""One site of a multi-site topology, built on this machine (or container) alone.

The two-site deployment (``docker/two-site/``) runs each site in its own container: the
site's border switch on a private Open vSwitch, the hosts linked to it, and nothing of the
other site. The links that leave the site are interfaces that already exist (the
container's data-plane interfaces; on a real host, its NICs): ``up`` moves each into the
site's switch namespace, names it like a fabric veth (``sw1-p10``) and adds it to the
bridge with the topology's OpenFlow port number. The site's baseline flows are the
switch's share of the initial paths; its inventory lists only its own switch, so a
``reroute serve`` scoped to it manages nothing else.

The state is a :class:`~fabric.state.FabricState` (named after the topology by default), so
``reroute fabric status|exec|down`` work on a site as on a whole fabric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import yaml

from fabric import netns
from fabric.errors import FabricError
from fabric.fabric import (
    TOOLS,
    Fabric,
    down,
    flow_protocol,
    host_mac,
    push_flows,
    veth_name,
    wait_links_up,
)
from fabric.forwarding import baseline_flows
from fabric.kinds import player, players
from fabric.player import Role
from fabric.run import require_root_and_tools, run
from fabric.state import FabricState, fabric_ns, host_ns, load
from services.reroute.model.inventory import load_inventory
from services.reroute.model.topology import Endpoint, Host, Link, Switch, Topology

__all__ = ["down", "external_ports", "up"]


def external_ports(topo: Topology, switch: str) -> list[str]:
    """The ports of ``switch`` whose links leave the site (to another switch or a long-haul
    node): each needs an existing interface."""
    return [_own_end(link, switch).port for link in _links_of(topo, switch) if _leaves(topo, link)]


def up(
    topo: Topology,
    switch: str,
    interfaces: Mapping[str, str],
    *,
    state_dir: Path,
    name: str | None = None,
) -> Fabric:
    """Build the site of ``switch``; ``interfaces`` maps each external port (``p10``) to an
    existing interface. The inventory's ``state_dir`` (journal, locks) is ``state_dir``;
    the site's state and namespaces are named ``name`` (default: the topology's name).
    On any failure everything made so far is removed."""
    name = name or topo.name
    require_root_and_tools(*TOOLS)
    border = _border(topo, switch)
    _check_interfaces(topo, switch, interfaces)
    if load(name) is not None:
        raise FabricError(f"fabric {name!r} is already up; `reroute fabric down {name}` first")
    hosts = _hosts_of(topo, switch)
    state = FabricState(
        name=name,
        topology=topo.file,
        fabric_ns=fabric_ns(name),
        host_ns={h.name: host_ns(name, h.name) for h in hosts},
    )
    state.save()
    fab = Fabric(state=state)
    try:
        _build(topo, border, hosts, interfaces, fab)
        _write_inventory(topo, border, state, state_dir)
    except BaseException:
        down(name)
        raise
    return Fabric(state=replace(state, phase="up"))


def _build(
    topo: Topology,
    border: Switch,
    hosts: list[Host],
    interfaces: Mapping[str, str],
    fab: Fabric,
) -> None:
    state = fab.state
    for ns in state.namespaces:
        netns.add(ns)
    fab.ovs.start()
    local = _host_links(topo, border.name, state)
    _make_bridge(border, local + _external(border.name, interfaces, state), fab)
    # only the host links: an external one is down until the other end is (the other site)
    wait_links_up(fab.ovs, [name for name, _ in local])
    lines = baseline_flows(topo).get(border.name, [])
    if lines:
        push_flows(fab.ovs, border.name, lines, flow_protocol(topo, border.name))


def _border(topo: Topology, switch: str) -> Switch:
    node = topo.nodes.get(switch)
    if not isinstance(node, Switch):
        known = ", ".join(s.name for s in topo.switches)
        raise FabricError(f"{topo.file}: {switch!r} is not a packet switch (switches: {known})")
    if not player(node.driver, Role.PACKET, f"{topo.file}: node {switch}: ").on_site:
        sited = ", ".join(k for k, p in players().items() if p.on_site)
        raise FabricError(f"{topo.file}: a site plays only {sited} switches, not {node.driver}")
    return node


def _check_interfaces(topo: Topology, switch: str, interfaces: Mapping[str, str]) -> None:
    needed = set(external_ports(topo, switch))
    missing, extra = needed - set(interfaces), set(interfaces) - needed
    if missing or extra:
        raise FabricError(
            f"site {switch}: give one interface for each external port "
            f"({', '.join(sorted(needed)) or 'none'}); "
            f"missing: {_names(missing)}, unknown: {_names(extra)}"
        )


def _names(ports: set[str]) -> str:
    return ", ".join(sorted(ports)) or "-"


def _links_of(topo: Topology, switch: str) -> list[Link]:
    return [link for link in topo.links if switch in (link.a.node, link.b.node)]


def _own_end(link: Link, switch: str) -> Endpoint:
    return link.a if link.a.node == switch else link.b


def _other_end(link: Link, switch: str) -> Endpoint:
    return link.b if link.a.node == switch else link.a


def _leaves(topo: Topology, link: Link) -> bool:
    return not any(isinstance(topo.nodes[e.node], Host) for e in (link.a, link.b))


def _hosts_of(topo: Topology, switch: str) -> list[Host]:
    names = {_other_end(link, switch).node for link in _links_of(topo, switch)}
    return [h for h in topo.hosts if h.name in names]


def _host_links(topo: Topology, switch: str, state: FabricState) -> list[tuple[str, str]]:
    """A veth pair per host link; static neighbours for every host of the topology (the
    MACs are those the whole fabric would give them, so both sites agree). Returns the
    switch-side interfaces with their port numbers."""
    macs = {
        iface.address.ip: host_mac(index * 16 + n)
        for index, host in enumerate(topo.hosts, start=1)
        for n, iface in enumerate(host.interfaces)
    }
    ports = []
    for link in _links_of(topo, switch):
        own, other = _own_end(link, switch), _other_end(link, switch)
        host = topo.nodes[other.node]
        if not isinstance(host, Host):
            continue
        ns, side = state.host_ns[host.name], veth_name(own)
        run(["ip", "link", "add", side, "type", "veth", "peer", "name", f"t-{host.name}"])
        run(["ip", "link", "set", f"t-{host.name}", "netns", ns])
        run(["ip", "link", "set", side, "netns", state.fabric_ns])
        batch = [f"link set t-{host.name} name {other.port}"]
        for iface in host.interfaces:
            batch += [f"link set {iface.name} address {macs[iface.address.ip]}"]
            batch += [f"addr add {iface.address} dev {iface.name}", f"link set {iface.name} up"]
            batch += [
                f"neigh replace {ip} lladdr {mac} dev {iface.name} nud permanent"
                for ip, mac in macs.items()
                if ip != iface.address.ip and ip in iface.address.network
            ]
        run(["ip", "-batch", "-"], ns=ns, stdin="\n".join(batch) + "\n")
        run(["ethtool", "-K", other.port, "tx", "off"], ns=ns)
        ports.append((side, own.port))
    return ports


def _external(
    switch: str, interfaces: Mapping[str, str], state: FabricState
) -> list[tuple[str, str]]:
    """Move each external interface into the switch namespace, without its addresses."""
    ports = []
    for port, iface in sorted(interfaces.items()):
        name = veth_name(Endpoint(node=switch, port=port))
        run(["ip", "addr", "flush", "dev", iface])
        run(["ip", "link", "set", iface, "down"])
        run(["ip", "link", "set", iface, "netns", state.fabric_ns])
        run(["ip", "link", "set", iface, "name", name], ns=state.fabric_ns)
        ports.append((name, port))
    return ports


def _make_bridge(border: Switch, ports: list[tuple[str, str]], fab: Fabric) -> None:
    ns = fab.state.fabric_ns
    for name, _ in ports:
        run(["ip", "link", "set", name, "up"], ns=ns)
        run(["ethtool", "-K", name, "tx", "off"], ns=ns)
    args = ["--", "add-br", border.name, "--", "set", "bridge", border.name]
    args += ["datapath_type=netdev", "fail_mode=secure", f"protocols={','.join(border.protocols)}"]
    args += ["other-config:disable-in-band=true", f"other-config:datapath-id={border.dpid:016x}"]
    for name, port in ports:
        args += ["--", "add-port", border.name, name]
        args += ["--", "set", "interface", name, f"ofport_request={port[1:]}"]
    fab.ovs.vsctl(*args)


def _write_inventory(topo: Topology, border: Switch, state: FabricState, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    body = {
        "topology": topo.name,
        "state_dir": str(state_dir),
        "devices": {
            border.name: player(border.driver, Role.PACKET).inventory_entry(
                border, None, state, Fabric(state=state).ovs
            )
        },
    }
    header = f"# The inventory of site {border.name} of {topo.name} (`reroute fabric site`).\n"
    state.inventory.write_text(header + yaml.safe_dump(body, sort_keys=False))
    load_inventory(state.inventory)
    replace(state, phase="up").save()
