"""Two-site failover, the same workload through each backend, side by side in one run.

Run as root: ``.venv/bin/python bench/two_site_backends.py [--runs 3] [--degradation rtt]``.
For each backend (ovs: OpenFlow 1.3 to the bridges; dpctl: ovs-ofctl OpenFlow 1.0 to
switches playing HP switches; odl: RESTCONF to the OpenDaylight northbound emulator, 3 s
statistics poll; ryu: ofctl_rest to the Ryu emulator, read back from /stats/flow;
p4runtime: P4Runtime to a switch EMULATOR per bridge running p4/reroute.p4) it runs the
two-site scenario (experiments/twosite.py): one service
and one rtt monitor per site, the degradation injected, both sites failing over to standby.
Reported per backend (medians over runs and both sites): detection (first bad sample to
trigger), trigger to the site's traffic on standby (the service's answer), and crossing to
standby. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import backends as bk
from experiments.twosite import run_failover
from services.reroute.model.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
# each way of driving the switches once (experiments/backends.py's table; not its variants
# with extra flows or local monitors)
BACKENDS = tuple(
    b for b in bk.two_site_backends() if not bk.get(b).extra_flows and not bk.get(b).local
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--degradation", default="rtt", choices=["path", "rtt", "oneway"])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    args = parser.parse_args()
    print(f"{'backend':>8} {'runs':>5} {'detect ms':>10} {'trigger->standby ms':>20} "
          f"{'crossing->standby ms':>21} {'all done':>9}")  # fmt: skip
    for backend in args.backends.split(","):
        topo = load_topology(ROOT / "topologies" / str(bk.get(backend).two_site))
        results = [run_failover(topo, args.degradation) for _ in range(args.runs)]
        sites = [s for r in results for s in r.sites]
        ok = all(s.state == "done" for s in sites) and all(r.restored for r in results)
        print(
            f"{backend:>8} {args.runs:>5} "
            f"{statistics.median(s.detection_ms for s in sites):>10.1f} "
            f"{statistics.median(s.after_detection_ms for s in sites):>20.1f} "
            f"{statistics.median(s.crossing_to_standby_ms for s in sites):>21.1f} "
            f"{'yes' if ok else 'NO':>9}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
