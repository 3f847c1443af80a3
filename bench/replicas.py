"""Replicas on etcd: takeover after ``kill -9``, the etcd store's cost per reroute, and
reroutes per second with 1 and 3 replicas.

Run as root: ``.venv/bin/python bench/replicas.py [--runs 5] [--moves 20] [--pairs 6]
[--rounds 8] [--parts latency,takeover,throughput]``.
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
  (goal: at most +5 ms per reroute). Beside them, in the same turns, etcd's **floor**: what
  a reroute's three durable writes (a 2 kB value in a transaction each, one after the
  other, as the journal writes) and one linearizable read take on that cluster through the
  project's client, with no service (SQLite's journal syncs no commit: WAL,
  ``synchronous=NORMAL``; its floor is ~0). And the durable writes each etcd move made, as
  etcd counts them (Raft proposals committed, from a member's ``/metrics``).
- **throughput** (on a second fabric, ``bench-tput``: ``reroute topo generate leaf-spine
  --racks 2P --spines 1 --ocs 3``, P = ``--pairs``): each rack pair's flow moves by
  electronic MBB between its paths over OCS 1 and OCS 3 (both circuits are there from the
  start: only the pair's two leaves are written, so the pairs' reroutes are disjoint),
  ``--rounds`` times there and back, one client per pair, all pairs at once; with one
  replica (every pair's requests to it) and then with three (pair i to replica i mod 3:
  the master of the pair's leaves runs it, device ownership), both on the etcd store:
  reroutes per second of each (done / span from the first request to the last answer) and
  their ratio (goal: at least 1.5x), and each replica's CPU time per reroute.
  ``--unowned`` also runs three replicas with ``ownership: false`` (every replica races for
  every reroute, as before Deliver 3). ``--cap CORES`` runs each replica in a cpu cgroup of
  its own limited to CORES (``CpuCap``): bound by its own CPU, as on a host of its own,
  not by the two cores it shares here with the other replicas, etcd and OVS.

Numbers, not pass/fail. Everything started is stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.parser import text_string_to_metric_families

from fabric import fabric, signals
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from fabric.kinds import optical_control
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.topology import Topology, load_topology
from services.reroute.service.client import RerouteClient
from services.reroute.store.etcd.client import Etcd, EtcdSettings, get_op, put
from services.reroute.store.records import RerouteState

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "services.reroute.cli"]
NAME = "bench-repl"
TPUT = "bench-tput"
TOKEN = "bench-operator-token-0123456789"
FLOW = "10.0.0.2>10.0.0.3"
TTL_S = 2


class CpuCap:
    """A cgroup of its own (``cpu`` controller, v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``)
    capping what one process may use at ``cores`` of CPU: a replica bound by its own CPU, as
    on a host of its own, not by the machine's two cores that it shares with OVS and etcd.
    ``close`` removes it (its process stopped first)."""

    PERIOD_US = 100_000

    def __init__(self, name: str, cores: float) -> None:
        quota = int(cores * self.PERIOD_US)
        v2 = Path("/sys/fs/cgroup")
        controllers = v2 / "cgroup.controllers"
        if controllers.exists() and "cpu" in controllers.read_text().split():
            self.dir = v2 / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
        elif (v1 := Path("/sys/fs/cgroup/cpu")).is_dir():
            self.dir = v1 / name
            self.dir.mkdir(exist_ok=True)
            (self.dir / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.dir / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            raise SystemExit("--cap needs the cgroup cpu controller (v2 cpu.max or v1 cpu)")

    def add(self, pid: int) -> None:
        (self.dir / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.dir.rmdir()


def cpu_s(pid: int) -> float:
    """The CPU time (user + system, s) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Serve:
    """One ``reroute serve`` process (with ``cap``: in a cgroup capping its CPU)."""

    def __init__(self, config: Path, log: Path, cap: float | None = None) -> None:
        self.cap = None if cap is None else CpuCap(f"reroute-bench-{config.stem}", cap)
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [*CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=out, text=True,
            )  # fmt: skip
        if self.cap is not None:
            self.cap.add(self.proc.pid)
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
        if self.cap is not None:
            self.cap.close()


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


def takeover(fab: Fabric, tmp: Path, etcd: EtcdCluster, runs: int) -> list[float]:
    ends = ", ".join(etcd.endpoints)
    store = f"{{kind: etcd, endpoints: [{ends}], prefix: /bench/takeover, lease_ttl_s: {TTL_S}}}"
    replicas = [Serve(config(tmp, fab, f"r{i}", store), tmp / f"r{i}.log") for i in range(3)]
    times = []
    try:
        optical_control(fab.state, "ost1").set_lock(1500)
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
        optical_control(fab.state, "ost1").set_lock(None)
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


def etcd_floor(client: Etcd, n: int) -> tuple[float, float]:
    """ms of three durable writes in a row (a 2 kB value each, in a transaction, as the
    journal's), and of one linearizable read, on ``client``'s cluster."""
    key, value = f"/bench/floor/{n}", os.urandom(1024).hex().encode()
    t0 = time.perf_counter()
    for _ in range(3):
        client.txn([], [put(key, value)])
    t1 = time.perf_counter()
    client.txn([], [get_op(key)])
    return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000


