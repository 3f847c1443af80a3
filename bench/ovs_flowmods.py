"""Flow-mod throughput: ``OvsDriver.apply`` versus ``ovs-ofctl --bundle add-flows``.

Starts a private Open vSwitch (userspace datapath) in its own network namespace, then for
N in 1, 100, 1000, 10000 host rules times, on a fresh table each run:

- ours: one ``OvsDriver.apply`` of N adds (encoding included), i.e. one atomic bundle;
- baseline: one ``ovs-ofctl -O OpenFlow13 --bundle add-flows`` of the same N flows from a
  file (process start included: that is what shelling out costs).

Prints medians as a table and removes everything it made. Needs root.

    .venv/bin/python bench/ovs_flowmods.py [--repeat 5] [--sizes 1,100,1000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule, Output, Prefix
from drivers.ovs import OvsDriver, ofp13
from drivers.ovs.ofp13_flow import encode_flow_mod
from fabric import netns
from fabric.vswitch import OvsInstance

NS = "rr-bench-ovsflowmods"
BRIDGE = "br0"
COOKIE = 0xBE


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    n: int
    encode_ms: float
    ours_ms: float
    ofctl_ms: float


def rules(count: int) -> list[FlowRule]:
    return [
        FlowRule(
            match=FlowMatch(
                in_port=1, eth_type=0x0800, ipv4_dst=Prefix.parse(f"10.{i >> 8}.{i & 255}.1/32")
            ),
            priority=100,
            actions=(Output(2),),
            cookie=COOKIE,
        )
        for i in range(count)
    ]


def ofctl_line(rule: FlowRule) -> str:
    """The same flow in ovs-ofctl syntax (only the fields ``rules`` uses)."""
    m = rule.match
    out = ",".join(f"output:{a.port}" for a in rule.actions if isinstance(a, Output))
    return (
        f"cookie={rule.cookie:#x},priority={rule.priority},ip,in_port={m.in_port},"
        f"nw_dst={m.ipv4_dst.network.network_address if m.ipv4_dst else '0.0.0.0'},actions={out}"
    )


def ms(seconds: float) -> float:
    return seconds * 1000.0


async def time_ours(ovs: OvsInstance, target: str, batch: list[FlowRule], repeat: int) -> float:
    changes = [FlowChange(op=FlowOp.ADD, rule=r) for r in batch]
    samples = []
    async with OvsDriver(BRIDGE, target, timeout=30.0) as driver:
        for _ in range(repeat):
            ovs.ofctl("-O", "OpenFlow13", "del-flows", target)
            start = time.perf_counter()
            await driver.apply(changes)
            samples.append(time.perf_counter() - start)
        got = await driver.read(cookie=COOKIE)
    if len(got) != len(batch):
        raise SystemExit(f"ours: {len(got)} flows in the table after adding {len(batch)}")
    return ms(statistics.median(samples))


def time_ofctl(ovs: OvsInstance, target: str, batch: list[FlowRule], repeat: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".flows", delete=False) as f:
        f.write("\n".join(ofctl_line(r) for r in batch) + "\n")
    samples = []
    try:
        for _ in range(repeat):
            ovs.ofctl("-O", "OpenFlow13", "del-flows", target)
            start = time.perf_counter()
            ovs.ofctl("-O", "OpenFlow13", "--bundle", "add-flows", target, f.name)
            samples.append(time.perf_counter() - start)
    finally:
        os.unlink(f.name)
    out = ovs.ofctl("-O", "OpenFlow13", "dump-flows", target)
    dumped = [line for line in out.splitlines() if "cookie=" in line]
    if len(dumped) != len(batch):
        raise SystemExit(f"ovs-ofctl: {len(dumped)} flows in the table after adding {len(batch)}")
    return ms(statistics.median(samples))


def time_encoding(batch: list[FlowRule], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for xid, rule in enumerate(batch, start=1):
            ofp13.encode_bundle_add(1, 3, encode_flow_mod(rule, xid))
        samples.append(time.perf_counter() - start)
    return ms(statistics.median(samples))


def measure(ovs: OvsInstance, sizes: Sequence[int], repeat: int) -> list[Row]:
    target = ovs.mgmt(BRIDGE)
    result = []
    for n in sizes:
        batch = rules(n)
        result.append(
            Row(
                n=n,
                encode_ms=time_encoding(batch, repeat),
                ours_ms=asyncio.run(time_ours(ovs, target, batch, repeat)),
                ofctl_ms=time_ofctl(ovs, target, batch, repeat),
            )
        )
        print(f"  .. N={n} done", file=sys.stderr, flush=True)
    return result


def table(rows: list[Row], repeat: int) -> str:
    head = (
        f"{'N':>6} | {'ours ms':>9} | {'ours mods/s':>11} | {'ovs-ofctl ms':>12} | "
        f"{'ofctl mods/s':>12} | {'encode ms':>9}"
    )
    lines = [f"OvsDriver.apply vs ovs-ofctl --bundle add-flows (median of {repeat})", head]
    lines.append("-" * len(head))
    for r in rows:
        lines.append(
            f"{r.n:>6} | {r.ours_ms:>9.2f} | {r.n / r.ours_ms * 1000:>11,.0f} | "
            f"{r.ofctl_ms:>12.2f} | {r.n / r.ofctl_ms * 1000:>12,.0f} | {r.encode_ms:>9.2f}"
        )
    return "\n".join(lines)


def start_switch(ovs: OvsInstance) -> None:
    netns.delete(NS)  # a leftover of a crashed run
    netns.add(NS)
    ovs.start()
    ovs.vsctl(
        "--", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE, "datapath_type=netdev",
        "fail_mode=secure", "protocols=OpenFlow13",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="1,100,1000,10000")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespace, OVS daemons)", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    rundir = Path(tempfile.mkdtemp(prefix="rr-bench-ovs-"))
    ovs = OvsInstance(rundir=rundir, netns=NS)
    try:
        start_switch(ovs)
        rows = measure(ovs, sizes, args.repeat)
    finally:
        ovs.stop()
        netns.delete(NS)
        shutil.rmtree(rundir, ignore_errors=True)
    print(table(rows, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
