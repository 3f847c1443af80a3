"""What a master claim costs: the round trip a replica's run saves on each fenced device
whose earlier claim still stands (``services/reroute/store/etcd/locks.py``, "A claim kept").

Run as root: ``.venv/bin/python bench/claim_cost.py [--claims 400]``. It builds its own
fabric (``bench-claim``: seed 003's testbed, ``ngncs-ost``), opens br1's OpenFlow 1.3
driver as a replica does (``share``), then times, alternating, a ROLE_REQUEST master with a
growing generation (``claim_master``) and, as the baseline, a ROLE_REQUEST NOCHANGE (a
read of the switch's generation, one round trip that changes nothing). An electronic MBB
on that testbed claims four switches, one at a time, each before its first write.

Numbers, not pass/fail. The fabric is taken down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.ovs.driver import OvsDriver
from fabric import fabric
from fabric.fabric import Fabric
from services.reroute.model.inventory import load_inventory, open_drivers
from services.reroute.model.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[1]
NAME = "bench-claim"


async def measure(fab: Fabric, topo: Topology, claims: int) -> tuple[list[float], list[float]]:
    """ms of each claim and of each NOCHANGE read, alternating, on br1."""
    inv = load_inventory(fab.state.inventory)
    claimed: list[float] = []
    read: list[float] = []
    async with open_drivers(inv, topo, ["br1"], shared=True) as devices:
        driver = devices["br1"]
        if not isinstance(driver, OvsDriver):
            raise SystemExit(f"br1 is driven by {type(driver).__name__}, not OpenFlow 1.3")
        for generation in range(1, claims + 1):
            t0 = time.perf_counter()
            await driver.claim_master(generation)
            t1 = time.perf_counter()
            await driver.generation_seen()
            claimed.append((t1 - t0) * 1000)
            read.append((time.perf_counter() - t1) * 1000)
    return claimed, read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=400, help="claims (and reads) timed")
    args = parser.parse_args()
    if args.claims < 10:
        parser.error("--claims: at least 10")
    topo = dataclasses.replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name=NAME)
    fabric.down(NAME)
    fab = fabric.up(topo)
    try:
        claimed, read = asyncio.run(measure(fab, topo, args.claims))
    finally:
        fabric.down(NAME)
    p90 = statistics.quantiles(claimed, n=10)[-1]
    print(f"claim (ROLE_REQUEST master): median {statistics.median(claimed):.3f} ms, p90 "
          f"{p90:.3f} ms; baseline NOCHANGE read {statistics.median(read):.3f} ms "
          f"(n={args.claims} each); four per electronic MBB: "
          f"{4 * statistics.median(claimed):.1f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
