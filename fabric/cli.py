"""``reroute fabric up|down|site|status|exec|delay``: the emulated fabric from the command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabric import fabric, ryusite, state
from fabric.errors import FabricError
from fabric.run import in_netns
from fabric.status import render
from fabric.vswitch import OvsInstance
from services.reroute.topology import load_topology


def _progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    topo = load_topology(args.file)
    print(f"fabric {topo.name}: bringing up {topo.file}", file=sys.stderr)
    peers = fabric.Peers(ryu=args.ryu, hp_tool=args.hp_tool)
    fab = fabric.up(topo, progress=_progress, seed=args.seed, peers=peers)
    print(f"fabric {topo.name} is up; `reroute fabric status`, `reroute fabric down` when done")
    del fab
    return 0


TEST_OWNED = ("test-", "tdl-")


def _names(args: argparse.Namespace) -> list[str]:
    if args.all:
        from fabric import netns

        found = {ns[3:].split(".")[0] for ns in netns.listing("rr-")}
        # rr-test-* / rr-tdl-*: scratch namespaces test suites make and remove themselves
        found = {n for n in found if not n.startswith(TEST_OWNED)}
        return sorted(found | set(state.running()))
    if args.target is None:
        return [state.pick(None).name]
    target = Path(args.target)
    return [load_topology(target).name if target.suffix in (".yaml", ".yml") else args.target]


def _down(args: argparse.Namespace) -> int:
    for name in _names(args):
        removed = fabric.down(name)
        print(
            f"fabric {name}: removed {len(removed)} items"
            if removed
            else f"fabric {name}: nothing to remove"
        )
    return 0


def _status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else state.running()
    if not names:
        print("no fabric is up")
    for name in names:
        print(render(state.pick(name)))
    return 0


def _exec(args: argparse.Namespace) -> int:
    st = state.pick(args.name)
    cmd = [c for c in args.cmd if c != "--"] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise FabricError(
            "give a command after --, e.g. `reroute fabric exec vm2 -- ping -c1 10.0.0.3`"
        )
    if args.node not in st.host_ns and args.node not in _switch_nodes(st):
        raise FabricError(f"fabric {st.name} has no node {args.node!r}")
    env = {**os.environ, **OvsInstance(rundir=st.ovs_dir, netns=st.fabric_ns).env}
    argv = in_netns(st.node_ns(args.node), cmd)
    os.execvpe(argv[0], argv, env)


def _switch_nodes(st: state.FabricState) -> set[str]:
    return set(load_topology(st.topology).nodes) - set(st.host_ns)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fabric up|down|status|exec`` to the ``reroute`` parser."""
    fab = sub.add_parser("fabric", help="build and tear down the emulated fabric")
    fsub = fab.add_subparsers(dest="fabric_command", required=True, metavar="ACTION")
    up = fsub.add_parser("up", help="build the fabric of a topology file")
    up.add_argument("file", type=Path, metavar="FILE")
    up.add_argument(
        "--seed", type=int, default=0, help="seed of the optical emulators' lock-time draws"
    )
    up.add_argument(
        "--ryu",
        choices=ryusite.CHOICES,
        default="auto",
        help="what controls ryu_rest switches: real Ryu 4.34 (built once by make setup; needs "
        "a Python 3.9), its emulator, or auto (default): real Ryu where it can be had",
    )
    up.add_argument(
        "--hp-tool",
        choices=fabric.HP_TOOLS,
        default="auto",
        help="the tool hp_dpctl switches get in the inventory: dpctl (the OpenFlow 1.0 "
        "reference, built once by make setup; needs gcc and make), ovs-ofctl, or auto "
        "(default: the driver's choice, a reference dpctl on PATH, else ovs-ofctl)",
    )
    up.set_defaults(func=_up)
    down = fsub.add_parser("down", help="remove a fabric (also after a crash)")
    down.add_argument("target", nargs="?", metavar="NAME|FILE", help="default: the only fabric up")
    down.add_argument(
        "--all",
        action="store_true",
        help="remove every fabric and leftover (not the test suites' rr-test-*, rr-tdl-*)",
    )
    down.set_defaults(func=_down)
    status = fsub.add_parser("status", help="bridges, ports, link states, hosts")
    status.add_argument("--name", help="fabric name (default: all)")
    status.set_defaults(func=_status)
    ex = fsub.add_parser("exec", help="run a command on a node (host netns, or the switches')")
    ex.add_argument("--name", help="fabric name (default: the only one up)")
    ex.add_argument("node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD")
    ex.set_defaults(func=_exec)
    site = fsub.add_parser(
        "site",
        help="build one site of a topology here: its switch, its hosts, existing interfaces "
        "for the links that leave it (the two-site containers)",
    )
    site.add_argument("file", type=Path, metavar="FILE", help="the whole topology")
    site.add_argument("switch", help="the site's border switch")
    site.add_argument(
        "--port",
        action="append",
        default=[],
        type=_port_iface,
        metavar="PORT=IFACE",
        help="an external port and the interface it becomes (repeat for each)",
    )
    site.add_argument(
        "--state-dir", type=Path, required=True, help="the inventory's state_dir (journal, locks)"
    )
    site.set_defaults(func=_site)
    delay = fsub.add_parser(
        "delay", help="show or change a long-haul node's one-way delay (its delay line's HTTP)"
    )
    delay.add_argument("fabric", help="fabric name")
    delay.add_argument("node", help="the long-haul node, e.g. lh1")
    delay.add_argument("ms", nargs="?", type=float, help="new one-way delay, both directions")
    delay.add_argument("--a-to-b-ms", type=float, help="only the p1 -> p2 direction")
    delay.add_argument("--b-to-a-ms", type=float, help="only the p2 -> p1 direction")
    delay.set_defaults(func=_delay)


def _port_iface(text: str) -> tuple[str, str]:
    port, sep, iface = text.partition("=")
    if not sep or not port or not iface:
        raise argparse.ArgumentTypeError(f"expected PORT=IFACE, got {text!r}")
    return port, iface


def _site(args: argparse.Namespace) -> int:
    from fabric import site

    topo = load_topology(args.file)
    fab = site.up(topo, args.switch, dict(args.port), state_dir=args.state_dir)
    print(f"site {args.switch} of {topo.name} is up; inventory {fab.state.inventory}")
    return 0


def _delay(args: argparse.Namespace) -> int:
    from fabric import longhaul

    control = longhaul.control(state.pick(args.fabric), args.node)
    if args.ms is None and args.a_to_b_ms is None and args.b_to_a_ms is None:
        now = control.get()
    else:
        now = control.set(delay_ms=args.ms, a_to_b_ms=args.a_to_b_ms, b_to_a_ms=args.b_to_a_ms)
    print(f"{args.node}: {now.a_to_b_ms:g} ms p1->p2, {now.b_to_a_ms:g} ms p2->p1")
    return 0
