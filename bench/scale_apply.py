"""MBB moves of 1k, 10k, 100k flows across a generated leaf-spine fabric, on real OVS.

Run as root, under the fabric lock, from the repository root::

    flock /tmp/reroute-fabric.lock .venv/bin/python bench/scale_apply.py \\
        [--sizes 1000,10000,100000] [--runs 1] [--plot bench/scale_apply.png]

It writes ``reroute topo generate leaf-spine --racks 4 --spines 2 --ocs 2`` (named
``bench-ls``) and builds it as an ordinary fabric (namespaces, hosts, OVS userspace
datapath bridges for leaves, spines and OCS, the Polatis emulators). Per N, in a fresh
process (so its peak memory is the move's): N udp flows rack 1 -> rack 2 are installed on
spine 1 (``r1-2-s1``: N ingress rules at leaf1, N at leaf2), then the engine's path is
timed: read our rules from every switch, plan the MBB move to spine 2 (``r1-2-s2``),
execute it (make, verify, shift, verify; journaled in SQLite). Reported: read, plan, apply
and shift time (request to traffic on the new path, within apply), the whole move (read +
plan + apply), and the peak resident memory the move added (VmHWM, reset before it).
Baseline in the same run: one ``ovs-ofctl -O OpenFlow13 --bundle add-flows`` per ingress
bridge of the same rules the shift writes (N at leaf1, N at leaf2, one after the other,
process start included). Then the least-squares fit of each time against N (slope,
intercept, R^2) and a plot. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.base import FlowChange, FlowOp
from drivers.gcpause import gc_paused
from fabric import fabric
from fabric.forwarding import ofctl_line
from fabric.inventory import fabric_drivers
from fabric.state import FabricState, load
from services.reroute.engine.engine import read_tables
from services.reroute.engine.executor import Executor
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning import plan
from services.reroute.rules import (
    ROLE_INGRESS,
    cookie,
    directions,
    ingress_rule,
    path_rules,
    path_tag,
)
from services.reroute.store.sqlite import Journal

NAME = "bench-ls"
FROM, TO = "r1-2-s1", "r1-2-s2"
MEASURES = ("read", "plan", "apply", "shifted", "move", "ofctl")


def moved_flows(topo: Topology, n: int) -> list[FlowSpec]:
    start = topo.paths[FROM]
    pair = f"{start.src_ip}>{start.dst_ip},udp"
    return [
        FlowSpec.parse(f"{pair},sport={1 + i // 60000},dport={1 + i % 60000}") for i in range(n)
    ]


def _note(what: str) -> None:
    """Progress on stderr (the child's stdout is its result)."""
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux, proc(5))


async def _apply_all(drivers: Mapping[str, Any], rules: dict[str, list[Any]], op: FlowOp) -> None:
    await asyncio.gather(
        *(drivers[b].apply([FlowChange(op=op, rule=r) for r in rs]) for b, rs in rules.items())
    )


async def one_move(topo: Topology, state: FabricState, n: int) -> dict[str, float]:
    """Child process: install N flows on FROM, time the move to TO, remove them again."""
    flows = moved_flows(topo, n)
    tag = path_tag(topo, FROM)
    start = {
        d.hops[0].node: [ingress_rule(d.hops, tag, f if d.forward else f.reverse()) for f in flows]
        for d in directions(topo.paths[FROM])
    }
    async with fabric_drivers(topo, state) as drivers:
        _note(f"installing {n} flows on {FROM}")
        await _apply_all(drivers, start, FlowOp.ADD)
        _note("moving them")
        del start
        gc.collect()
        intent = Intent(flows=tuple(flows), to_path=TO)
        with tempfile.TemporaryDirectory() as tmp:
            journal = Journal(Path(tmp) / "journal.sqlite")
            rss0 = _status_kib("VmRSS")
            _reset_peak()
            with gc_paused():  # as Engine.apply does
                t0 = time.perf_counter()
                tables = await read_tables(drivers)
                t1 = time.perf_counter()
                p = plan(topo, tables, intent, now=time.time())
                t2 = time.perf_counter()
                outcome = await Executor(drivers, journal).run(f"scale-{n}", p)
                t3 = time.perf_counter()
            peak = _status_kib("VmHWM") - rss0
            journal.close()
        assert outcome.state == "done", outcome.error
        del tables, p
        _note("removing them")
        await _apply_all(drivers, path_rules(topo, topo.paths[TO], flows), FlowOp.DELETE)
        _note("removed")
    return {
        "read": (t1 - t0) * 1000,
        "plan": (t2 - t1) * 1000,
        "apply": (t3 - t2) * 1000,
        "shifted": outcome.shifted_ms or 0.0,
        "move": (t3 - t0) * 1000,
        "peak_mib": peak / 1024,
    }


