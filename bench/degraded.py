"""What a dead switch costs a reroute: the diamond (topologies/diamond.yaml), h1 -> h2 moved
from ``upper`` (s1-s2-s3) to ``lower`` (s1-s4-s3), timed from the request to done.

Run as root: ``.venv/bin/python bench/degraded.py [--runs 10]``. It builds its own fabric
(``bench-diamond``) and, in the same run, three cases over the same moves:

- **healthy**: every switch answers (the baseline);
- **old path dead**: s2, only on the path the flow leaves, is a black hole (a listener that
  never answers: connections made, nothing said, as a switch cut off before the engine
  started, so it never opened); the reroute goes ahead without it and its cleanup is owed
  (settled, untimed, before the next run);
- **new path dead**: s4 is the black hole: the reroute is refused; the time to the refusal.

A switch that never opened is known down at once (``reach.Devices``): neither case waits.
One that was open and then hangs costs a needed read its ``device_timeout_s`` and an old
path's read at most 0.1 s beyond the needed ones (``engine.SPARE_GRACE_S``; measured by
``tests/e2e/test_degraded.py``'s relays, not here).

Each case opens its drivers once (a black hole's opening is waited for at most
``device_timeout_s``, then goes on in the background: not timed), then times ``apply``.
Numbers, not pass/fail; the last line compares the first two.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric import fabric
from services.reroute.engine.engine import Engine
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.inventory import Inventory, load_inventory, open_drivers
from services.reroute.model.topology import Topology, load_topology
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal

ROOT = Path(__file__).resolve().parents[1]
FLOW = FlowSpec.parse("10.0.0.1>10.0.0.2")
TIMEOUT_S = 2.0  # the inventory's device_timeout_s (its default)


@contextmanager
def black_hole() -> Iterator[str]:
    """A loopback listener that never accepts: the kernel completes connections, nothing
    is ever said (an OpenFlow ``tcp:`` target)."""
    server = socket.create_server(("127.0.0.1", 0), backlog=16)
    try:
        yield f"tcp:127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def inventory(base: Path, into: Path, dead: str | None, target: str) -> Inventory:
    """The fabric's inventory with ``dead`` (if any) replaced by ``target``."""
    doc = yaml.safe_load(base.read_text())
    if dead is not None:
        doc["devices"][dead]["target"] = target
    doc["device_timeout_s"] = TIMEOUT_S
    doc["state_dir"] = str(into / "state")
    path = into / f"inventory-{dead or 'healthy'}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_inventory(path)


async def move(topo: Topology, inv: Inventory, to: str, runs: int, back: Inventory) -> list[float]:
    """``runs`` moves to ``to`` on ``inv`` (ms to done, or to the refusal); each put back on
    ``upper`` (and its cleanup settled) on ``back``, untimed."""
    took = []
    journal = Journal(inv.journal)
    try:
        async with open_drivers(inv, topo, background=True) as drivers:
            engine = Engine.of(topo, inv, drivers, journal)
            for _ in range(runs):
                started = time.perf_counter()
                try:
                    _, outcome = await engine.apply(Intent(flows=(FLOW,), to_path=to))
                    assert outcome.state is RerouteState.DONE, outcome.describe()
                except PlanError:
                    pass
                took.append((time.perf_counter() - started) * 1000)
                await restore(topo, back, journal)
            await engine.close()
    finally:
        journal.close()
    return took


async def restore(topo: Topology, inv: Inventory, journal: Journal) -> None:
    """The flow back on ``upper`` and every owed cleanup done, on the healthy inventory."""
    async with open_drivers(inv, topo) as drivers:
        engine = Engine.of(topo, inv, drivers, journal)
        try:
            with suppress(PlanError):  # already there (the move was refused)
                await engine.apply(Intent(flows=(FLOW,), to_path="upper"))
            await engine.settle()
        finally:
            await engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="moves per case (default 10)")
    args = parser.parse_args()
    topo = replace(load_topology(ROOT / "topologies" / "diamond.yaml"), name="bench-diamond")
    fabric.down(topo.name)
    fab = fabric.up(topo)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp, black_hole() as hole:
            into = Path(tmp)
            healthy = inventory(fab.state.inventory, into, None, hole)
            for name, dead, to in (
                ("healthy", None, "lower"),
                ("old path dead (s2)", "s2", "lower"),
                ("new path dead (s4): refused", "s4", "lower"),
            ):
                inv = inventory(fab.state.inventory, into, dead, hole)
                inv = replace(inv, state_dir=healthy.state_dir)  # one journal: debts settled
                print(f"{name}: {args.runs} moves ...", file=sys.stderr)
                took = asyncio.run(move(topo, inv, to, args.runs, healthy))
                rows.append((name, statistics.median(took), min(took), max(took)))
    finally:
        fabric.down(topo.name)
    print(f"{'case':<30} {'median ms':>10} {'min':>8} {'max':>8}")
    for name, median, low, high in rows:
        print(f"{name:<30} {median:>10.1f} {low:>8.1f} {high:>8.1f}")
    base, without = rows[0][1], rows[1][1]
    print(f"a dead old-path switch costs {without - base:+.1f} ms ({without:.1f} vs {base:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
