"""``reroute plan|apply|recover``: dry-run and execute reroutes against a running fabric."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from fabric import state as fabric_state
from services.reroute.engine import (
    fabric_drivers,
    journal_path,
    lock_dir,
    read_optics,
    read_tables,
    recover,
    reroute,
)
from services.reroute.errors import FabricError
from services.reroute.executor import Outcome
from services.reroute.journal import Journal, RerouteState
from services.reroute.model import FlowSpec, Intent, Strategy
from services.reroute.planner import Plan, plan
from services.reroute.rules import initial_rules
from services.reroute.tables import Tables, tables_from
from services.reroute.topology import Circuit, Topology, load_topology


def _intent(args: argparse.Namespace, topo: Topology) -> Intent:
    if not args.flow:
        raise FabricError("give at least one --flow SRC>DST (e.g. --flow 10.0.0.2>10.0.0.3)")
    return Intent(
        flows=tuple(FlowSpec.parse(f) for f in args.flow),
        to_path=args.to,
        strategy=Strategy(args.strategy),
        drain_s=args.drain_ms / 1000,
        bbm_gap_s=args.gap_ms / 1000,
        via=args.via,
        lock_timeout_s=args.lock_timeout_ms / 1000,
    )


def _running(topo: Topology) -> fabric_state.FabricState | None:
    st = fabric_state.load(topo.name)
    return st if st is not None and st.phase == "up" else None


def _plan(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    intent = _intent(args, topo)
    st = _running(topo)
    if st is None:
        print(f"(fabric {topo.name} is not up: planning on its initial state)", file=sys.stderr)
        tables: Tables = tables_from(initial_rules(topo))
        optics = None
    else:
        tables, optics = asyncio.run(_read(topo, st))
    print(plan(topo, tables, intent, now=time.time(), optics=optics).describe())
    return 0


async def _read(topo: Topology, st: fabric_state.FabricState) -> tuple[Tables, frozenset[Circuit]]:
    async with fabric_drivers(topo, st) as drivers:
        return await read_tables(drivers), await read_optics(drivers)


def _apply(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    intent = _intent(args, topo)
    st = _running(topo)
    if st is None:
        raise FabricError(f"fabric {topo.name} is not up: `reroute fabric up {args.topology}`")
    journal = Journal(journal_path(st))
    try:
        the_plan, outcome = asyncio.run(_apply_async(topo, st, journal, intent, args.step_timeout))
    finally:
        journal.close()
    print(the_plan.describe())
    print(outcome.describe())
    return 0 if outcome.state is RerouteState.DONE else 1


async def _apply_async(
    topo: Topology, st: fabric_state.FabricState, journal: Journal, intent: Intent, timeout: float
) -> tuple[Plan, Outcome]:
    async with fabric_drivers(topo, st) as drivers:
        return await reroute(
            topo, drivers, journal, intent, step_timeout=timeout, lock_dir=lock_dir(st)
        )


def _recover(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    st = _running(topo)
    if st is None:
        raise FabricError(f"fabric {topo.name} is not up")
    journal = Journal(journal_path(st))
    try:
        done = asyncio.run(_recover_async(topo, st, journal))
    finally:
        journal.close()
    print(f"recovered {len(done)} interrupted reroute(s): {' '.join(done) or '-'}")
    return 0


async def _recover_async(
    topo: Topology, st: fabric_state.FabricState, journal: Journal
) -> list[str]:
    async with fabric_drivers(topo, st) as drivers:
        return await recover(topo, drivers, journal)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", type=Path, required=True, metavar="FILE")
    p.add_argument(
        "--flow",
        action="append",
        default=[],
        metavar="SRC>DST[,udp][,dport=N]",
        help="a flow to move (repeatable); its reverse direction moves with it",
    )
    p.add_argument("--to", required=True, metavar="PATH", help="name of the target path")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default="mbb")
    p.add_argument("--drain-ms", type=float, default=50.0, help="wait before removing old rules")
    p.add_argument("--gap-ms", type=float, default=0.0, help="BBM: extra outage (experiments)")
    p.add_argument(
        "--via",
        metavar="PATH",
        help="optical MBB: the temporary path the flows take while the circuit locks",
    )
    p.add_argument(
        "--lock-timeout-ms",
        type=float,
        default=3000.0,
        help="optical: longest wait for the new circuit's ports to come up (then roll back)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="show the plan of a reroute (dry run, changes nothing)")
    _common(p)
    p.set_defaults(func=_plan)
    a = sub.add_parser("apply", help="execute a reroute on a running fabric")
    _common(a)
    a.add_argument("--step-timeout", type=float, default=10.0, metavar="S")
    a.set_defaults(func=_apply)
    r = sub.add_parser("recover", help="roll back reroutes interrupted by a crash")
    r.add_argument("--topology", type=Path, required=True, metavar="FILE")
    r.set_defaults(func=_recover)