def baseline(topo: Topology, state: FabricState, n: int) -> float:
    """ms of one ``ovs-ofctl --bundle add-flows`` per ingress bridge of the shift's rules."""
    ovs = fabric.Fabric(state=state).ovs
    flows, tag = moved_flows(topo, n), path_tag(topo, TO)
    mine = cookie(tag, ROLE_INGRESS)
    total = 0.0
    for d in directions(topo.paths[TO]):
        bridge = d.hops[0].node
        lines = [
            ofctl_line(ingress_rule(d.hops, tag, f if d.forward else f.reverse())) for f in flows
        ]
        text = "\n".join(lines) + "\n"
        t0 = time.perf_counter()
        ovs.ofctl("-O", "OpenFlow13", "--bundle", "add-flows", ovs.mgmt(bridge), "-", stdin=text)
        total += time.perf_counter() - t0
        _note(f"baseline at {bridge}: {(time.perf_counter() - t0) * 1000:.0f} ms; deleting")
        ovs.ofctl("-O", "OpenFlow13", "del-flows", ovs.mgmt(bridge), f"cookie={mine:#x}/-1")
    return total * 1000


def fit(ns: list[int], ms: list[float]) -> tuple[float, float, float]:
    """Least squares ``ms = slope * n + intercept``: slope (ms per flow), intercept, R^2."""
    mean_n, mean_t = statistics.fmean(ns), statistics.fmean(ms)
    sxx = sum((n - mean_n) ** 2 for n in ns)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ms, strict=True)) / sxx
    intercept = mean_t - slope * mean_n
    ss_res = sum((t - (slope * n + intercept)) ** 2 for n, t in zip(ns, ms, strict=True))
    ss_tot = sum((t - mean_t) ** 2 for t in ms)
    return slope, intercept, 1 - ss_res / ss_tot if ss_tot else 1.0


def plot(rows: list[dict[str, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [int(r["n"]) for r in rows]
    fig, (ax, mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, style in zip(MEASURES, ("o-", "s-", "^-", "v-", "D-", "x--"), strict=True):
        slope = fit(ns, [r[key] for r in rows])[0]
        ax.plot(ns, [r[key] for r in rows], style, label=f"{key} ({slope * 1000:.1f} us/flow)")
    ax.axhline(3000, color="grey", linestyle=":", label="3 s budget")
    ax.set(xscale="log", yscale="log", xlabel="flows moved (N)", ylabel="ms")
    ax.set_title("MBB move spine 1 -> spine 2, leaf-spine r4 s2 o2, OVS userspace")
    ax.legend(fontsize=7)
    mem.plot(ns, [r["peak_mib"] for r in rows], "o-")
    mem.set(xscale="log", yscale="log", xlabel="flows moved (N)", ylabel="MiB")
    mem.set_title("peak resident memory added by the move")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def child(n: int) -> int:
    state = load(NAME)
    assert state is not None, f"fabric {NAME} is not up"
    topo = load_topology(state.topology)
    print(json.dumps(asyncio.run(one_move(topo, state, n))))
    return 0


def measure(topo: Topology, state: FabricState, n: int, runs: int) -> dict[str, float]:
    results = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n)],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        ).stdout
        results.append(json.loads(out.splitlines()[-1]))
        results[-1]["ofctl"] = baseline(topo, state, n)
    return {"n": n} | {k: statistics.median(r[k] for r in results) for k in results[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--plot", type=Path, default=Path("bench/scale_apply.png"))
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.child)
    fabric.down(NAME)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / f"{NAME}.yaml"
        file.write_text(to_yaml(leaf_spine(4, 2, 2, name=NAME)))
        topo = load_topology(file)
        fab = fabric.up(topo)
        try:
            rows = report(topo, fab.state, [int(s) for s in args.sizes.split(",")], args.runs)
        finally:
            fabric.down(NAME)
    if len(rows) > 1:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


def report(
    topo: Topology, state: FabricState, sizes: list[int], runs: int
) -> list[dict[str, float]]:
    heads = [f"{m} ms" for m in MEASURES] + ["peak MiB"]
    print(f"{'N flows':>8} " + " ".join(f"{h:>11}" for h in heads), flush=True)
    rows = []
    for n in sizes:
        rows.append(measure(topo, state, n, runs))
        values = [rows[-1][m] for m in MEASURES] + [rows[-1]["peak_mib"]]
        print(f"{n:>8} " + " ".join(f"{v:>11.1f}" for v in values), flush=True)
    if len(rows) > 1:
        ns = [int(r["n"]) for r in rows]
        for key in (*MEASURES, "peak_mib"):
            slope, intercept, r2 = fit(ns, [r[key] for r in rows])
            scale, unit = (1024.0, "KiB") if key == "peak_mib" else (1000.0, "us")
            per = [r[key] / r["n"] * scale for r in rows]
            print(
                f"fit {key:<8} slope {slope * scale:7.2f} {unit}/flow  intercept {intercept:8.1f}"
                f"  R^2 {r2:.4f}  per flow at each N: " + ", ".join(f"{p:.2f}" for p in per)
            )
    return rows


if __name__ == "__main__":
    sys.exit(main())
