"""MBB move of N flows across 4 bridges (ngncs-ost: long -> temporary), plan and apply time.

Run as root: ``.venv/bin/python bench/reroute_mbb.py [--sizes 1,100,1000,10000]``.
It builds its own fabric (``bench-ngncs``), installs N vm2->vm3 UDP flows on the long
path, then times planning and applying (drain 0) of moving them all to the temporary
path, and in the same run the baseline: ``ovs-ofctl --bundle add-flows`` of the same
rules the shift writes (N at br2, N at br3). Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.base import FlowChange, FlowOp, FlowProgrammer
from fabric import fabric
from fabric.forwarding import ofctl_line
from fabric.inventory import fabric_drivers
from services.reroute.engine.engine import read_tables
from services.reroute.engine.executor import Executor
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.rules import directions, ingress_rule, path_tag
from services.reroute.store.sqlite import Journal

ROOT = Path(__file__).resolve().parents[1]


def _switch(drivers: Mapping[str, object], name: str) -> FlowProgrammer:
    driver = drivers[name]
    assert isinstance(driver, FlowProgrammer), name
    return driver


def flows(n: int) -> list[FlowSpec]:
    return [FlowSpec.parse(f"10.0.0.2>10.0.0.3,udp,dport={10000 + i}") for i in range(n)]


async def one_size(topo, st, n: int, runs: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    moved = flows(n)
    long, temp = topo.paths["long"], topo.paths["temporary"]
    plan_ms, apply_ms, shift_ms, changes = [], [], [], 0
    async with fabric_drivers(topo, st) as drivers:
        for _ in range(runs):
            for d in directions(long):  # put the N flows on the long path
                rules = [
                    ingress_rule(d.hops, path_tag(topo, "long"), f if d.forward else f.reverse())
                    for f in moved
                ]
                await _switch(drivers, d.hops[0].node).apply(
                    [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]
                )
            tables = await read_tables(drivers)
            intent = Intent(flows=tuple(moved), to_path="temporary", drain_s=0.0)
            t0 = time.perf_counter()
            p = plan(topo, tables, intent, now=0.0)
            plan_ms.append((time.perf_counter() - t0) * 1000)
            changes = sum(len(s.changes) for s in p.steps())
            with tempfile.TemporaryDirectory() as tmp:
                journal = Journal(Path(tmp) / "j.sqlite")
                t0 = time.perf_counter()
                outcome = await Executor(drivers, journal).run(f"bench-{n}", p)
                apply_ms.append((time.perf_counter() - t0) * 1000)
                journal.close()
            assert outcome.state == "done", outcome.error
            shift_ms.append(outcome.shifted_ms or 0.0)
            for d in directions(temp):  # remove them again
                rules = [ingress_rule(d.hops, 0, f if d.forward else f.reverse()) for f in moved]
                await _switch(drivers, d.hops[0].node).apply(
                    [FlowChange(op=FlowOp.DELETE, rule=r) for r in rules]
                )
    base = baseline(topo, st, moved, runs)
    return {
        "plan": statistics.median(plan_ms),
        "apply": statistics.median(apply_ms),
        "shifted": statistics.median(shift_ms),
        "changes": changes,
        "ofctl": base,
    }


def baseline(topo, st, moved: list[FlowSpec], runs: int) -> float:  # type: ignore[no-untyped-def]
    """One `ovs-ofctl --bundle add-flows` per ingress bridge of the rules the shift writes."""
    ovs = fabric.Fabric(state=st).ovs
    temp = topo.paths["temporary"]
    times = []
    for _ in range(runs):
        total = 0.0
        for d in directions(temp):
            bridge = d.hops[0].node
            lines = [
                ofctl_line(ingress_rule(d.hops, 99, f if d.forward else f.reverse())) for f in moved
            ]
            t0 = time.perf_counter()
            ovs.ofctl(
                "-O",
                "OpenFlow13",
                "--bundle",
                "add-flows",
                ovs.mgmt(bridge),
                "-",
                stdin="\n".join(lines) + "\n",
            )
            total += time.perf_counter() - t0
            ovs.ofctl(
                "-O", "OpenFlow13", "del-flows", ovs.mgmt(bridge), "cookie=0x5252000000006301/-1"
            )
        times.append(total * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100,1000,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    topo = replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name="bench-ngncs")
    fabric.down(topo.name)
    fab = fabric.up(topo)
    try:
        print(
            f"{'N flows':>8} {'changes':>8} {'plan ms':>9} {'apply ms':>9} {'shifted ms':>11} "
            f"{'mods/s':>9} {'ofctl ms':>9}"
        )
        for n in [int(s) for s in args.sizes.split(",")]:
            runs = args.runs if n < 10000 else max(1, args.runs // 2)
            r = asyncio.run(one_size(topo, fab.state, n, runs))
            rate = r["changes"] / (r["apply"] / 1000)
            print(
                f"{n:>8} {r['changes']:>8.0f} {r['plan']:>9.2f} {r['apply']:>9.2f} "
                f"{r['shifted']:>11.2f} {rate:>9.0f} {r['ofctl']:>9.2f}",
                flush=True,
            )
    finally:
        fabric.down(topo.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