def proposals(etcd: EtcdCluster) -> int:
    """Raft proposals committed so far, as a member's ``/metrics`` counts them: durable
    writes (and leases granted or revoked)."""
    url = f"http://{etcd.endpoints[0]}/metrics"
    with urllib.request.urlopen(url, timeout=2) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("etcd_server_proposals_committed_total "):
                return int(float(line.split()[1]))
    raise SystemExit(f"{url}: no etcd_server_proposals_committed_total")


def claims(metrics: str) -> list[float]:
    """[made, kept]: a service's master claims (``reroute_device_claims_total{how}``)."""
    found = dict.fromkeys(("made", "kept"), 0.0)
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == "reroute_device_claims_total":
                found[s.labels["how"]] = s.value
    return [found["made"], found["kept"]]


def latency(fab: Fabric, tmp: Path, etcd: EtcdCluster, moves: int) -> dict[str, list[float]]:
    """ms of each electronic MBB through the API, by store; "floor writes" and "floor read":
    ``etcd_floor`` after each round; "etcd writes": the proposals each etcd move made."""
    stores = {
        "sqlite": "{kind: sqlite}",
        "etcd": f"{{kind: etcd, endpoints: [{', '.join(etcd.endpoints)}], prefix: /bench/lat}}",
    }
    out: dict[str, list[float]] = {
        k: [] for k in [*stores, "floor writes", "floor read", "etcd writes", "claims"]
    }
    services = {
        k: Serve(config(tmp, fab, f"lat-{k}", v), tmp / f"lat-{k}.log") for k, v in stores.items()
    }
    client = Etcd(EtcdSettings(endpoints=tuple(etcd.endpoints)))
    try:
        for n in range(moves):  # alternating: both see the same machine
            for name, svc in services.items():
                for to in ("temporary", "long"):
                    before = proposals(etcd) if name == "etcd" else 0
                    t0 = time.perf_counter()
                    view = svc.client.create([FLOW], to, wait_s=10)
                    ms = (time.perf_counter() - t0) * 1000
                    if view.state is not RerouteState.DONE:
                        raise SystemExit(f"{name}: {view.state} {view.error}")
                    if n:  # the first round warms up
                        out[name].append(ms)
                        if name == "etcd":
                            out["etcd writes"].append(proposals(etcd) - before)
            for _ in range(2):  # as many as each store's moves
                writes, read = etcd_floor(client, n)
                if n:
                    out["floor writes"].append(writes)
                    out["floor read"].append(read)
        out["claims"] = claims(services["etcd"].client.metrics())
    finally:
        client.close()
        for svc in services.values():
            svc.stop()
    return out


def tput_config(tmp: Path, topo_file: Path, fab: Fabric, name: str, store: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"topology: {topo_file}\ninventory: {fab.state.inventory}\n"
        f"journal: {tmp / (name + '.sqlite')}\ntokens: [{{token: {TOKEN}, role: operator}}]\n"
        f"store: {store}\n"
    )
    return path


def pair_flow(topo: Topology, a: int) -> str:
    path = topo.paths[f"r{a}-{a + 1}-o1"]
    return f"{path.src_ip}>{path.dst_ip}"


def moves(replicas: list[Serve], topo: Topology, pairs: int, rounds: int) -> tuple[int, float]:
    """Every pair's flow ``rounds`` times to OCS 3 and back, one client per pair, all pairs
    at once (pair i to replica i mod n): reroutes done and the span (s)."""

    def one_pair(i: int) -> int:
        a = 2 * i + 1
        client = replicas[i % len(replicas)].client
        done = 0
        for _ in range(rounds):
            for to in (f"r{a}-{a + 1}-o3", f"r{a}-{a + 1}-o1"):
                view = client.create([pair_flow(topo, a)], to, wait_s=60)
                if view.state is not RerouteState.DONE:
                    raise SystemExit(f"pair {a}: {view.state} {view.error}")
                done += 1
        return done

    t0 = time.perf_counter()
    with ThreadPoolExecutor(pairs) as pool:
        done = sum(pool.map(one_pair, range(pairs)))
    return done, time.perf_counter() - t0


