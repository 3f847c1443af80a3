"""``ovs-vswitchd`` restarted under a running fabric, as its supervisor would (systemd's
``Restart=``): the daemon again on the same database, then what the fabric emulates below
OpenFlow put back, since a real circuit survives a packet switch's restart: each optical
switch's patches as its Polatis emulator's cross-connects stand now (read over SCPI).

The engine's rules are not the fabric's: the switches come back with empty tables and
``reroute recover --resync`` writes every flow's intended path again.
"""

from __future__ import annotations

import socket

from drivers.polatis_scpi import scpi
from fabric.fabric import Fabric, _switch_ends, push_flows, veth_name, wait_links_up
from fabric.forwarding import patch_lines
from services.reroute.topology import Topology


def restart_vswitchd(fab: Fabric, topo: Topology) -> None:
    """Start ``ovs-vswitchd`` again (it must have died) and restore the optical patches."""
    fab.ovs.start_vswitchd()
    wait_links_up(fab.ovs, [veth_name(e) for e in _switch_ends(topo, bridged=True)])
    for node in topo.optical_switches:
        pairs = sorted(_connections(fab.state.scpi[node.name]).items())
        if lines := patch_lines(node, pairs):
            push_flows(fab.ovs, node.name, lines, "OpenFlow13")


def _connections(port: int) -> dict[int, int]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"{scpi.STATE}\n".encode())
        return scpi.parse_connections(s.makefile().readline().strip())
