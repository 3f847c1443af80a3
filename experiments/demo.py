"""``reroute demo``: break-before-make vs make-before-break across an optical reconfiguration.

On seed 003's testbed (topologies/ngncs-ost.yaml): bring the fabric up (its Polatis SCPI
emulator starts with it); send vm2 -> vm3 traffic on the long path (the sequence-numbered
UDP probe and an iperf3 TCP stream) and reconfigure ost1 under it to move the flows to the
short path, first BBM, then MBB (parked on the electrical temporary path while the new
circuit locks). Between the two, the flows go back to the long path by one unmeasured MBB
reroute, and a control run sends the same traffic with nothing reconfigured: what the
emulated fabric loses by itself. The fabric is always torn down (on errors, Ctrl-C and
SIGTERM too); then the runs are printed next to seed 003's numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from experiments import demo_report as report
from experiments.demo_report import Results
from experiments.measuring import (
    DRAIN_S,
    LONG,
    PROBE_S,
    ROOT,
    SHORT,
    TEMPORARY,
    Road,
    demo_flows,
    measured,
    optical_names,
    restore,
)
from fabric import fabric, signals
from fabric import state as fabric_state
from fabric.errors import FabricError
from fabric.fabric import Fabric
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.inventory import Inventory, load_inventory
from services.reroute.model.topology import Path as TopoPath
from services.reroute.model.topology import Topology, load_topology

STEPS = 7


def _say(message: str) -> None:
    print(message, flush=True)


def _detail(message: str) -> None:
    _say(f"      .. {message}")


def _stage(n: int, message: str) -> None:
    _say(f"[{n}/{STEPS}] {message}")


def _runs(
    topo: Topology,
    fab: Fabric,
    inv: Inventory,
    args: argparse.Namespace,
    flows: tuple[FlowSpec, ...],
) -> tuple[Results, str]:
    long = topo.paths[LONG]
    traffic = (
        f"{long.src} -> {long.dst} on the {LONG} path: UDP probe {args.rate} pkt/s + iperf3"
        f" TCP {args.tcp_mbps} Mbit/s"
    )
    move = f"reconfiguring {optical_names(topo)} {LONG} -> {SHORT} under traffic ({traffic})"
    with Road(topo, inv) as road:  # one road to each device for the whole demo
        _stage(2, f"BBM: {move}")
        bbm_intent = Intent(flows=flows, to_path=SHORT, strategy=Strategy.BBM)
        bbm = measured(road, fab, args, "bbm", bbm_intent, _detail)
        _stage(3, f"back to the {LONG} path for the next runs")
        restored = restore(road, flows)
        _detail(restored)
        _stage(4, "nothing moved: the same traffic, no reconfiguration (the fabric's own loss)")
        control = measured(road, fab, args, "control", None, _detail)
        _stage(5, f"MBB via {TEMPORARY}: {move}")
        mbb_intent = Intent(flows=flows, to_path=SHORT, via=TEMPORARY, drain_s=DRAIN_S)
        mbb = measured(road, fab, args, "mbb", mbb_intent, _detail)
    return Results(bbm=bbm, mbb=mbb, control=control), restored


def _demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    topo = load_topology(args.topology)
    flows = demo_flows(topo)
    if args.inventory is not None:
        fab = _running(topo)
        inv = load_inventory(args.inventory)
        _stage(1, f"fabric {topo.name} is up; reaching its devices through {inv.file}")
        results, restored = _runs(topo, fab, inv, args, flows)
    else:
        _stage(1, f"bringing up {topo.name} ({topo.file}) with its optical switch emulators")
        fab = fabric.up(topo, progress=_detail, seed=args.seed)
        try:
            results, restored = _runs(topo, fab, load_inventory(fab.state.inventory), args, flows)
        finally:
            _stage(6, f"tearing down {topo.name}")
            with signals.shielded():  # no half teardown
                fabric.down(topo.name)
    wall_s = time.monotonic() - started
    _stage(7, f"results: {optical_names(topo)} reconfigured {LONG} -> {SHORT} under traffic")
    _say(report.table(results.runs))
    for line in report.explain(results, _hops(topo.paths[TEMPORARY])):
        _say(line)
    _say(f"Loss % depends on the run length ({PROBE_S} s of probe here): compare the gaps.")
    _say(f"Between the runs: {restored}.")
    if args.json is not None:
        doc = report.document(results, between_runs=restored, wall_s=wall_s)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    _say(f"demo done in {wall_s:.1f} s")
    return 0


def _running(topo: Topology) -> Fabric:
    """The fabric of ``topo`` that is already up (``--inventory``: the demo leaves it up)."""
    st = fabric_state.load(topo.name)
    if st is None or st.phase != "up":
        raise FabricError(
            f"--inventory: the demo runs on a fabric that is up: `reroute fabric up {topo.file}`"
        )
    return Fabric(state=st)


def _hops(path: TopoPath) -> str:
    return "-".join(h.node for h in path.hops)


def _run(args: argparse.Namespace) -> int:
    # SIGTERM unwinds like Ctrl-C, and Ctrl-C interrupts at once (also inside asyncio.run,
    # whose own handler only cancels the running task): either way the fabric comes down
    with signals.unwinding():
        return _demo(args)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


DESCRIPTION = """\
Break-before-make vs make-before-break across an optical reconfiguration, measured.

Brings up the fabric of --topology (default: seed 003's ngncs-ost testbed) with its Polatis
SCPI emulator, sends vm2 -> vm3 traffic on the long path (the sequence-numbered UDP probe at
--rate and an iperf3 TCP stream capped at --tcp-mbps, 100 ms reports), and reconfigures
ost1 under it to move the flows onto the short path: first BBM (traffic dark until the new
circuit locks), then MBB (traffic parked on the electrical temporary path while the new
circuit locks). In between: one unmeasured MBB reroute back to the long path, and a control
run of the same traffic with nothing reconfigured (the emulated fabric's own loss). Tears
the fabric down (also on errors and Ctrl-C) and prints the runs next to seed 003's numbers:
packets lost, longest gap, TCP retransmissions and throughput dip, reconfiguration times,
the emulator's drawn lock time. Needs root; takes about 20 s."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the ``reroute`` parser."""
    demo = sub.add_parser(
        "demo",
        help="BBM vs MBB across an optical reconfiguration, measured (needs root)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    default = ROOT / "topologies" / "ngncs-ost.yaml"
    demo.add_argument(
        "--topology", type=Path, default=default, metavar="FILE", help="default: ngncs-ost"
    )
    demo.add_argument(
        "--rate", type=_positive, default=5000, metavar="PPS", help="UDP probe rate, default 5000"
    )
    demo.add_argument(
        "--tcp-mbps", type=_positive, default=100, metavar="N", help="TCP cap, default 100 Mbit/s"
    )
    demo.add_argument("--json", type=Path, metavar="FILE", help="also write the numbers as JSON")
    demo.add_argument(
        "--seed", type=int, default=0, help="seed of the emulator's lock times (Table 4.3 draws)"
    )
    demo.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="reach the devices through FILE instead of the fabric's own inventory; the "
        "fabric must be up already (`reroute fabric up`) and is left up",
    )
    demo.set_defaults(func=_run)
