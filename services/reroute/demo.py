"""``reroute demo``: the main job, shown end to end on the default topology.

For now: bring the fabric up, show it, send traffic over every initial path (ping and a
TCP stream), tear it down. Later issues grow this into the BBM vs MBB demonstration.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from fabric import fabric
from fabric.fabric import Fabric
from fabric.status import render
from fabric.traffic.iperf import run_iperf
from services.reroute.errors import FabricError
from services.reroute.topology import Path as TopoPath
from services.reroute.topology import load_topology


def _say(message: str) -> None:
    print(message, flush=True)


def _ping(fab: Fabric, path: TopoPath) -> str:
    proc = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            fab.host_ns(path.src),
            "ping",
            "-c",
            "5",
            "-i",
            "0.05",
            "-W",
            "1",
            str(path.dst_ip),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    summary = [line for line in proc.stdout.splitlines() if "received" in line or "rtt" in line]
    if proc.returncode != 0:
        raise FabricError(f"ping over path {path.name} failed: {' / '.join(summary)}")
    return " / ".join(summary)


def _tcp(fab: Fabric, path: TopoPath, seconds: int) -> str:
    result = run_iperf(
        str(path.dst_ip),
        duration_s=seconds,
        server_netns=fab.host_ns(path.dst),
        client_netns=fab.host_ns(path.src),
    )
    return f"{result.received_bps / 1e6:.0f} Mbit/s, {result.retransmits} retransmissions"


def _run(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    _say(f"[1/4] bringing up {topo.name} ({topo.file})")
    fab = fabric.up(topo, progress=lambda m: _say(f"      .. {m}"))
    try:
        _say("[2/4] the fabric")
        _say(render(fab.state))
        _say("[3/4] traffic over the initial paths")
        for path in topo.paths.values():
            if path.initial:
                _say(f"      {path.name}: {path.describe()}")
                _say(f"        ping {path.src} -> {path.dst_ip}: {_ping(fab, path)}")
                _say(f"        tcp  {path.src} -> {path.dst_ip}: {_tcp(fab, path, args.seconds)}")
    finally:
        _say("[4/4] tearing down")
        fabric.down(topo.name)
    _say("demo done")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo", help="run the demonstration on a topology (needs root)")
    default = Path(__file__).resolve().parents[2] / "topologies" / "ngncs-ost.yaml"
    demo.add_argument("--topology", type=Path, default=default, metavar="FILE")
    demo.add_argument("--seconds", type=int, default=2, help="TCP stream length per path")
    demo.set_defaults(func=_run)
