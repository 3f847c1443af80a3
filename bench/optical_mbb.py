"""Optical MBB overhead over switching + lock: where the time goes besides the optics.

Run as root: ``.venv/bin/python bench/optical_mbb.py [--runs 6]``.
It builds its own fabric (``bench-ost``, seed 003's testbed with its Polatis emulator) and
moves vm2<->vm3 between ``long`` and ``short`` by optical MBB via ``temporary``, no
traffic, alternating directions. Per run: request -> traffic on the new path (the last
shift done and the new circuit locked) minus the emulator's switching time and the lock
time it drew (``:EMUL:LOCK?``), i.e. what the engine adds. The baseline in the same run is
that switching + lock itself, and the same moves with the previous defaults: a fixed
50 ms drain and the lock gate polling port state every 2 ms. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulators.polatis.emulator import EmulatorConfig
from fabric import fabric
from fabric.inventory import fabric_drivers
from fabric.state import FabricState
from services.reroute.engine import plan_on_devices
from services.reroute.executor import Executor, StepEvent
from services.reroute.journal import Journal, RerouteState, StepState
from services.reroute.model import FlowSpec, Intent
from services.reroute.planning.plan import StepKind
from services.reroute.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[1]
SWITCH_MS = EmulatorConfig().switch_ms
FLOW = FlowSpec.parse("10.0.0.2>10.0.0.3")


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    name: str
    drain_s: float | None  # None: derived from the old path's delay
    lock_events: bool


VARIANTS = (
    Variant(name="now: derived drain, PORT_STATUS lock gate", drain_s=None, lock_events=True),
    Variant(name="before: 50 ms drain, lock polled every 2 ms", drain_s=0.05, lock_events=False),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    overhead_ms: float  # new path - (switching + drawn lock)
    before_circuits_ms: float  # request -> circuits command started
    lock_seen_ms: float  # circuits started -> lock step done, minus switching + drawn lock
    swap_ms: float  # lock step done -> last shift done
    optics_ms: float  # switching + drawn lock


async def one(
    topo: Topology, st: FabricState, to: str, variant: Variant, verbose: bool = False
) -> Run:
    ended: dict[int, float] = {}
    started: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        stamp = {StepState.DONE: ended, StepState.STARTED: started}.get(event.state)
        if stamp is not None:
            stamp[event.index] = time.perf_counter()

    intent = Intent(flows=(FLOW,), to_path=to, via="temporary", drain_s=variant.drain_s)
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(Path(tmp) / "j.sqlite")
        async with fabric_drivers(topo, st) as drivers:
            t0 = time.perf_counter()
            plan = await plan_on_devices(topo, drivers, intent)
            executor = Executor(
                drivers, journal, on_event=on_event, lock_events=variant.lock_events
            )
            outcome = await executor.run("bench", plan)
        journal.close()
    assert outcome.state is RerouteState.DONE, outcome.describe()
    if verbose:
        print(f"plan {(started[1] - t0) * 1000:.1f} ms, then\n{outcome.describe()}")
    steps = list(enumerate(plan.steps(), start=1))
    (circuits,) = [i for i, s in steps if s.kind is StepKind.CIRCUITS]
    (lock,) = [i for i, s in steps if s.kind is StepKind.AWAIT_LOCK]
    last_shift = max(ended[i] for i, s in steps if s.kind is StepKind.SHIFT)
    new_path = max(last_shift, ended[lock])
    drawn = max(_drawn_locks(st.scpi["ost1"]).values())
    optics = SWITCH_MS + drawn
    return Run(
        overhead_ms=(new_path - t0) * 1000 - optics,
        before_circuits_ms=(started[circuits] - t0) * 1000,
        lock_seen_ms=(ended[lock] - started[circuits]) * 1000 - optics,
        swap_ms=(new_path - ended[lock]) * 1000,
        optics_ms=optics,
    )


def _drawn_locks(port: int) -> dict[int, float]:
    """The lock times the Polatis emulator last drew, by egress port (emulator-only SCPI)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b":EMUL:LOCK?\n")
        reply = conn.makefile().readline().strip()
    ports, _, times = reply.removeprefix("(@").removesuffix(")").partition("),(")
    return {int(p): float(t) for p, t in zip(ports.split(","), times.split(","), strict=True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="round trips per variant")
    parser.add_argument("--steps", action="store_true", help="print each move's step timings")
    args = parser.parse_args()
    topo = replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name="bench-ost")
    fabric.down(topo.name)
    fab = fabric.up(topo)
    results: dict[str, list[Run]] = {v.name: [] for v in VARIANTS}
    try:
        for _ in range(args.runs):  # interleaved: both variants see the same machine
            for variant in VARIANTS:
                for to in ("short", "long"):
                    run = asyncio.run(one(topo, fab.state, to, variant, args.steps))
                    results[variant.name].append(run)
    finally:
        fabric.down(topo.name)
    print(
        f"{'variant':<46} {'overhead':>9} {'->circuits':>11} {'lock seen':>10} "
        f"{'swap':>6} {'switch+lock':>12}   (ms, median of {2 * args.runs} moves)"
    )
    for name, runs in results.items():

        def med(field: str, runs: list[Run] = runs) -> float:
            return float(statistics.median(getattr(r, field) for r in runs))

        print(
            f"{name:<46} {med('overhead_ms'):>9.1f} {med('before_circuits_ms'):>11.1f} "
            f"{med('lock_seen_ms'):>10.1f} {med('swap_ms'):>6.1f} {med('optics_ms'):>12.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
