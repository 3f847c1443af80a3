"""Build, inspect and tear down an emulated fabric from a topology.

``up`` makes, in order: the state file (write-ahead, so ``down`` can always clean up), one
network namespace for the fabric's switches and one per host, a private OVS in the fabric
namespace, veth pairs for every link (checksum offload off on both ends, or TCP through
the userspace datapath fails), bridges with stable OpenFlow port numbers, host addresses
with static neighbours, and the baseline flows of the initial paths; then each kind of
packet switch the topology uses is played by its ``Player`` (``fabric.kinds``: start what
it needs, install its baseline through its controller if it has one), and the inventory
gets the entries they write; optical switches likewise, by the player of their driver
(their emulators). Any failure tears down what was made before the error is raised.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fabric import daemons, inventory, longhaul, mgmt, netns
from fabric.errors import FabricError
from fabric.forwarding import baseline_flows
from fabric.kinds import by_player, players
from fabric.player import Build, Node, Player, Value
from fabric.run import require_root_and_tools, run
from fabric.state import FabricState, fabric_ns, host_ns, load
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import Endpoint, Host, LongHaul, Switch, Topology
from services.reroute.runtime import run_dir

Progress = Callable[[str], None]
TOOLS = ("ip", "ethtool", "ovs-vswitchd", "ovsdb-server", "ovs-vsctl", "ovs-ofctl")


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """A running fabric: its state and the OVS instance behind it."""

    state: FabricState

    @property
    def ovs(self) -> OvsInstance:
        """The fabric's private OVS."""
        return OvsInstance(rundir=self.state.ovs_dir, netns=self.state.fabric_ns)

    def host_ns(self, host: str) -> str:
        """The network namespace of ``host``."""
        return self.state.host_ns[host]


def veth_name(end: Endpoint) -> str:
    """The name of a switch-side veth in the fabric namespace (at most 15 characters)."""
    return f"{end.node}-{end.port}"


def host_mac(index: int) -> str:
    """The MAC address of host number ``index`` (locally administered)."""
    return f"02:72:72:00:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}"


def up(
    topo: Topology,
    progress: Progress = _quiet,
    *,
    seed: int = 0,
    options: Mapping[str, object] | None = None,
) -> Fabric:
    """Build the fabric of ``topo``; on any failure remove everything made so far. ``seed``
    seeds the optical emulators' lock-time draws (the same seed, the same lock times);
    ``options``: settings of the players of the kinds it plays (``fabric.player.Option``,
    by name: ``hp_tool``, ``ryu``, ``odl_stats_s``, ...), the others their defaults."""
    require_root_and_tools(*TOOLS)
    played_by = by_player(topo)  # every node played, and right for its kind
    chosen = choose_options(options or {})
    _check_name_free(topo.name)
    state = FabricState(
        name=topo.name,
        topology=topo.file,
        fabric_ns=fabric_ns(topo.name),
        host_ns={h.name: host_ns(topo.name, h.name) for h in topo.hosts},
    )
    state.save()
    fab = Fabric(state=state)
    try:
        targets, played, kept = _build(topo, fab, progress, played_by, chosen, seed)
        progress("long-haul delay lines")
        delay = longhaul.start(topo, state)
    except BaseException:
        progress("build failed: tearing down what was made")
        down(topo.name)
        raise
    done = replace(state, phase="up", delay=delay, targets=targets, peers=played, kinds=kept)
    try:
        progress("inventory of the fabric's devices")
        inventory.write(topo, done)
    except BaseException:
        down(topo.name)
        raise
    done.save()
    return Fabric(state=done)


def choose_options(given: Mapping[str, object]) -> dict[str, Value]:
    """Every player's options: ``given`` (parsed by its option) or the default. FabricError
    for a name no player has, naming those there are."""
    known = {o.name: o for p in players().values() for o in p.options}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise FabricError(
            f"no player has option {', '.join(unknown)} (they have: {', '.join(sorted(known))})"
        )
    return {n: o.parse(given[n]) if n in given else o.default for n, o in known.items()}


def _check_name_free(name: str) -> None:
    if load(name) is not None:
        raise FabricError(f"fabric {name!r} is already up; run `reroute fabric down {name}` first")
    taken = [ns for ns in netns.listing(fabric_ns(name)) if ns in _our_namespaces(name)]
    if taken:
        raise FabricError(
            f"network namespaces {', '.join(taken)} already exist; "
            f"run `reroute fabric down {name}` to remove them"
        )


