"""Eight optical MBB reroutes on disjoint circuits at once, against one alone, through the
service: concurrency of disjoint reroutes (issue 24, part 1).

Run as root: ``.venv/bin/python bench/concurrent_reroutes.py [--rounds 3] [--rate 1000]
[--store sqlite|etcd] [--replicas N] [--logs DIR]``. It builds its own fabric
(``bench-conc``: ``reroute topo generate leaf-spine --racks 16 --spines 1 --ocs 4``) and
starts ``reroute serve`` on it (a real process, SQLite journal; its config and log kept in
``--logs``, else deleted); with ``--store etcd``, ``--replicas`` of them (1 by
default) on a 3-member etcd on loopback (``fabric/etcdcluster.py``), each request sent to
the next replica in turn (device ownership decides which one runs it).
Every rack pair's flow first moves from its spine path onto OCS 1 (``r<a>-<b>-o1``). Then,
per round:

- *alone*: rack pair 1-2 moves by optical MBB onto OCS 2 via OCS 3 (OCS 2 reconfigured);
- *eight at once*: the pairs 1-2, 5-6, 9-10, 13-14 onto OCS 2 and 3-4, 7-8, 11-12, 15-16
  onto OCS 4, all via OCS 3, submitted together: their leaves and OCS ports are disjoint.

Before each, every pair goes back onto OCS 1 and OCS 2 and 4 get their initial
cross-connects back (the service reconfigures them again). A UDP probe (``--rate`` per
pair) runs from each moved pair's first host to its second during the moves: each reroute
must lose nothing beyond the fabric's own drops (OVS's receive sockets, counted beside the
losses: the userspace datapath drops when its thread falls behind). Per round: the time
from the first request to the last reroute done, for one and for eight; the last line is
the ratio of their medians (goal <= 1.5x; eight one after the other would take ~8x).
Numbers, not pass/fail. A pair that lost datagrams is shown with its longest gap beside
its reroute's steps (from the service's step times): which steps ran during the gap, and
where the gap began against the reroute's start and its lock gate's end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drivers.base import CrossConnectSwitch
from experiments.measuring import fabric_drops
from fabric import fabric, signals
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from fabric.inventory import fabric_drivers
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.topology import Topology, load_topology
from services.reroute.service.client import RerouteClient, RerouteView
from services.reroute.store.records import RerouteState

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "services.reroute.cli"]
NAME = "bench-conc"
RACKS = 16
TOKEN = "bench-operator-token-0123456789"
PROBE_PORT = 9000


def pairs() -> list[tuple[int, int]]:
    """The rack pairs (1, 2), (3, 4), ..."""
    return [(a, a + 1) for a in range(1, RACKS + 1, 2)]


def target(a: int) -> str:
    """The OCS the pair starting at rack ``a`` moves onto: its circuits there collide only
    with its neighbours' (1-2, 5-6, ... on OCS 2; 3-4, 7-8, ... on OCS 4)."""
    return "o2" if a % 4 == 1 else "o4"


def flow(topo: Topology, a: int, b: int) -> str:
    path = topo.paths[f"r{a}-{b}-s1"]
    return f"{path.src_ip}>{path.dst_ip}"


