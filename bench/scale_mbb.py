"""Planning MBB moves of 1k, 10k, 100k flows across a generated leaf-spine fabric with OCS.

Run: ``.venv/bin/python bench/scale_mbb.py [--sizes 1000,10000,100000]`` (no root: the
planner is pure; nothing is started). The topology is ``reroute topo generate leaf-spine
--racks 4 --spines 2 --ocs 2``; N udp flows of rack 1 -> rack 2 sit on spine 1 and move
(MBB) to spine 2, and, optically, onto OCS 2 via spine 2 (its circuits reconfigured). Per
N: plan time (median), peak memory allocated while planning (tracemalloc, a separate run),
and the least-squares slope of time against N with its worst relative residual (how far
from linear). Applying on a fabric of this size is not measured here. Numbers, not
pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, parse_topology
from services.reroute.planning import plan
from services.reroute.rules import initial_rules, path_rules
from services.reroute.tables import Tables, tables_from

MOVES = {
    "spine": Intent(flows=(), to_path="r1-2-s2"),
    "optical": Intent(flows=(), to_path="r1-2-o2", via="r1-2-s2"),
}


def setup(topo: Topology, n: int) -> tuple[Tables, tuple[FlowSpec, ...]]:
    start = topo.paths["r1-2-s1"]
    pair = f"{start.src_ip}>{start.dst_ip},udp"
    flows = tuple(
        FlowSpec.parse(f"{pair},sport={1 + i // 60000},dport={1 + i % 60000}") for i in range(n)
    )
    rules = initial_rules(topo)
    for bridge, extra in path_rules(topo, start, list(flows)).items():
        rules.setdefault(bridge, []).extend(extra)
    return tables_from(rules), flows


def timed(topo: Topology, tables: Tables, intent: Intent, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        plan(topo, tables, intent, now=0.0)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def peak_mib(topo: Topology, tables: Tables, intent: Intent) -> float:
    tracemalloc.start()
    plan(topo, tables, intent, now=0.0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def slope(ns: list[int], ms: list[float]) -> tuple[float, float]:
    """Least-squares ms per flow through the points, and the worst residual as a share of
    the largest time (0: a straight line)."""
    mean_n, mean_t = statistics.fmean(ns), statistics.fmean(ms)
    a = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ms, strict=True)) / sum(
        (n - mean_n) ** 2 for n in ns
    )
    b = mean_t - a * mean_n
    worst = max(abs(t - (a * n + b)) for n, t in zip(ns, ms, strict=True)) / max(ms)
    return a, worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    topo = parse_topology(to_yaml(leaf_spine(4, 2, 2)))
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'move':<8} {'N flows':>8} {'plan ms':>9} {'peak MiB':>9}")
    for name, template in MOVES.items():
        ms = []
        for n in sizes:
            tables, flows = setup(topo, n)
            intent = Intent(flows=flows, to_path=template.to_path, via=template.via)
            ms.append(timed(topo, tables, intent, args.runs))
            print(f"{name:<8} {n:>8} {ms[-1]:>9.1f} {peak_mib(topo, tables, intent):>9.1f}")
        if len(sizes) > 2:
            per_flow, worst = slope(sizes, ms)
            print(f"{name:<8} slope {per_flow * 1000:.2f} us/flow, worst residual {worst:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
