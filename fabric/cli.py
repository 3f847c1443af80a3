"""``reroute fabric up|site|status|exec|delay|down``: the emulated fabric from the command line.

One convention on a host where several fabrics are up: a command that acts on a fabric
names it first (``FABRIC``: its name or its topology file); ``status`` without one shows
every fabric; ``down`` removes only what it names, or everything with ``--all``. The
earlier ``--name FABRIC`` and a missing FABRIC on ``exec`` (the only fabric up) still
work, with a note saying the form to use.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fabric import fabric, state
from fabric.errors import FabricError
from fabric.kinds import players
from fabric.run import in_netns
from fabric.status import render
from fabric.vswitch import OvsInstance
from services.reroute.model.topology import load_topology


def _progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    topo = load_topology(args.file)
    print(f"fabric {topo.name}: bringing up {topo.file}", file=sys.stderr)
    given = {o.name: getattr(args, o.name) for p in players().values() for o in p.options}
    chosen = {k: v for k, v in given.items() if v is not None}
    fab = fabric.up(topo, progress=_progress, seed=args.seed, options=chosen)
    name = topo.name
    print(
        f"fabric {name} is up: `reroute fabric status {name}`, "
        f"`reroute fabric exec {name} NODE -- CMD`; `reroute fabric down {name}` when done"
    )
    del fab
    return 0


TEST_OWNED = ("test-", "tdl-")
FABRIC_HELP = "the fabric: its name, or its topology file"


def fabric_name(text: str) -> str:
    """The name of the fabric ``text`` means: a fabric's name, or a topology file (whose
    ``name:`` names its fabric)."""
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or "/" in text:
        return load_topology(path).name
    return text


def _note(message: str) -> None:
    print(f"reroute: note: {message}", file=sys.stderr, flush=True)


def _every_fabric() -> list[str]:
    from fabric import netns

    found = {ns[3:].split(".")[0] for ns in netns.listing("rr-")}
    # rr-test-* / rr-tdl-*: scratch namespaces test suites make and remove themselves
    found = {n for n in found if not n.startswith(TEST_OWNED)}
    return sorted(found | set(state.running()))


def _to_remove(args: argparse.Namespace) -> list[str]:
    if args.all and args.fabrics:
        raise FabricError("give the fabrics to remove, or --all; not both")
    if args.all:
        return _every_fabric()
    if not args.fabrics:
        up = state.running()
        example = up[0] if len(up) == 1 else "NAME"
        raise FabricError(
            "say which fabric to remove: `reroute fabric down "
            f"{example}` (up: {', '.join(up) or 'none'}), or `reroute fabric down --all` for "
            "every fabric and leftover on this machine"
        )
    return [fabric_name(f) for f in args.fabrics]


def _down(args: argparse.Namespace) -> int:
    for name in _to_remove(args):
        removed = fabric.down(name)
        if removed:
            print(f"fabric {name}: removed {len(removed)} items")
        else:
            up = ", ".join(state.running()) or "none"
            print(f"fabric {name}: nothing to remove (up: {up})")
    return 0


def _status(args: argparse.Namespace) -> int:
    named = [*args.fabrics]
    if args.name:
        _note(f"--name is deprecated: `reroute fabric status {args.name}`")
        named.append(args.name)
    names = [fabric_name(f) for f in named] or state.running()
    if not names:
        print("no fabric is up")
    for name in names:
        print(render(state.pick(name)))
    return 0


def _exec(args: argparse.Namespace) -> int:
    st, node, cmd = _exec_target(args.name, args.words)
    if not cmd:
        raise FabricError(
            f"give a command after --, e.g. `reroute fabric exec {st.name} {node} -- ip addr`"
        )
    if node not in st.host_ns and node not in _switch_nodes(st):
        raise FabricError(f"fabric {st.name} has no node {node!r}")
    env = {**os.environ, **OvsInstance(rundir=st.ovs_dir, netns=st.fabric_ns).env}
    argv = in_netns(st.node_ns(node), cmd)
    os.execvpe(argv[0], argv, env)


def _exec_target(name: str | None, words: list[str]) -> tuple[state.FabricState, str, list[str]]:
    """(fabric, node, command) of ``exec FABRIC NODE -- CMD``; also the deprecated
    ``exec --name FABRIC NODE -- CMD`` and ``exec NODE -- CMD`` (the only fabric up)."""
    dashes = "--" in words
    at = words.index("--") if dashes else len(words)
    head, cmd = words[:at], words[at + 1 :]
    usage = "usage: reroute fabric exec FABRIC NODE -- CMD ..."
    if not head:
        raise FabricError(usage)
    if name is not None:
        _note(f"--name is deprecated: `reroute fabric exec {name} {head[0]} -- ...`")
        return state.pick(fabric_name(name)), head[0], [*head[1:], *cmd]
    if len(head) == 1 or (not dashes and _only_fabrics_node(head[0])):
        st = state.pick(None)
        _note(
            f"name the fabric: `reroute fabric exec {st.name} {head[0]} -- ...` (without it "
            "this fails once a second fabric is up)"
        )
        return st, head[0], [*head[1:], *cmd]
    if dashes and len(head) != 2:
        raise FabricError(usage)
    return state.pick(fabric_name(head[0])), head[1], [*head[2:], *cmd]


def _only_fabrics_node(word: str) -> bool:
    """``word`` is a node of the one fabric up (and not that fabric's name)."""
    up = state.running()
    if len(up) != 1 or word in up:
        return False
    st = state.load(up[0])
    return st is not None and (word in st.host_ns or word in _switch_nodes(st))


def _switch_nodes(st: state.FabricState) -> set[str]:
    return set(load_topology(st.topology).nodes) - set(st.host_ns)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fabric up|site|status|exec|delay|down`` to the ``reroute`` parser."""
    fab = sub.add_parser(
        "fabric",
        help="build and tear down the emulated fabric",
        description="Every command that acts on a fabric names it first (FABRIC: its name "
        "or its topology file), so it means the same with other fabrics up on this host.",
    )
    fsub = fab.add_subparsers(dest="fabric_command", required=True, metavar="ACTION")
    up = fsub.add_parser("up", help="build the fabric of a topology file (named by its name:)")
    up.add_argument("file", type=Path, metavar="FILE")
    up.add_argument(
        "--seed", type=int, default=0, help="seed of the optical emulators' lock-time draws"
    )
    for kind, p in players().items():  # each player's own settings
        for option in p.options:
            up.add_argument(
                option.flag,
                dest=option.name,
                choices=option.choices or None,
                type=str if option.choices else float,
                default=None,
                help=f"{option.help} [{kind}; default: {option.default}]",
            )
    up.set_defaults(func=_up)
    down = fsub.add_parser(
        "down", help="remove the fabrics named (also what a crashed `up` left), or --all"
    )
    down.add_argument("fabrics", nargs="*", metavar="FABRIC", help=FABRIC_HELP)
    down.add_argument(
        "--all",
        action="store_true",
        help="remove every fabric and leftover on this machine, other users' too (not the "
        "test suites' rr-test-*, rr-tdl-*)",
    )
    down.set_defaults(func=_down)
    status = fsub.add_parser("status", help="bridges, ports, link states, hosts")
    status.add_argument(
        "fabrics", nargs="*", metavar="FABRIC", help=f"{FABRIC_HELP} (default: every one up)"
    )
    status.add_argument("--name", help=argparse.SUPPRESS)  # deprecated: FABRIC
    status.set_defaults(func=_status)
    ex = fsub.add_parser(
        "exec",
        help="run a command on a node of a fabric (a host's netns, or the switches')",
        usage="reroute fabric exec [-h] FABRIC NODE -- CMD ...",
    )
    ex.add_argument("--name", help=argparse.SUPPRESS)  # deprecated: FABRIC
    ex.add_argument(
        "words",
        nargs=argparse.REMAINDER,
        metavar="FABRIC NODE -- CMD",
        help=f"FABRIC: {FABRIC_HELP}; NODE: a host or switch of it",
    )
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
    delay.add_argument("fabric", metavar="FABRIC", help=FABRIC_HELP)
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
    print(
        f"site {args.switch} of {topo.name} is up (fabric {fab.state.name}); "
        f"inventory {fab.state.inventory}"
    )
    return 0


def _delay(args: argparse.Namespace) -> int:
    from fabric import longhaul

    control = longhaul.control(state.pick(fabric_name(args.fabric)), args.node)
    if args.ms is None and args.a_to_b_ms is None and args.b_to_a_ms is None:
        now = control.get()
    else:
        now = control.set(delay_ms=args.ms, a_to_b_ms=args.a_to_b_ms, b_to_a_ms=args.b_to_a_ms)
    print(f"{args.node}: {now.a_to_b_ms:g} ms p1->p2, {now.b_to_a_ms:g} ms p2->p1")
    return 0
