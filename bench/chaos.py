"""Chaos under replicas for longer, or with other seeds: the chaos test
(``tests/e2e/service/test_replicas_chaos.py``: 3 replicas, 3 etcd members, a client to
random replicas, a seeded schedule of faults, the checker over the devices' own write
history) run for ``--minutes`` with ``--seed``.

Run as root: ``.venv/bin/python bench/chaos.py --minutes 10 --seed 7 [--runs 3]
[--fabric ngncs|pairs|both]``.
Each run is one pytest process on the service fabric (built and torn down by the test's
fixtures, under ``/tmp/reroute-fabric.lock``); seed ``S + i`` for run ``i``. It prints
each run's summary (requests accepted and ended, the fault schedule) and, for a run the
checker failed, its violations and the history around the first one. The checker lives
with the test (the bench runs it, it does not import test code).

Exit status: the number of failed runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/e2e/service/test_replicas_chaos.py"
LOCK = "/tmp/reroute-fabric.lock"


FABRICS = {"ngncs": "finds_nothing", "pairs": "disjoint_pairs", "both": ""}  # -k


def run(minutes: float, seed: int, fabric: str = "both") -> bool:
    """One chaos run (on ``fabric``: the test's ngncs-ost, its disjoint pairs, or one after
    the other); True if the checker found nothing."""
    env = os.environ | {"CHAOS_SEED": str(seed), "CHAOS_SECONDS": str(minutes * 60)}
    env["PYTHONPATH"] = str(ROOT)
    cmd = ["flock", LOCK, sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", TEST]
    cmd += ["-k", FABRICS[fabric]] if FABRICS[fabric] else []
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    summary = [ln for ln in lines if ln.startswith(("seed ", "  ", "E  "))]
    print("\n".join(summary[:200]) or done.stdout[-3000:], flush=True)
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--fabric",
        choices=sorted(FABRICS),
        default="both",
        help="ngncs: one flow, every reroute overlapping; pairs: two disjoint flows; both",
    )
    args = parser.parse_args(argv)
    failed = 0
    for i in range(args.runs):
        ok = run(args.minutes, args.seed + i, args.fabric)
        print(f"run {i + 1}/{args.runs} seed {args.seed + i}: {'ok' if ok else 'VIOLATIONS'}")
        failed += not ok
    return failed


if __name__ == "__main__":
    sys.exit(main())