class Service:
    """``reroute serve`` on the bench fabric, as a process (``store``: its YAML, SQLite by
    default, in ``journal``; ``name``: its config's and log's, in ``into``)."""

    def __init__(
        self,
        topo_file: Path,
        fab: Fabric,
        into: Path,
        store: str = "",
        name: str = "serve",
        journal: Path | None = None,
    ) -> None:
        config = into / f"{name}.yaml"
        config.write_text(
            f"topology: {topo_file}\ninventory: {fab.state.inventory}\n"
            f"journal: {journal or into / 'journal.sqlite'}\n"
            f"tokens: [{{token: {TOKEN}, role: operator}}]\nstep_timeout_s: 5\n"
            + (f"store: {store}\n" if store else "")
        )
        self.log = (into / f"{name}.log").open("w")
        self.proc = subprocess.Popen(
            [*CLI, "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "http://" not in line:
            raise SystemExit(f"reroute serve did not start: see {into / (name + '.log')}")
        self.url = line.split()[2]

    def client(self) -> RerouteClient:
        return RerouteClient(self.url, TOKEN)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class Probes:
    """One UDP probe per rack pair (first host -> second), as processes in the hosts'
    namespaces."""

    def __init__(self, fab: Fabric, topo: Topology, racks: list[tuple[int, int]], rate: int):
        self.procs: list[tuple[subprocess.Popen[str], subprocess.Popen[str]]] = []
        for a, b in racks:
            path = topo.paths[f"r{a}-{b}-s1"]
            run_id = str(random.getrandbits(32))
            to = f"{path.dst_ip}:{PROBE_PORT}"
            recv = self._probe(fab, f"h{b}", "recv", "--bind", to, "--json", "--idle", "3",
                               "--run-id", run_id)  # fmt: skip
            assert recv.stderr is not None
            assert "listening" in recv.stderr.readline()
            send = self._probe(fab, f"h{a}", "send", "--to", to, "--rate", str(rate),
                               "--duration", "600", "--run-id", run_id)  # fmt: skip
            self.procs.append((recv, send))
        time.sleep(1.5)  # every sender's Python has started

    @staticmethod
    def _probe(fab: Fabric, host: str, *args: str) -> subprocess.Popen[str]:
        cmd = ["ip", "netns", "exec", fab.host_ns(host), *CLI, "probe", *args]
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )

    def reports(self) -> list[dict[str, Any] | None]:
        """Stop the senders; each probe's report (None: its receiver failed)."""
        out: list[dict[str, Any] | None] = []
        for _, send in self.procs:
            send.terminate()  # the receiver counts what is missing below the last one seen
            send.wait(timeout=10)
        for recv, _ in self.procs:
            try:
                text, _ = recv.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # it never heard its sender: no report (-1)
                recv.kill()
                recv.communicate()
                out.append(None)
                continue
            out.append(json.loads(text) if recv.returncode == 0 else None)
        return out


def lost(reports: Sequence[dict[str, Any] | None]) -> list[int]:
    return [int(r["lost"]) if r is not None else -1 for r in reports]


MONO_TO_UNIX = time.time() - time.monotonic()  # the probe stamps CLOCK_MONOTONIC (shared)


def explain(
    pair: tuple[int, int],
    report: dict[str, Any],
    view: RerouteView,
    others: Sequence[RerouteView] = (),
) -> list[str]:
    """A losing pair's longest gap beside its reroute's steps (Unix times from the service;
    the probe's monotonic ones moved onto them), and the circuits steps of ``others`` (the
    round's other reroutes) on the same optical switches from its start to the gap's end."""
    gap = report.get("longest_gap")
    if not gap or view.started is None:
        return [f"  pair {pair[0]}-{pair[1]}: lost {report['lost']}, no gap or start to place"]
    g0 = gap["start_ns"] / 1e9 + MONO_TO_UNIX
    g1 = g0 + gap["ms"] / 1000

    t0 = view.started

    def at(t: float) -> str:
        return f"{(t - t0) * 1000:+.0f}"

    inside = gap["first_seq_after"] - gap["last_seq_before"] - 1  # seqs missing in it
    lines = [
        f"  pair {pair[0]}-{pair[1]} ({view.id}): lost {report['lost']} of {report['sent']},"
        f" {inside} of them in the longest gap, {gap['ms']:.0f} ms from {at(g0)} ms (times"
        " from the reroute's start)"
    ]
    for s in view.steps:
        if s.started is None:
            continue
        end = s.finished or s.started
        mark = " <- during the gap" if s.started < g1 and end > g0 else ""
        lines.append(
            f"    {at(s.started):>6} .. {at(end):>6} ms  {s.phase or '':<12} {s.description}{mark}"
        )
    optical = {_circuits_device(s.description) for s in view.steps} - {None}
    for other in others:
        for s in other.steps:
            if s.started is None or _circuits_device(s.description) not in optical:
                continue
            end = s.finished or s.started
            if t0 <= end and s.started <= g1:
                mark = " <- during the gap" if s.started < g1 and end > g0 else ""
                lines.append(
                    f"    {at(s.started):>6} .. {at(end):>6} ms  (other {other.id}) "
                    f"{s.description}{mark}"
                )
    return lines


def _circuits_device(description: str) -> str | None:
    """The optical switch a circuits step's description names ("circuits ocs4: ...")."""
    head, _, _ = description.partition(":")
    return head.split()[1] if head.startswith("circuits ") and " " in head else None


def submit(
    svcs: Sequence[Service], moves: Sequence[tuple[str, str, str | None]]
) -> tuple[float, list[Any]]:
    """Submit ``moves`` (flow, to, via) at once, move i to replica i mod n; the span from
    the first request to the last reroute done (s) and the final views."""
    clients = [svc.client() for svc in svcs]

    def one(n: int) -> RerouteView:
        f, to, via = moves[n]
        client = clients[n % len(clients)]
        view = client.create([f], to, via=via)
        return client.get(view.id, wait_s=60)

    t0 = time.monotonic()
    with ThreadPoolExecutor(len(moves)) as pool:
        views = list(pool.map(one, range(len(moves))))
    span = time.monotonic() - t0
    bad = [v for v in views if v.state is not RerouteState.DONE]
    if bad:
        raise SystemExit(f"a reroute did not finish: {bad[0].id} {bad[0].state} {bad[0].error}")
    return span, views


def reset(svcs: Sequence[Service], topo: Topology, fab: Fabric) -> None:
    """Every pair on OCS 1, OCS 2 and 4 with their initial cross-connects."""
    flows = svcs[0].client().flows()
    home = [
        (flow(topo, a, b), f"r{a}-{b}-o1", None)
        for a, b in pairs()
        if not flows.get(f"r{a}-{b}-o1")
    ]
    if home:
        submit(svcs, home)
    asyncio.run(_initial_circuits(topo, fab))


async def _initial_circuits(topo: Topology, fab: Fabric) -> None:
    scope = frozenset({"ocs2", "ocs4"})
    async with fabric_drivers(topo, fab.state, scope) as drivers:
        for name, driver in drivers.items():
            assert isinstance(driver, CrossConnectSwitch)
            want = {c.ingress: c.egress for c in topo.nodes[name].cross_connects}  # type: ignore[union-attr]
            now = await driver.connections()
            wrong = [i for i in now if now[i] != want.get(i)]
            if wrong:
                await driver.disconnect(wrong)
            if missing := [(i, e) for i, e in want.items() if now.get(i) != e]:
                await driver.connect(missing)


def _explained(
    racks: Sequence[tuple[int, int]],
    reports: Sequence[dict[str, Any] | None],
    views: Sequence[RerouteView],
) -> list[str]:
    return [
        line
        for pair, report, view in zip(racks, reports, views, strict=True)
        if report is not None and report["lost"] > 0
        for line in explain(pair, report, view, [v for v in views if v is not view])
    ]


def main() -> int:
    signal.signal(signal.SIGTERM, signals.interrupt)  # unwinds: services and fabric stopped
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=200, help="probe datagrams/s per pair")
    parser.add_argument("--store", choices=("sqlite", "etcd"), default="sqlite")
    parser.add_argument("--replicas", type=int, default=1, help="with --store etcd")
    parser.add_argument(
        "--logs", type=Path, help="keep the services' configs and logs in this directory"
    )
    args = parser.parse_args()
    if args.replicas != 1 and args.store != "etcd":
        parser.error("--replicas needs --store etcd")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        store = ""
        if args.store == "etcd":
            etcd = stack.enter_context(EtcdCluster(Path(tmp) / "etcd"))
            store = f"{{kind: etcd, endpoints: [{', '.join(etcd.endpoints)}], prefix: /conc}}"
        topo_file = Path(tmp) / f"{NAME}.yaml"
        topo_file.write_text(to_yaml(leaf_spine(racks=RACKS, spines=1, ocs=4, name=NAME)))
        topo = load_topology(topo_file)
        fabric.down(NAME)
        print(f"building {NAME} ({RACKS} racks, 1 spine, 4 OCS) ...", flush=True)
        fab = fabric.up(topo)
        svcs: list[Service] = []
        try:
            into = args.logs or Path(tmp)
            into.mkdir(parents=True, exist_ok=True)
            for i in range(args.replicas):
                journal = Path(tmp) / "journal.sqlite"  # not kept: a new run starts afresh
                svcs.append(Service(topo_file, fab, into, store, f"serve{i}", journal))
            return _rounds(svcs, topo, fab, args.rounds, args.rate)
        finally:
            for svc in svcs:
                svc.stop()
            fabric.down(NAME)