def throughput(
    tmp: Path,
    etcd: EtcdCluster,
    pairs: int,
    rounds: int,
    unowned: bool = False,
    cap: float | None = None,
) -> dict[str, float]:
    """Reroutes per second with 1 and with 3 replicas ("1", "3"; "3 unowned" too with
    ``unowned``; each replica's CPU capped at ``cap`` cores: module docstring)."""
    topo_file = tmp / f"{TPUT}.yaml"
    topo_file.write_text(to_yaml(leaf_spine(racks=2 * pairs, spines=1, ocs=3, name=TPUT)))
    topo = load_topology(topo_file)
    fabric.down(TPUT)
    fab = fabric.up(topo)
    out: dict[str, float] = {}
    runs = [(1, True), (3, True)] + ([(3, False)] if unowned else [])
    try:
        ends = ", ".join(etcd.endpoints)
        for n, owned in runs:
            name = f"{n}" if owned else f"{n} unowned"
            store = (
                f"{{kind: etcd, endpoints: [{ends}], prefix: /bench/tput{n}{'' if owned else 'u'}"
                f", ownership: {'true' if owned else 'false'}}}"
            )
            tag = f"t{n}{'' if owned else 'u'}"
            replicas: list[Serve] = []
            try:
                for i in range(n):
                    conf = tput_config(tmp, topo_file, fab, f"{tag}-{i}", store)
                    replicas.append(Serve(conf, tmp / f"{tag}-{i}.log", cap))
                for i in range(pairs):  # the flows onto OCS 1 (from the spine, or already)
                    a = 2 * i + 1
                    replicas[0].client.create([pair_flow(topo, a)], f"r{a}-{a + 1}-o1", wait_s=60)
                moves(replicas, topo, pairs, 1)  # warm-up: not counted
                before = [cpu_s(r.proc.pid) for r in replicas]
                done, span = moves(replicas, topo, pairs, rounds)
                used = [cpu_s(r.proc.pid) - b for r, b in zip(replicas, before, strict=True)]
            finally:
                for r in replicas:
                    r.stop()
            out[name] = done / span
            shares = " + ".join(f"{u / done * 1000:.1f}" for u in used)
            print(f"  {name} replica(s): {done} reroutes in {span:.2f} s: {out[name]:.1f} "
                  f"reroutes/s; replica CPU per reroute {shares} ms", flush=True)  # fmt: skip
    finally:
        fabric.down(TPUT)
    return out


def main() -> int:
    signal.signal(signal.SIGTERM, signals.interrupt)  # unwinds: services and fabric stopped
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="takeovers")
    parser.add_argument("--moves", type=int, default=6, help="rounds of latency moves")
    parser.add_argument("--pairs", type=int, default=6, help="rack pairs (throughput)")
    parser.add_argument("--rounds", type=int, default=8, help="moves there and back per pair")
    parser.add_argument("--parts", default="latency,takeover,throughput", help="what to run")
    parser.add_argument("--unowned", action="store_true", help="also 3 replicas, no ownership")
    parser.add_argument(
        "--cap", type=float, metavar="CORES",
        help="throughput: cap each replica's CPU at CORES (a cgroup each), as on own hosts",
    )  # fmt: skip
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    if args.cap is not None and not 0.01 <= args.cap <= cores:
        parser.error(f"--cap: between 0.01 and {cores} cores")
    parts = set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as tmp, EtcdCluster(Path(tmp) / "etcd") as etcd:
        if parts & {"latency", "takeover"}:
            ngncs(Path(tmp), etcd, parts, args)
        if "throughput" in parts:
            rate = throughput(Path(tmp), etcd, args.pairs, args.rounds, args.unowned, args.cap)
            print(f"reroutes/s on disjoint devices: 1 replica {rate['1']:.1f}, 3 replicas "
                  f"{rate['3']:.1f}: {rate['3'] / rate['1']:.2f}x (goal >= 1.5x)")  # fmt: skip
            if "3 unowned" in rate:
                print(f"3 replicas without ownership: {rate['3 unowned']:.1f} reroutes/s")
    return 0


def ngncs(tmp: Path, etcd: EtcdCluster, parts: set[str], args: argparse.Namespace) -> None:
    """Latency and takeover, on seed 003's testbed."""
    topo = dataclasses.replace(load_topology(ROOT / "topologies" / "ngncs-ost.yaml"), name=NAME)
    fabric.down(NAME)
    fab = fabric.up(topo)
    try:
        if "latency" in parts:
            lat = latency(fab, tmp, etcd, args.moves)
            for name in ("sqlite", "etcd"):
                ms = lat[name]
                print(f"electronic MBB, {name} store: median {statistics.median(ms):.1f} ms "
                      f"(n={len(ms)}, min {min(ms):.1f}, max {max(ms):.1f})")  # fmt: skip
            extra = statistics.median(lat["etcd"]) - statistics.median(lat["sqlite"])
            print(f"etcd store adds {extra:+.1f} ms per electronic reroute (goal <= +5 ms)")
            floor = statistics.median(lat["floor writes"])
            made = statistics.mean(lat["etcd writes"])
            print(f"etcd floor, same run: 3 durable writes in a row {floor:.1f} ms, a read "
                  f"{statistics.median(lat['floor read']):.1f} ms; each etcd move made {made:.2f} "
                  f"durable writes (etcd's count): its cost beyond them "
                  f"{extra - made * floor / 3:+.1f} ms")  # fmt: skip
            claimed, kept = lat["claims"]
            print(f"the etcd service's master claims: {claimed:.0f} made, {kept:.0f} kept "
                  "(an earlier claim standing: not made again)")  # fmt: skip
        if "takeover" in parts:
            times = takeover(fab, tmp, etcd, args.runs)
            print(f"takeover after kill -9 (TTL {TTL_S} s): {statistics.median(times):.0f} ms")
    finally:
        fabric.down(NAME)


if __name__ == "__main__":
    sys.exit(main())
