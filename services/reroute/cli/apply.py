"""``reroute plan|apply|recover``: dry-run and execute reroutes on the devices of an
inventory (``--inventory FILE``; default: the one the running emulated fabric wrote)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

from services.reroute import runtime
from services.reroute.cli import flowarg
from services.reroute.cli.flowarg import parse_flows
from services.reroute.engine.engine import Engine, plan_on_devices
from services.reroute.engine.executor import Outcome
from services.reroute.errors import PlanError
from services.reroute.model.intent import Intent, Strategy
from services.reroute.model.inventory import Inventory, open_drivers, resolve
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning import plan
from services.reroute.planning.plan import Plan
from services.reroute.rules import initial_rules
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import Tables, tables_from

FLAGS = {
    "flows": "--flow",
    "to_path": "--to",
    "strategy": "--strategy",
    "via": "--via",
    "drain_ms": "--drain-ms",
    "bbm_gap_ms": "--gap-ms",
    "lock_timeout_ms": "--lock-timeout-ms",
}
"""The reroute options a ``PlanError`` names (``errors.OPTIONS``) as this command's flags."""


def flag_word(name: str, value: str) -> str:
    """An option a ``PlanError`` names, as ``plan``/``apply`` take it: ``--via temporary``;
    the bare flag when the message names the option itself (``leave out --via``)."""
    return f"{FLAGS[name]} {value}" if value else FLAGS[name]


def _in_flags(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``run`` with its plan errors worded in this command's flags."""

    def worded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except PlanError as exc:
            raise exc.worded(flag_word) from exc

    return worded


def _intent(args: argparse.Namespace, topo: Topology) -> Intent:
    return Intent(
        flows=parse_flows(args.flow, *_example(topo), hosts=topo.addresses),
        to_path=args.to,
        strategy=Strategy(args.strategy),
        drain_s=None if args.drain_ms is None else args.drain_ms / 1000,
        bbm_gap_s=args.gap_ms / 1000,
        via=args.via,
        lock_timeout_s=None if args.lock_timeout_ms is None else args.lock_timeout_ms / 1000,
    )


def _example(topo: Topology) -> tuple[str, str]:
    """Two addresses of the topology for examples: a path's ends."""
    path = next(iter(topo.paths.values()), None)
    return (str(path.src_ip), str(path.dst_ip)) if path else ("10.0.0.2", "10.0.0.3")


def _plan(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    intent = _intent(args, topo)
    if args.inventory is None and not runtime.default_inventory(topo.name).exists():
        print(
            f"(no inventory and fabric {topo.name} is not up: planning on its initial state)",
            file=sys.stderr,
        )
        tables: Tables = tables_from(initial_rules(topo))
        print(plan(topo, tables, intent, now=time.time()).describe())
        return 0
    print(asyncio.run(_plan_on(topo, resolve(args.inventory, topo), intent)).describe())
    return 0


async def _plan_on(topo: Topology, inv: Inventory, intent: Intent) -> Plan:
    """The plan ``apply`` would run now, refused as it would be (changes nothing)."""
    async with open_drivers(inv, topo, background=True) as drivers:
        return await plan_on_devices(
            topo, drivers, intent, timeout=inv.device_timeout_s, space=inv.cookies
        )


def _apply(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    intent = _intent(args, topo)
    inv = resolve(args.inventory, topo)
    journal = Journal(args.journal or inv.journal)
    try:
        the_plan, outcome = asyncio.run(_apply_async(topo, inv, journal, intent, args.step_timeout))
    finally:
        journal.close()
    print(the_plan.describe())
    print(outcome.describe())
    return 0 if outcome.state is RerouteState.DONE else 1


async def _apply_async(
    topo: Topology, inv: Inventory, journal: Journal, intent: Intent, timeout: float
) -> tuple[Plan, Outcome]:
    async with open_drivers(inv, topo, background=True) as drivers:
        engine = Engine.of(topo, inv, drivers, journal, step_timeout=timeout)
        return await engine.apply(intent)


def _recover(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    inv = resolve(args.inventory, topo)
    journal = Journal(args.journal or inv.journal)
    try:
        if args.resync:
            done, synced = asyncio.run(_resync_async(topo, inv, journal))
        else:
            done, synced = asyncio.run(_recover_async(topo, inv, journal)), None
    finally:
        journal.close()
    print(f"recovered {len(done)} interrupted reroute(s): {' '.join(done) or '-'}")
    if args.resync:
        print("resync: the switches hold every flow's intended path" if synced is None else
              f"resync: {synced.describe()}")  # fmt: skip
    return 0 if synced is None or synced.state is RerouteState.DONE else 1


async def _resync_async(
    topo: Topology, inv: Inventory, journal: Journal
) -> tuple[list[str], Outcome | None]:
    async with open_drivers(inv, topo, background=True) as drivers:
        return await Engine.of(topo, inv, drivers, journal).resync()


async def _recover_async(topo: Topology, inv: Inventory, journal: Journal) -> list[str]:
    async with open_drivers(inv, topo, background=True) as drivers:
        engine = Engine.of(topo, inv, drivers, journal)
        recovered = await engine.recover()
        for device, what in (await engine.settle()).items():
            print(f"cleanup of {device} (left while it did not answer): {what}")
        for device, reroute_id in journal.debts().items():
            print(f"cleanup of {device} still pending (reroute {reroute_id}): it does not answer")
        return recovered


def _devices(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", type=Path, required=True, metavar="FILE")
    p.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="how to reach the devices (default: the running emulated fabric's inventory)",
    )
    p.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help="the journal (default: journal.sqlite in the inventory's state_dir)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    _devices(p)
    p.add_argument(
        "--flow",
        action="append",
        default=[],
        metavar=flowarg.METAVAR,
        help=flowarg.HELP,
    )
    p.add_argument("--to", required=True, metavar="PATH", help="name of the target path")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default="mbb")
    p.add_argument(
        "--drain-ms",
        type=float,
        default=None,
        help="wait before removing old rules (default: the old path's delay + 10%% + 5 ms)",
    )
    p.add_argument("--gap-ms", type=float, default=0.0, help="BBM: extra outage (experiments)")
    p.add_argument(
        "--via",
        metavar="PATH",
        help="optical MBB: the temporary path the flows take while the circuit locks",
    )
    p.add_argument(
        "--lock-timeout-ms",
        type=float,
        default=None,
        help="optical: longest wait for the new circuit's ports to come up (then roll back; "
        "default 3000); refused on a move with no optical step",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan``, ``apply`` and ``recover`` to the ``reroute`` parser."""
    p = sub.add_parser("plan", help="show the plan of a reroute (dry run, changes nothing)")
    _common(p)
    p.set_defaults(func=_in_flags(_plan))
    a = sub.add_parser("apply", help="execute a reroute on the inventory's devices")
    _common(a)
    a.add_argument(
        "--step-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds one device step (install, shift, verify, remove, circuits) may take "
        "before it fails and the reroute rolls back (default 10; the drain and the lock "
        "wait have their own limits)",
    )
    a.set_defaults(func=_in_flags(_apply))
    r = sub.add_parser("recover", help="finish or roll back reroutes interrupted by a crash")
    _devices(r)
    r.add_argument(
        "--resync",
        action="store_true",
        help="then write every flow's intended path (initial paths, then the journal) where "
        "the switches differ: after a switch lost its tables or a rollback failed",
    )
    r.set_defaults(func=_recover)
