"""P4Runtime Write throughput: our driver versus p4runtime-shell, against the EMULATOR.

Starts a private Open vSwitch (userspace datapath) in its own network namespace and the
P4Runtime switch EMULATOR (``python -m emulators.p4rt``) on it, then for N in 1000, 10000
IPv4 host entries of ``MyIngress.reroute``, on an empty table each run:

- ours: one ``P4RuntimeDriver.apply`` of N adds: the read of the table (the undo point),
  N entries encoded, one Write of N updates, the emulator's checks and one OVS bundle;
- p4runtime-shell (in ``.venv-p4shell``, ``scripts/p4shell_client.py``): N
  ``TableEntry.insert()``, one Write each, as the shell sends them (its connection
  setup not counted).

Prints medians as a table and removes everything it made. Needs root.

    .venv/bin/python bench/p4runtime_write.py [--repeat 3] [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule, Output, Prefix
from drivers.p4runtime import P4RuntimeDriver
from fabric import daemons, netns
from fabric.vswitch import OvsInstance

ROOT = Path(__file__).resolve().parents[1]
NS = "rr-bench-p4rt"
BRIDGE = "brp4"
SHELL = [
    str(ROOT / ".venv-p4shell" / "bin" / "python"),
    str(ROOT / "scripts" / "p4shell_client.py"),
]


def rules(count: int) -> list[FlowRule]:
    return [
        FlowRule(
            match=FlowMatch(eth_type=0x0800, ipv4_dst=Prefix(0x0A08_0000 + i, 32)),
            priority=100,
            actions=(Output(2),),
            cookie=0xBE,
        )
        for i in range(count)
    ]


async def empty(address: str) -> None:
    async with P4RuntimeDriver(
        "bench", address, device_id=1, election_id=10, timeout=60.0
    ) as driver:
        got = await driver.read()
        if got:
            await driver.apply([FlowChange(op=FlowOp.DELETE, rule=r) for r in got])


async def time_ours(address: str, n: int, repeat: int) -> float:
    changes = [FlowChange(op=FlowOp.ADD, rule=r) for r in rules(n)]
    samples = []
    for _ in range(repeat):
        await empty(address)
        async with P4RuntimeDriver(
            "bench", address, device_id=1, election_id=10, timeout=60.0
        ) as driver:
            start = time.perf_counter()
            await driver.apply(changes)
            samples.append(time.perf_counter() - start)
            got = len(await driver.read())
        if got != n:
            raise SystemExit(f"ours: {got} entries after writing {n}")
    return statistics.median(samples) * 1000


def time_shell(address: str, n: int, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        asyncio.run(empty(address))
        done = subprocess.run(
            [*SHELL, address, "20", "bench", str(n)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(f"p4runtime-shell: {done.stderr.strip()[-800:]}")
        samples.append(float(json.loads(done.stdout.strip().splitlines()[-1])["ms"]))
    return statistics.median(samples)


def start_switch(ovs: OvsInstance, rundir: Path) -> str:
    netns.delete(NS)  # a leftover of a crashed run
    netns.add(NS)
    ovs.start()
    ovs.vsctl(
        "--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev",
        "fail_mode=secure", "protocols=OpenFlow13",
    )  # fmt: skip
    args = ["--listen", "127.0.0.1:0", "--bridge-mgmt", ovs.mgmt(BRIDGE), "--log-level", "WARNING"]
    spawned = daemons.spawn(rundir / "emulator", "p4rt", "emulators.p4rt", args, timeout=15.0)
    return f"127.0.0.1:{spawned.ready}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespace, OVS daemons)", file=sys.stderr)
        return 2
    rundir = Path(tempfile.mkdtemp(prefix="rr-bench-p4rt-"))
    ovs = OvsInstance(rundir=rundir / "ovs", netns=NS)
    rows = []
    try:
        address = start_switch(ovs, rundir)
        for n in (int(s) for s in args.sizes.split(",")):
            ours = asyncio.run(time_ours(address, n, args.repeat))
            shell = time_shell(address, n, args.repeat)
            rows.append((n, ours, shell))
            print(f"  .. N={n} done", file=sys.stderr, flush=True)
    finally:
        daemons.stop_all(rundir / "emulator")
        ovs.stop()
        netns.delete(NS)
        shutil.rmtree(rundir, ignore_errors=True)
    print(f"P4Runtime Write of N entries to the EMULATOR (median of {args.repeat})")
    print(f"{'N':>6} | {'ours ms':>8} | {'ours entries/s':>14} | {'p4runtime-shell ms':>18}")
    for n, ours, shell in rows:
        print(f"{n:>6} | {ours:>8.1f} | {n / ours * 1000:>14,.0f} | {shell:>18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
