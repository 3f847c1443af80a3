"""Replicas on etcd: takeover after ``kill -9``, and the etcd store's cost per reroute.

Run as root: ``.venv/bin/python bench/replicas.py [--runs 5] [--moves 20]``.
It builds its own fabric (``bench-repl``: seed 003's testbed, ``ngncs-ost``) and a 3-member
etcd on loopback (``fabric/etcdcluster.py``), then measures:

- **takeover**: three ``reroute serve`` replicas on the etcd store (lease TTL 2 s); an
  optical MBB long <-> short via temporary whose new circuit takes 1.5 s to lock
  (``:EMUL:LOCK 1500``); the replica executing it is killed with SIGKILL during the lock
  wait; the time from the kill until a surviving replica shows the reroute ended (rolled
  back to the checkpoint: the flows on ``temporary``). Goal: under TTL + 1 s. Printed per
  run, then ``takeover ... N ms`` (the median).
- **latency**: electronic MBB long <-> temporary through the API (``?wait``), request to
  answer, with the SQLite store and with the etcd store (one service each, both running,
  asked in turn, so both see the same machine): the median of each and their difference
  (goal: at most +5 ms per reroute).

Numbers, not pass/fail. Everything started is stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric import fabric
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from services.reroute.journal import RerouteState
from services.reroute.service.client import RerouteClient
from services.reroute.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "services.reroute.cli"]
NAME = "bench-repl"
TOKEN = "bench-operator-token-0123456789"
FLOW = "10.0.0.2>10.0.0.3"
TTL_S = 2


class Serve:
    """One ``reroute serve`` process."""

    def __init__(self, config: Path, log: Path) -> None:
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [*CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=out, text=True,
            )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "http://" not in line:
            raise SystemExit(f"reroute serve did not start: {log.read_text()[-2000:]}")
        self.client = RerouteClient(line.split()[2], TOKEN)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def config(tmp: Path, fab: Fabric, name: str, store: str) -> Path:
    inventory = tmp / "inventory.yaml"
    if not inventory.exists():
        text = fab.state.inventory.read_text()
        inventory.write_text(text.replace(f"topology: {NAME}", "topology: ngncs-ost"))
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"topology: {ROOT / 'topologies' / 'ngncs-ost.yaml'}\ninventory: {inventory}\n"
        f"journal: {tmp / (name + '.sqlite')}\ntokens: [{{token: {TOKEN}, role: operator}}]\n"
        f"store: {store}\n"
    )
    return path


def scpi(fab: Fabric, line: str) -> None:
    with socket.create_connection(("127.0.0.1", fab.state.scpi["ost1"]), timeout=2) as s:
        s.sendall(line.encode() + b"\n")


def takeover(fab: Fabric, tmp: Path, etcd: EtcdCluster, runs: int) -> list[float]:
    ends = ", ".join(etcd.endpoints)
    store = f"{{kind: etcd, endpoints: [{ends}], prefix: /bench/takeover, lease_ttl_s: {TTL_S}}}"
    replicas = [Serve(config(tmp, fab, f"r{i}", store), tmp / f"r{i}.log") for i in range(3)]
    times = []
    try:
        scpi(fab, ":EMUL:LOCK 1500")
        to = "short"
        for _ in range(runs):
            alive = [r for r in replicas if r.proc.poll() is None]
            view = alive[0].client.create([FLOW], to, via="temporary")
            runner = _runner(alive, view.id)
            time.sleep(0.6)  # in the lock wait (switching + 1.5 s lock)
            killed = time.monotonic()
            runner.kill()
            survivor = next(r for r in alive if r is not runner)
            while not survivor.client.get(view.id).final:
                time.sleep(0.01)
            times.append((time.monotonic() - killed) * 1000)
            end = survivor.client.get(view.id)
            print(f"  takeover {times[-1]:.0f} ms: {end.state} ({end.error})", flush=True)
            replicas = [r for r in replicas if r is not runner]
            replicas.append(Serve(config(tmp, fab, f"r{len(times) + 2}", store),
                                  tmp / f"r{len(times) + 2}.log"))  # fmt: skip
            survivor.client.create([FLOW], "short", wait_s=30)  # ost1 stays set for short
            back = survivor.client.create([FLOW], "long", via="temporary", wait_s=30)
            if back.state is not RerouteState.DONE and back.error:
                print(f"  (back to long: {back.state} {back.error})")
    finally:
        scpi(fab, ":EMUL:LOCK DEFault")
        for r in replicas:
            r.stop()
    return times


def _runner(replicas: list[Serve], reroute_id: str) -> Serve:
    """The replica that runs the reroute (its /healthz names it)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for r in replicas:
            if r.client.health().running == reroute_id:
                return r
        time.sleep(0.01)
    raise SystemExit(f"no replica runs {reroute_id}")


def latency(fab: Fabric, tmp: Path, etcd: EtcdCluster, moves: int) -> dict[str, list[float]]:
    stores = {
        "sqlite": "{kind: sqlite}",
        "etcd": f"{{kind: etcd, endpoints: [{', '.join(etcd.endpoints)}], prefix: /bench/lat}}",
    }
    out: dict[str, list[float]] = {k: [] for k in stores}
    services = {
        k: Serve(config(tmp, fab, f"lat-{k}", v), tmp / f"lat-{k}.log") for k, v in stores.items()
    }
    try:
        for n in range(moves):  # alternating: both see the same machine
            for name, svc in services.items():
                for to in ("temporary", "long"):
                    t0 = time.perf_counter()
                    view = svc.client.create([FLOW], to, wait_s=10)
                    ms = (time.perf_counter() - t0) * 1000
                    if view.state is not RerouteState.DONE:
                        raise SystemExit(f"{name}: {view.state} {view.error}")
                    if n:  # the first round warms up
                        out[name].append(ms)
    finally:
        for svc in services.values():
            svc.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="takeovers")
    parser.add_argument("--moves", type=int, default=6, help="rounds of latency moves")
    args = parser.parse_args()
    topo = dataclasses.replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name=NAME)
    fabric.down(NAME)
    fab = fabric.up(topo)
    try:
        with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd") as etcd:
            lat = latency(fab, Path(tmp), etcd, args.moves)
            for name, ms in lat.items():
                print(f"electronic MBB, {name} store: median {statistics.median(ms):.1f} ms "
                      f"(n={len(ms)}, min {min(ms):.1f}, max {max(ms):.1f})")  # fmt: skip
            extra = statistics.median(lat["etcd"]) - statistics.median(lat["sqlite"])
            print(f"etcd store adds {extra:+.1f} ms per electronic reroute (goal <= +5 ms)")
            times = takeover(fab, Path(tmp), etcd, args.runs)
            print(f"takeover after kill -9 (TTL {TTL_S} s): {statistics.median(times):.0f} ms")
    finally:
        fabric.down(NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