def _our_namespaces(name: str) -> list[str]:
    base = fabric_ns(name)
    return [ns for ns in netns.listing(base) if ns == base or ns.startswith(base + ".")]


def _build(
    topo: Topology,
    fab: Fabric,
    progress: Progress,
    players: list[tuple[Player, list[Node]]],
    options: Mapping[str, Value],
    seed: int,
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, Any]]]:
    """Make everything; returns the driver targets of the nodes that play other devices,
    what plays the peers of the kinds that have one (kind -> description), and what each
    kind's player keeps (kind -> its state)."""
    state = fab.state
    targets: dict[str, str] = {}
    played: dict[str, str] = {}
    kept: dict[str, dict[str, Any]] = {}
    progress(f"namespaces: {len(state.namespaces)}")
    for ns in state.namespaces:
        netns.add(ns)
    progress("Open vSwitch (userspace datapath)")
    fab.ovs.start()
    progress(f"links: {len(topo.links)} veth pairs")
    _make_links(topo, state)
    progress("hosts: addresses and neighbours")
    _configure_hosts(topo, state)
    progress("bridges and ports")
    _make_bridges(topo, fab.ovs)
    wait_links_up(fab.ovs, [veth_name(e) for e in _switch_ends(topo, bridged=True)])
    controlled = {n.name for p, nodes in players if p.controlled for n in nodes}
    progress("baseline flows")
    for bridge, lines in baseline_flows(topo).items():
        if bridge not in controlled:  # through their controller, P4Runtime
            push_flows(fab.ovs, bridge, lines, flow_protocol(topo, bridge))
    if any(p.management for p, _ in players):
        progress("management link (root namespace <-> fabric namespace)")
        mgmt.make(state.name, state.fabric_ns)
    build = Build(
        topo=topo, state=state, ovs=fab.ovs, progress=progress, options=options, seed=seed
    )
    for p, nodes in players:
        started = p.start(build, nodes)
        targets |= started.targets
        if started.played is not None:
            played[p.kind] = started.played
        if started.kept:
            kept[p.kind] = started.kept
        p.install_baseline(build, nodes, targets)
    return targets, played, kept


def _switch_ends(topo: Topology, *, bridged: bool = False) -> Iterable[Endpoint]:
    """Link ends in the fabric namespace (``bridged``: only those on OVS bridges; long-haul
    ends belong to the delay line)."""
    for link in topo.links:
        for end in (link.a, link.b):
            node = topo.nodes[end.node]
            if not isinstance(node, Host) and not (bridged and isinstance(node, LongHaul)):
                yield end


def _make_links(topo: Topology, state: FabricState) -> None:
    batch: list[str] = []
    offload: dict[str, list[str]] = {state.fabric_ns: []}
    for link in topo.links:
        names: list[str] = []
        for end in (link.a, link.b):
            node = topo.nodes[end.node]
            if isinstance(node, Host):
                tmp = f"t{link.index}-{end.node}"
                names.append(tmp)
                offload.setdefault(state.host_ns[end.node], []).append(end.port)
            else:
                names.append(veth_name(end))
                offload[state.fabric_ns].append(veth_name(end))
        batch.append(f"link add {names[0]} type veth peer name {names[1]}")
        for end, name in zip((link.a, link.b), names, strict=True):
            if isinstance(topo.nodes[end.node], Host):
                batch.append(f"link set {name} netns {state.host_ns[end.node]}")
            else:
                batch.append(f"link set {name} up")
    run(["ip", "-batch", "-"], ns=state.fabric_ns, stdin="\n".join(batch) + "\n")
    _rename_host_ends(topo, state)
    for ns, ifaces in offload.items():
        script = " && ".join(f"ethtool -K {i} tx off >/dev/null" for i in ifaces)
        if script:
            run(["sh", "-c", script], ns=ns)


def _rename_host_ends(topo: Topology, state: FabricState) -> None:
    for index, host in enumerate(topo.hosts, start=1):
        batch = []
        for link in topo.links:
            for end in (link.a, link.b):
                if end.node == host.name:
                    batch.append(f"link set t{link.index}-{host.name} name {end.port}")
        for n, iface in enumerate(host.interfaces):
            mac = host_mac(index * 16 + n)
            batch.append(f"link set {iface.name} address {mac}")
            batch.append(f"addr add {iface.address} dev {iface.name}")
            batch.append(f"link set {iface.name} up")
        run(["ip", "-batch", "-"], ns=state.host_ns[host.name], stdin="\n".join(batch) + "\n")


