"""``ovs-vswitchd`` restarted under a running fabric, as its supervisor would (systemd's
``Restart=``): the daemon again on the same database, then what the fabric emulates below
OpenFlow put back, since a real circuit survives a packet switch's restart: each optical
switch's patches as its emulator's cross-connects stand now (asked through the player of its
driver: ``fabric.player.OpticalControl``).

The engine's rules are not the fabric's: the switches come back with empty tables and
``reroute recover --resync`` writes every flow's intended path again. Unless the
supervisor keeps them, as Open vSwitch's own ``ovs-ctl restart`` does (its ``ovs-save``):
``saved_flows`` before the daemon goes, and ``restart_vswitchd(..., flows=...)`` starts it
with ``other_config:flow-restore-wait=true`` (it forwards nothing, and flushes nothing,
until told), puts every packet switch's table back, then lets it go.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabric.fabric import (
    Fabric,
    _switch_ends,
    bridge_protocol,
    push_flows,
    veth_name,
    wait_links_up,
)
from fabric.forwarding import patch_lines
from fabric.kinds import node_player
from services.reroute.model.topology import Topology


def restart_vswitchd(
    fab: Fabric, topo: Topology, flows: Mapping[str, list[str]] | None = None
) -> None:
    """Start ``ovs-vswitchd`` again (it must have died) and restore the optical patches;
    with ``flows`` (``saved_flows`` before it went), the packet switches' tables too."""
    ovs = fab.ovs
    if flows is not None:
        ovs.vsctl("--no-wait", "set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true")
    ovs.start_vswitchd()
    for bridge, lines in (flows or {}).items():
        if lines:
            push_flows(ovs, bridge, lines, bridge_protocol(ovs, bridge))
    if flows is not None:
        ovs.vsctl("--no-wait", "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait")
    wait_links_up(ovs, [veth_name(e) for e in _switch_ends(topo, bridged=True)])
    for node in topo.optical_switches:
        pairs = sorted(node_player(node).control(fab.state, node).connections().items())
        if lines := patch_lines(node, pairs):
            push_flows(ovs, node.name, lines, "OpenFlow13")


def saved_flows(fab: Fabric, topo: Topology) -> dict[str, list[str]]:
    """Every packet switch's flow entries as ``add-flows`` lines (what ``ovs-save`` keeps
    across a restart): its dump without counters."""
    saved = {}
    for switch in topo.switches:
        protocol = bridge_protocol(fab.ovs, switch.name)  # its flow text is in that version
        dump = fab.ovs.ofctl(
            "-O", protocol, "--no-stats", "--no-names", "dump-flows", fab.ovs.mgmt(switch.name)
        )
        saved[switch.name] = [line.strip() for line in dump.splitlines() if "actions=" in line]
    return saved
