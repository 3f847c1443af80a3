"""Batch latency through the real third-party peers, next to what the tests used before.

Starts a private Open vSwitch (userspace datapath) in network namespace ``rr-bench-peers``
with three bridges, a management veth, and two controllers on its root end:

- ``bphp`` plays an HP switch (OpenFlow 1.0 passive listener): the ``hp_dpctl`` driver
  through ``ovs-ofctl`` (the baseline) and through the OpenFlow 1.0 reference ``dpctl``;
- ``bpemu`` controlled by the Ryu ofctl_rest EMULATOR (the baseline) and ``bpryu`` by
  real Ryu 4.34: the ``ryu_rest`` driver through each.

For N in ``--sizes``, on an empty table each run: one ``apply`` of N adds, then one of the
N deletes, each as the engine sees it (the undo-point read, the writes, the read-back
verification). Prints the medians of ``--runs`` and removes everything it made. Needs
root, and the peers (``python -m fabric.peers``).

    .venv/bin/python bench/peers.py [--runs 5] [--sizes 1,10,100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule, Output, Prefix, Session
from drivers.hp_dpctl import HpDpctlDriver
from drivers.ryu_rest import RyuRestDriver
from fabric import daemons, mgmt, netns, peers
from fabric.kinds.hp_dpctl import play_hp
from fabric.kinds.ryu_rest import peer as ryupeer
from fabric.run import run
from fabric.vswitch import OvsInstance

NS = "rr-bench-peers"
HOST_IP, SWITCH_IP = "169.254.217.1", "169.254.217.2"
MGMT = ("rrbp-host", "rrbp-sw")
Make = Callable[[], Session]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    make: Make


def rules(count: int) -> list[FlowRule]:
    return [
        FlowRule(
            match=FlowMatch(in_port=1, eth_type=0x0800, ipv4_dst=Prefix(0x0A08_0000 + i, 32)),
            priority=100,
            actions=(Output(2),),
            cookie=0x5252_0000_0000_0201,
        )
        for i in range(count)
    ]


async def one_run(make: Make, count: int) -> tuple[float, float]:
    """(add ms, delete ms) of one batch of ``count`` each way, on an empty table."""
    batch = rules(count)
    async with make() as driver:
        assert hasattr(driver, "apply")
        start = time.perf_counter()
        await driver.apply([FlowChange(op=FlowOp.ADD, rule=r) for r in batch])
        added = time.perf_counter()
        await driver.apply([FlowChange(op=FlowOp.DELETE, rule=r) for r in batch])
        return (added - start) * 1e3, (time.perf_counter() - added) * 1e3


@contextmanager
def site(workdir: Path) -> Iterator[list[Case]]:
    """The OVS, its bridges and both controllers; the cases; everything removed after."""
    netns.delete(NS)
    ovs = OvsInstance(rundir=workdir / "ovs", netns=NS)
    real: ryupeer.RealRyu | None = None
    try:
        netns.add(NS)
        run(["ip", "link", "del", MGMT[0]], check=False)
        mgmt.link(NS, (MGMT[0], HOST_IP), (MGMT[1], SWITCH_IP))
        ovs.start()
        for bridge, dpid in (("bphp", 0xA1), ("bpemu", 2), ("bpryu", 1)):
            ovs.vsctl(
                "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
                "fail_mode=secure", f"other-config:datapath-id={dpid:016x}",
                "protocols=OpenFlow13",
            )  # fmt: skip
        hp = play_hp(ovs, "bphp", 6633, address=SWITCH_IP)
        emulator = daemons.spawn(
            workdir,
            "ryuemu",
            "emulators.ryu",
            ["--listen", "127.0.0.1:0", "--openflow", f"{HOST_IP}:0"],
        )
        emu_ports = json.loads(emulator.ready)
        real = ryupeer.start(workdir, "ryu", openflow_host=HOST_IP)
        ovs.vsctl("set-controller", "bpemu", f"tcp:{HOST_IP}:{emu_ports['openflow']}")
        ovs.vsctl("set-controller", "bpryu", f"tcp:{HOST_IP}:{real.openflow_port}")
        emu_url, ryu_url = f"http://127.0.0.1:{emu_ports['rest']}", real.base_url
        dpctl = str(peers.dpctl())
        _wait_for_switch(emu_url, 2)
        _wait_for_switch(ryu_url, 1)
        yield [
            Case(name="hp_dpctl, ovs-ofctl", make=lambda: HpDpctlDriver("b", hp)),
            Case(
                name="hp_dpctl, reference dpctl", make=lambda: HpDpctlDriver("b", hp, dpctl=dpctl)
            ),
            Case(name="ryu_rest, emulator", make=lambda: RyuRestDriver("b", emu_url, 2)),
            Case(name="ryu_rest, Ryu 4.34", make=lambda: RyuRestDriver("b", ryu_url, 1)),
        ]
    finally:
        if real is not None:
            real.stop()
        daemons.stop_all(workdir)
        ovs.stop()
        netns.delete(NS)
        run(["ip", "link", "del", MGMT[0]], check=False)


def _wait_for_switch(url: str, dpid: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while dpid not in httpx.get(f"{url}/stats/switches", timeout=5.0).json():
        if time.monotonic() > deadline:
            raise TimeoutError(f"datapath {dpid} never connected to {url}")
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="1,10,100")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp, site(Path(tmp)) as cases:
        for count in sizes:
            for case in cases:
                runs = [asyncio.run(one_run(case.make, count)) for _ in range(args.runs)]
                add = statistics.median(r[0] for r in runs)
                delete = statistics.median(r[1] for r in runs)
                rows.append((count, case.name, add, delete))
    print(f"| N | driver, peer | add batch ms | delete batch ms |  (median of {args.runs})")
    print("|--:|---|--:|--:|")
    for count, name, add, delete in rows:
        print(f"| {count} | {name} | {add:.1f} | {delete:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