def _rounds(svcs: list[Service], topo: Topology, fab: Fabric, rounds: int, rate: int) -> int:
    alone: list[float] = []
    eight: list[float] = []
    print(
        f"{'round':>5} {'one alone ms':>13} {'eight at once ms':>17}  lost per pair"
        " (the fabric's own drops meanwhile: OVS's receive sockets)"
    )
    for n in range(1, rounds + 1):
        reset(svcs, topo, fab)
        drops = fabric_drops(fab)
        probes = Probes(fab, topo, [(1, 2)], rate)
        span, views = submit(svcs, [(flow(topo, 1, 2), "r1-2-o2", "r1-2-o3")])
        reports = probes.reports()
        lost_alone, drops_alone = lost(reports), fabric_drops(fab) - drops
        why = _explained([(1, 2)], reports, views)
        alone.append(span * 1000)
        reset(svcs, topo, fab)
        drops = fabric_drops(fab)
        probes = Probes(fab, topo, pairs(), rate)
        moves = [(flow(topo, a, b), f"r{a}-{b}-{target(a)}", f"r{a}-{b}-o3") for a, b in pairs()]
        span, views = submit(svcs, moves)
        reports = probes.reports()
        lost_eight, drops_eight = lost(reports), fabric_drops(fab) - drops
        why += _explained(pairs(), reports, views)
        eight.append(span * 1000)
        print(
            f"{n:>5} {alone[-1]:>13.0f} {eight[-1]:>17.0f}  alone {lost_alone} "
            f"(drops {drops_alone}), eight {lost_eight} (drops {drops_eight})"
        )
        if why:
            print("\n".join(why), flush=True)
    ratio = statistics.median(eight) / statistics.median(alone)
    print(
        f"median: one alone {statistics.median(alone):.0f} ms, eight at once "
        f"{statistics.median(eight):.0f} ms (one after the other would be ~8x)"
    )
    print(f"{ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
