"""``reroute demo``: the main job, shown end to end on the default topology.

For now: bring the fabric up, show it, send traffic over every initial path (ping and a
TCP stream), tear it down. Later issues grow this into the BBM vs MBB demonstration.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from fabric import fabric
from fabric.fabric import Fabric
from fabric.status import render
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
    server = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            fab.host_ns(path.dst),
            "iperf3",
            "-s",
            "-1",
            "-B",
            str(path.dst_ip),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            proc = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    fab.host_ns(path.src),
                    "iperf3",
                    "-c",
                    str(path.dst_ip),
                    "-t",
                    str(seconds),
                    "-J",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            data = json.loads(proc.stdout or "{}")
            end = data.get("end", {})
            if proc.returncode == 0 and "sum_received" in end:
                rate = end["sum_received"]["bits_per_second"] / 1e6
                return f"{rate:.0f} Mbit/s, {end['sum_sent'].get('retransmits', 0)} retransmissions"
            time.sleep(0.1)
        raise FabricError(f"iperf3 over path {path.name} failed: {data.get('error', proc.stderr)}")
    finally:
        server.kill()
        server.wait()


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
