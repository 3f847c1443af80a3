"""Build, inspect and tear down an emulated fabric from a topology.

``up`` makes, in order: the state file (write-ahead, so ``down`` can always clean up), one
network namespace for the fabric's switches and one per host, a private OVS in the fabric
namespace, veth pairs for every link (checksum offload off on both ends, or TCP through
the userspace datapath fails), bridges with stable OpenFlow port numbers, host addresses
with static neighbours, and the baseline flows of the initial paths; then each kind of
packet switch the topology uses is played by its ``Player`` (``fabric.kinds``: start what
it needs, install its baseline through its controller if it has one), and the inventory
gets the entries they write. Any failure tears down what was made before the error is
raised.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from fabric import daemons, inventory, longhaul, mgmt, netns, odlsite, patchpanel
from fabric.errors import FabricError
from fabric.forwarding import baseline_flows
from fabric.kinds import PLAYERS, player
from fabric.player import Build, Peers
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


HP_TOOLS = ("auto", "dpctl", "ovs-ofctl")


def up(
    topo: Topology,
    progress: Progress = _quiet,
    *,
    seed: int = 0,
    peers: Peers | None = None,
    odl_stats_s: float = odlsite.STATS_INTERVAL_S,
) -> Fabric:
    """Build the fabric of ``topo``; on any failure remove everything made so far. ``seed``
    seeds the optical emulators' lock-time draws (the same seed, the same lock times);
    ``peers`` says what plays the devices that have a real implementation; ``odl_stats_s``
    is the ODL emulator's statistics poll (ODL's default, 3 s)."""
    require_root_and_tools(*TOOLS)
    _check_emulated(topo)
    _check_name_free(topo.name)
    chosen = peers or Peers()
    if chosen.hp_tool not in HP_TOOLS:
        raise FabricError(f"--hp-tool {chosen.hp_tool!r}: expected one of {', '.join(HP_TOOLS)}")
    state = FabricState(
        name=topo.name,
        topology=topo.file,
        fabric_ns=fabric_ns(topo.name),
        host_ns={h.name: host_ns(topo.name, h.name) for h in topo.hosts},
        hp_tool=chosen.hp_tool,
        odl_stats_s=odl_stats_s,
    )
    state.save()
    fab = Fabric(state=state)
    try:
        targets, played = _build(topo, fab, progress, chosen)
    except BaseException:
        progress("build failed: tearing down what was made")
        down(topo.name)
        raise
    try:
        progress("optical switch emulators (Polatis SCPI)")
        scpi = patchpanel.start(topo, state, seed=seed)
        progress("long-haul delay lines")
        delay = longhaul.start(topo, state)
    except BaseException:
        down(topo.name)
        raise
    done = replace(state, phase="up", scpi=scpi, delay=delay, targets=targets, peers=played)
    try:
        progress("inventory of the fabric's devices")
        inventory.write(topo, done)
    except BaseException:
        down(topo.name)
        raise
    done.save()
    return Fabric(state=done)


def _check_emulated(topo: Topology) -> None:
    """Every packet switch of ``topo`` is of a kind the fabric plays (``fabric.kinds``)."""
    for s in topo.switches:
        player(s.driver, f"{topo.file}: node {s.name}: ")


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
    topo: Topology, fab: Fabric, progress: Progress, peers: Peers
) -> tuple[dict[str, str], dict[str, str]]:
    """Make everything; returns the driver targets of switches that play other devices, and
    what plays the peers of the drivers that have one (driver kind -> description)."""
    state = fab.state
    targets: dict[str, str] = {}
    played: dict[str, str] = {}
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
    kinds = {k: [s for s in topo.switches if s.driver == k] for k in PLAYERS}
    players = [(PLAYERS[k], switches) for k, switches in kinds.items() if switches]
    controlled = {s.name for p, switches in players if p.controlled for s in switches}
    progress("baseline flows")
    for bridge, lines in baseline_flows(topo).items():
        if bridge not in controlled:  # through their controller, P4Runtime
            push_flows(fab.ovs, bridge, lines, _protocol(topo, bridge))
    if any(p.management for p, _ in players):
        progress("management link (root namespace <-> fabric namespace)")
        mgmt.make(state.name, state.fabric_ns)
    build = Build(
        topo=topo,
        state=state,
        ovs=fab.ovs,
        progress=progress,
        peers=peers,
        odl_stats_s=state.odl_stats_s,
    )
    for p, switches in players:
        started = p.start(build, switches)
        targets |= started.targets
        if started.played is not None:
            played[p.kind] = started.played
        p.install_baseline(build, switches, targets)
    return targets, played


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


def _protocol(topo: Topology, bridge: str) -> str:
    node = topo.nodes[bridge]
    if isinstance(node, Switch) and "OpenFlow13" not in node.protocols:
        return node.protocols[-1]
    return "OpenFlow13"


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
