"""``reroute inventory check|schema|kinds``: the devices an engine reaches, checked."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from drivers import base
from services.reroute import devicecheck, preflight
from services.reroute.model import inventory
from services.reroute.model.topology import load_topology

SCHEMA = Path(__file__).resolve().parents[3] / "topologies" / "inventory.schema.json"


def _check(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    inv = inventory.resolve(args.inventory, topo)
    scope = args.scope.split(",") if args.scope else None
    reports = asyncio.run(preflight.check_devices(inv, topo, scope))
    print(f"inventory {inv.file} (topology {inv.topology}, state in {inv.state_dir})")
    print(preflight.table(reports))
    states = asyncio.run(devicecheck.check_devices(inv, topo, scope))
    print(f"\nstate (our rules compared with the journal {inv.journal}):")
    print(devicecheck.table(states))
    bad = sorted({r.name for r in reports if not r.ok} | {s.name for s in states if not s.up})
    if bad:
        print(f"not ready: {', '.join(bad)}", file=sys.stderr)
        return 1
    print(f"all {len(reports)} devices reachable and ready")
    return 0


def _schema(args: argparse.Namespace) -> int:
    text = json.dumps(inventory.schema(), indent=2) + "\n"
    if args.write:
        SCHEMA.write_text(text)
        print(f"wrote {SCHEMA}")
    else:
        sys.stdout.write(text)
    return 0


def _kinds(args: argparse.Namespace) -> int:
    for k in base.kinds():
        target = k.spec.model_fields["target"].description or ""
        print(f"{k.name:14} {k.summary}\n{'':14} target: {target}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``inventory check|schema|kinds`` to the ``reroute`` parser."""
    p = sub.add_parser("inventory", help="the devices an engine reaches: check, schema, kinds")
    cmds = p.add_subparsers(dest="inventory_command", required=True, metavar="COMMAND")
    c = cmds.add_parser(
        "check",
        help="connect to every device: reachable, identity, ready (changes nothing)",
        description="Connect to every device of the inventory (each within its timeout_s) "
        "and print one table: reachable, what the device says it is, and whether it is "
        "ready (its datapath id / size / pipeline as the topology says, the topology's "
        "ports present); then each device's state as the service reports it (up, down, "
        "hung, no_pipeline, out_of_sync: fewer of our rules than the journal expects) "
        "and the error. Exits 1 naming the devices that are not ready or not up.",
    )
    c.add_argument("--topology", type=Path, required=True, metavar="FILE")
    c.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="default: the running emulated fabric's (/run/reroute/<name>/inventory.yaml)",
    )
    c.add_argument("--scope", metavar="SW1,SW2", help="only these switches")
    c.set_defaults(func=_check)
    s = cmds.add_parser("schema", help="print the inventory JSON Schema (from the registry)")
    s.add_argument("--write", action="store_true", help=f"write it to {SCHEMA.name}")
    s.set_defaults(func=_schema)
    k = cmds.add_parser("kinds", help="the driver kinds of this installation and their targets")
    k.set_defaults(func=_kinds)
