"""``make bench-quick``: the numbers that must not grow, in under 3 minutes, one row.

Run as root from the repository root (under the fabric lock where runs share a machine)::

    flock /tmp/reroute-fabric.lock .venv/bin/python bench/quick.py

Runs, one after the other, each with its baseline in the same invocation:
- ``bench/optical_mbb.py --runs 3 --no-before``: the optical MBB overhead (median of 6
  moves), its floor, the ratio;
- ``bench/scale_apply.py --sizes 10000``: the 10,000-flow MBB apply against one raw
  ``ovs-ofctl --bundle add-flows`` per ingress bridge of the same rules;
- ``bench/two_site_backends.py --backends ovs,dpctl --runs 3``: the dpctl failover after
  its trigger (median of 3 runs x 2 sites), the ovs row beside it.
Each script's own output is passed through; the last line is the row for bench/README's
dated table. Numbers, not pass/fail.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> str:
    """Run a bench script with this interpreter; its stdout (also printed as it comes)."""
    t0 = time.monotonic()
    print(f"$ bench/{' '.join(args)}", flush=True)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / args[0]), *args[1:]],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    if proc.wait() != 0:
        raise SystemExit(f"bench/{args[0]} failed (exit {proc.returncode})")
    print(f"  ({time.monotonic() - t0:.0f} s)", flush=True)
    return "".join(lines)


def optical() -> tuple[float, float, float]:
    out = run("optical_mbb.py", "--runs", "3", "--no-before")
    found = re.search(r"^overhead ([\d.]+) ms, floor ([\d.]+) ms, ([\d.]+)x$", out, re.M)
    assert found, "no overhead/floor line"
    overhead, low, ratio = found.groups()
    return float(overhead), float(low), float(ratio)


def scale() -> tuple[float, float]:
    out = run("scale_apply.py", "--sizes", "10000")
    found = re.search(r"^\s+10000((?:\s+[\d.]+)+)$", out, re.M)
    assert found, "no 10000-flow row"
    values = [float(v) for v in found.group(1).split()]
    return values[2], values[5]  # apply, ofctl (scale_apply.MEASURES)


def failover() -> tuple[float, float]:
    out = run("two_site_backends.py", "--backends", "ovs,dpctl", "--runs", "3")
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0] in ("ovs", "dpctl"):
            rows[cells[0]] = float(cells[3])  # trigger -> standby ms
    return rows["dpctl"], rows["ovs"]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    t0 = time.monotonic()
    overhead, low, ratio = optical()
    apply_ms, ofctl_ms = scale()
    dpctl, ovs = failover()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"\nbench-quick: {time.monotonic() - t0:.0f} s; the row for bench/README:")
    print(
        "| date | commit | load | optical MBB overhead ms | floor ms | ratio "
        "| 10k apply ms | ovs-ofctl ms | apply/ofctl | dpctl trigger->standby ms | ovs ms |"
    )
    print(
        f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {commit} | {load} "
        f"| {overhead:.1f} | {low:.1f} | {ratio:.2f}x | {apply_ms:.0f} | {ofctl_ms:.0f} "
        f"| {apply_ms / ofctl_ms:.2f}x | {dpctl:.1f} | {ovs:.1f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