def _configure_hosts(topo: Topology, state: FabricState) -> None:
    """Static neighbours between all hosts of a subnet: the fabric forwards IPv4 only."""
    macs = {
        (host.name, iface.name): host_mac(index * 16 + n)
        for index, host in enumerate(topo.hosts, start=1)
        for n, iface in enumerate(host.interfaces)
    }
    for host in topo.hosts:
        batch = []
        for iface in host.interfaces:
            for other in topo.hosts:
                for o in other.interfaces:
                    if o.address.ip != iface.address.ip and o.address.ip in iface.address.network:
                        mac = macs[(other.name, o.name)]
                        batch.append(
                            f"neigh replace {o.address.ip} lladdr {mac} "
                            f"dev {iface.name} nud permanent"
                        )
        if batch:
            run(["ip", "-batch", "-"], ns=state.host_ns[host.name], stdin="\n".join(batch) + "\n")


def _make_bridges(topo: Topology, ovs: OvsInstance) -> None:
    args: list[str] = []
    for node in topo.nodes.values():
        if isinstance(node, Host | LongHaul):
            continue
        protocols = ",".join(node.protocols) if isinstance(node, Switch) else "OpenFlow13"
        args += ["--", "add-br", node.name, "--", "set", "bridge", node.name]
        args += ["datapath_type=netdev", "fail_mode=secure", f"protocols={protocols}"]
        args += ["other-config:disable-in-band=true"]
        if isinstance(node, Switch):
            args.append(f"other-config:datapath-id={node.dpid:016x}")
    for end in _switch_ends(topo, bridged=True):
        number = end.port[1:]
        args += ["--", "add-port", end.node, veth_name(end)]
        args += ["--", "set", "interface", veth_name(end), f"ofport_request={number}"]
    ovs.vsctl(*args)


def wait_links_up(ovs: OvsInstance, ifaces: list[str], timeout: float = 10.0) -> None:
    """Wait until every interface in ``ifaces`` is up in ``ovs`` (FabricError on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        out = ovs.vsctl(
            "--format=csv", "--data=bare", "--columns=name,link_state,ofport", "list", "Interface"
        )
        rows = {r.split(",")[0]: r.split(",")[1:] for r in out.strip().splitlines()[1:]}
        down = [i for i in ifaces if rows.get(i, ["", ""])[0] != "up"]
        if not down:
            return
        if time.monotonic() > deadline:
            raise FabricError(f"ports still down after {timeout:.0f} s: {', '.join(down)}")
        time.sleep(0.05)


def flow_protocol(topo: Topology, bridge: str) -> str:
    """The OpenFlow version flows of ``bridge`` are written and read in with ovs-ofctl:
    OpenFlow13 where the bridge speaks it, else the last it lists."""
    node = topo.nodes[bridge]
    if isinstance(node, Switch) and "OpenFlow13" not in node.protocols:
        return node.protocols[-1]
    return "OpenFlow13"


def bridge_protocol(ovs: OvsInstance, bridge: str) -> str:
    """The OpenFlow version to write and read ``bridge``'s flows in, as the bridge is set
    now (a player may have narrowed what the topology listed): OpenFlow13 where it speaks
    it, else the first it speaks."""
    listed = ovs.vsctl("get", "bridge", bridge, "protocols").strip().strip("[]")
    speaks = [p.strip().strip('"') for p in listed.split(",") if p.strip()]
    if not speaks or "OpenFlow13" in speaks:
        return "OpenFlow13"
    return speaks[0]


def push_flows(ovs: OvsInstance, bridge: str, lines: list[str], protocol: str) -> None:
    """Add flows to a bridge in one atomic bundle (one plain batch on OpenFlow 1.0)."""
    bundle = ["--bundle"] if protocol != "OpenFlow10" else []
    ovs.ofctl(
        "-O", protocol, *bundle, "add-flows", ovs.mgmt(bridge), "-", stdin="\n".join(lines) + "\n"
    )


def down(name: str) -> list[str]:
    """Remove everything fabric ``name`` made; idempotent; returns what it removed."""
    state = load(name)
    removed: list[str] = [f"daemon {d}" for d in daemons.stop_all(run_dir() / name)]
    if state is not None:
        OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns).stop()
    spaces = set(_our_namespaces(name)) | set(state.namespaces if state else [])
    for ns in sorted(spaces, key=lambda s: (s == fabric_ns(name), s)):
        if netns.exists(ns):
            netns.delete(ns)
            removed.append(f"netns {ns}")
    rundir = run_dir() / name
    if rundir.exists():
        shutil.rmtree(rundir, ignore_errors=True)
        removed.append(f"state {rundir}")
    return removed
