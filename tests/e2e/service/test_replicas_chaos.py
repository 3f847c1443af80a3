"""Chaos under replicas, checked as Jepsen checks (issue 30, Deliver 4).

Three ``reroute serve`` replicas on a 3-member etcd (lease TTL 2 s) share a fabric, its
bridges behind recording relays and its Polatis emulators logging their writes
(``recorded.py``). A client sends reroutes to random replicas:

- on ngncs-ost, of the one flow vm2 -> vm3 (electrical and optical moves, so they overlap
  on every device);
- on a leaf-spine fabric of four racks and three OCS (``pairs_fabric``), of two flows,
  h1 -> h2 and h3 -> h4, that share no leaf and no OCS port (two clients at once): a
  reroute of one pair runs beside the other pair's (each pair's leaves a group of its own,
  with its own master replica), overlapping ones (one pair's) one after the other;
  electrical moves between ocs1 and ocs3, which join both pairs, and optical MBB onto
  ocs2, which joins neither;

while a schedule drawn from ``CHAOS_SEED`` (default 31) injects one fault
at a time, each lasting TTL + 1.5 s, 0.5-1.5 s after the one before (a replica's fault
hits the one running a reroute, if one is):
``kill`` (kill -9, then a new process), ``pause`` (SIGSTOP, then SIGCONT), ``cut`` (its
etcd connections black-holed, then healed), ``etcd member`` (one member killed, then
restarted) and ``quorum`` (two members killed, then restarted). The kinds come in rounds,
each kind once a round in the seed's order: one round at least (``make test``: every kind
once, about 25 s), more while ``CHAOS_SECONDS`` (default 25) last.

Then every fault is healed, every request must end within 20 s, and the checker
(``tests/e2e/checker.py``) reads the devices' history and the replicas' answers:

- every accepted request ends in exactly one final state, the same on every replica;
- per device, no replica paused or cut off writes after another replica's first write
  there following the fault, until 1 s after the fault healed (later, a re-registered
  replica may write again for a new reroute: it cannot be told apart from the device's
  side, see the report);
- no two reroutes wrote to one device at overlapping times, and no write belongs to no
  reroute (every reroute's window is the answer's started..finished; on the pairs fabric
  a reroute owns only its pair's leaves, and ocs2 when it moves the pair there);
- every flow is on exactly one path at the end, read back;
- the probes (5 kpps vm2 -> vm3; 2 kpps per pair), through the faults, lost no more than
  OVS dropped itself: every reroute, ended or deposed and taken over, left its flow a path
  at every moment.

``bench/chaos.py --minutes N --seed S`` runs this test for longer or with other seeds.
A failure prints the seed, the fault schedule and the history around the first violation.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from math import inf
from pathlib import Path

import pytest

from experiments.measuring import fabric_drops
from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from services.reroute.errors import ApiError
from services.reroute.model.generate import leaf_spine, to_yaml
from services.reroute.model.topology import Host, Topology, load_topology
from services.reroute.service.client import RerouteClient, RerouteView
from services.reroute.store.records import RerouteState
from tests.e2e.checker import (
    History,
    Span,
    after_successor,
    excerpt,
    final_states,
    one_path,
    overlapping,
    probe_loss,
)
from tests.e2e.conftest import RATE, Probe, wait_arriving
from tests.e2e.recording import RecordingRelay
from tests.e2e.service.conftest import built
from tests.e2e.service.partition import Partition, partitionable
from tests.e2e.service.recorded import (
    FLOW,
    TTL_S,
    close,
    config,
    history,
    inventory,
    restore_alone,
    where,
)
from tests.unit.services.service.conftest import NGNCS, OPERATOR, ServeProcess

DONE = RerouteState.DONE
pytestmark = [
    pytest.mark.fabric,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is missing (make setup)"),
]
SEED = int(os.environ.get("CHAOS_SEED", "31"))
SECONDS = float(os.environ.get("CHAOS_SECONDS", "25"))
FAULT_S = TTL_S + 1.5
GAP_S = (0.5, 1.5)  # before each fault, drawn
DRAIN_S = 20.0  # after the faults: every reroute ends by then
GRACE_S = 1.0  # after a fault heals: the deposed replica's stale writes land by then
MOVES: list[tuple[str, str | None]] = [
    ("temporary", None), ("long", None), ("short", "temporary"), ("long", "temporary")
]  # fmt: skip
FAULTS = ("kill", "pause", "cut", "etcd member", "quorum")
# a round of faults at most (a kill's new process, etcd's quorum back: about a second more)
ROUND_S = len(FAULTS) * (GAP_S[1] + FAULT_S + 1.0)


@dataclass
class Replica:
    """One replica's process, its incarnation (a new one after ``kill``) and its link to
    etcd (to be cut)."""

    name: str
    config: Path
    part: Partition
    pids: dict[int, str]
    serve: ServeProcess | None = None
    incarnation: int = 0
    paused: bool = False

    def start(self) -> None:
        self.incarnation += 1
        self.serve = ServeProcess(self.config)
        self.pids[self.serve.proc.pid] = self.writer

    @property
    def writer(self) -> str:
        return f"{self.name}.{self.incarnation}"

    @property
    def pid(self) -> int:
        assert self.serve is not None
        return self.serve.proc.pid

    def stop(self) -> None:
        if self.serve is not None and self.serve.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.serve.kill()


@dataclass(frozen=True, slots=True)
class Deposal:
    writer: str
    start: float
    end: float  # when the fault healed
    log: Path  # the replica's log (when it took a new lease)


Move = tuple[str, str, str | None]  # a flow, the path to move it to, via


@dataclass
class Run:
    rng: random.Random
    replicas: list[Replica]
    etcd: EtcdCluster
    moves: list[Move]
    accepted: list[str] = field(default_factory=list)
    deposals: list[Deposal] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def client(self) -> None:
        """Reroutes to random replicas (paused ones skipped: the client would only time
        out), until ``stop``."""
        rng = random.Random(self.rng.random())
        while not self.stop.is_set():
            replica = rng.choice(self.replicas)
            flow, to, via = rng.choice(self.moves)
            if replica.serve is not None and not replica.paused:
                try:
                    view = replica.serve.client().create([flow], to, via=via)
                    self.accepted.append(view.id)
                except Exception:  # refused, overloaded, cut off: not accepted
                    pass
            self.stop.wait(rng.uniform(0.2, 1.2))

    def running(self) -> Replica | None:
        """A replica running a reroute now, if any (the one a fault hurts most)."""
        for r in self.replicas:
            if r.serve is None or r.paused:
                continue
            try:
                if RerouteClient(r.serve.url, OPERATOR, timeout_s=1.0).health().running:
                    return r
            except ApiError:
                continue
        return None

    def fault(self, kind: str, t0: float) -> None:
        """One fault, lasting ``FAULT_S``, then healed; a replica fault hits the replica
        running a reroute if there is one (the seed draws a replica all the same, so the
        schedule of kinds and times stays the seed's)."""
        drawn = self.rng.choice(self.replicas)
        replica = self.running() or drawn
        members = self.rng.sample([m.name for m in self.etcd.members], 2)
        target = replica.writer if kind in ("kill", "pause", "cut") else ",".join(members)
        self.schedule.append(f"{time.time() - t0:6.1f} s {kind} {target}")
        start = time.time()
        if kind == "kill":
            replica.stop()
            time.sleep(2.0)
            replica.start()
        elif kind == "pause":
            replica.paused = True
            os.kill(replica.pid, signal.SIGSTOP)
            time.sleep(FAULT_S)
            os.kill(replica.pid, signal.SIGCONT)
            replica.paused = False
        elif kind == "cut":
            replica.part.cut()
            time.sleep(FAULT_S)
            replica.part.heal()
        else:
            down = members[:1] if kind == "etcd member" else members
            for m in down:
                self.etcd.kill(m)
            time.sleep(FAULT_S)
            for m in down:
                self.etcd.restart(m, wait=False)
            self.etcd.wait_healthy()
        if kind in ("pause", "cut"):
            log = replica.config.with_suffix(".log")
            self.deposals.append(Deposal(replica.writer, start, time.time(), log))


def _rounds(rng: random.Random) -> Iterator[str]:
    """The faults' kinds: rounds of every kind once, each round in the seed's order."""
    while True:
        yield from rng.sample(FAULTS, len(FAULTS))


def _views(replicas: list[Replica], ids: list[str], timeout: float) -> dict[str, RerouteView]:
    """Every reroute the service knows (the accepted ones and those whose acceptance the
    client never heard: a request that timed out may still have been taken) as a live
    replica answers it, once all have ended (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    views: dict[str, RerouteView] = {}
    while time.monotonic() < deadline:
        for serve in (r.serve for r in replicas if r.serve is not None):
            try:
                client = serve.client()
                views = {v.id: v for v in client.list(limit=1000)}
                views |= {i: client.get(i) for i in ids if i not in views}
            except ApiError:
                continue  # this one cannot answer now: the next
            if all(v.final for v in views.values()):
                return views
        time.sleep(0.5)
    return views


def _answers(replicas: list[Replica], ids: list[str]) -> dict[str, dict[str, str]]:
    answers: dict[str, dict[str, str]] = {}
    for r in replicas:
        if r.serve is not None:
            client = r.serve.client()
            answers[r.writer] = {i: str(client.get(i).state) for i in ids}
    return answers


def _stop(replicas: list[Replica]) -> None:
    for r in replicas:
        r.stop()


NEW_TERM = re.compile(r"^(\S+ \S+) \w+ reroute\.etcd: new lease \w+: this replica is owner")


def _new_term(d: Deposal) -> float | None:
    """When the deposed replica took a new lease as a new owner after ``d`` began (its
    log: ``etcd.locks._reregister``); its writes from then on are that owner's."""
    for line in d.log.read_text().splitlines() if d.log.exists() else []:
        if at := NEW_TERM.match(line):
            t = datetime.strptime(at.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if t >= d.start:
                return t
    return None


def _window(h: History, start: float, end: float) -> History:
    return {d: [w for w in ws if start <= w.t <= end] for d, ws in h.items()}


def _check(
    run: Run,
    h: History,
    views: dict[str, RerouteView],
    found: dict[str, list[str]],
    devices: Callable[[RerouteView], frozenset[str]],
) -> list[str]:
    bad = final_states(list(views), _answers(run.replicas, list(views)))
    for d in run.deposals:
        term = _new_term(d)
        bad += after_successor(_window(h, d.start, d.end + GRACE_S), d.writer, d.start, term)
    writers = frozenset(run.replicas[0].pids.values())
    spans = [
        Span(reroute=i, start=v.started, end=v.finished or inf, devices=devices(v), runners=writers)
        for i, v in views.items()
        if v.started is not None  # one still running owns its writes so far
    ]
    bad += overlapping(h, spans)
    return bad + one_path(found)


@dataclass(frozen=True, slots=True)
class Chaos:
    """What a chaos run is on: its fabric, the moves the client draws from, the probes'
    ends (host, host, address), where the flows are (read back from the devices) and which
    devices a reroute may write."""

    topo: Topology
    fab: Fabric
    topology_file: Path
    moves: list[Move]
    probes: list[tuple[str, str, str]]
    where: Callable[[], dict[str, list[str]]]
    devices: Callable[[RerouteView], frozenset[str]]
    rate: int = RATE
    setup: list[Move] = field(default_factory=list)  # moved one at a time before the faults
    clients: int = 1  # sending at once


def _chaos(c: Chaos, tmp_path: Path, prefix: str) -> tuple[Run, list[str], History]:
    """One chaos run on ``c`` (module docstring): the checker's findings."""
    rng = random.Random(SEED)
    relays: dict[str, RecordingRelay] = {}
    pids: dict[int, str] = {}
    with ExitStack() as stack:
        stack.callback(close, relays)
        served = load_topology(c.topology_file).name  # the fabric's may be another's
        inv = inventory(fab := c.fab, tmp_path, relays, topology=served)
        etcd = stack.enter_context(EtcdCluster(tmp_path / "etcd", size=3))
        replicas = []
        for i in range(3):
            part = stack.enter_context(partitionable(etcd.endpoints))
            conf = config(inv, tmp_path, f"r{i}", part.endpoints, prefix, c.topology_file)
            replicas.append(Replica(f"r{i}", conf, part, pids))
        stack.callback(_stop, replicas)
        with ThreadPoolExecutor() as pool:  # at once: each takes a while to come up
            list(pool.map(Replica.start, replicas))
        for flow, to, via in c.setup:
            assert replicas[0].serve is not None
            done = replicas[0].serve.client().create([flow], to, via=via, wait_s=30)
            assert done.state is DONE, (flow, to, done.error)
        begun = time.time()  # the fabric's write log holds earlier writes too
        run = Run(rng, replicas, etcd, c.moves)
        clients = [threading.Thread(target=run.client, daemon=True) for _ in range(c.clients)]
        drops = fabric_drops(fab)
        seconds = max(SECONDS, ROUND_S) + 2  # the faults' time (the drain's start)
        probes = [Probe(fab, seconds, c.rate, src=a, dst=b, to=to) for a, b, to in c.probes]
        for _, b, _ in c.probes:
            wait_arriving(fab, b)
        t0 = time.time()
        for client in clients:
            client.start()
        stack.callback(run.stop.set)
        kinds = _rounds(rng)
        while len(run.schedule) < len(FAULTS) or time.time() - t0 < SECONDS - FAULT_S - 2:
            time.sleep(rng.uniform(*GAP_S))
            run.fault(next(kinds), t0)
        run.stop.set()
        for client in clients:
            client.join(timeout=20)
        drain = time.time()
        views = _views(replicas, run.accepted, timeout=DRAIN_S)
        time.sleep(GRACE_S)
        found = c.where()
        h = _window(history(fab, relays, pids), begun, inf)
        sent = [p.report() for p in probes]
        dropped = fabric_drops(fab) - drops
        lost = sum(r["lost"] for r in sent)
        bad = _check(run, h, views, found, c.devices) + probe_loss(lost, dropped)
        ended = sum(v.final for v in views.values())
        states = sorted({str(v.state) for v in views.values()})
        faults = "\n  ".join(run.schedule)
        print(f"seed {SEED}, {SECONDS:g} s: {len(run.accepted)} accepted, {len(views)} known, "
              f"{ended} ended ({', '.join(states)}), {_beside(views)} ran beside another, "
              f"drained in {time.time() - drain:.1f} s; "
              f"probes lost {lost} of {sum(r['sent'] for r in sent)}, OVS dropped {dropped}; "
              f"faults:\n  {faults}")  # fmt: skip
    return run, bad, h


def _beside(views: dict[str, RerouteView]) -> int:
    """How many reroutes ran while another one ran."""
    spans = [(v.started, v.finished or inf) for v in views.values() if v.started is not None]
    return sum(any(a < d and c < b for c, d in spans if (c, d) != (a, b)) for a, b in spans)


def _verdict(run: Run, bad: list[str], h: History) -> None:
    at = re.search(r"@(\d+\.\d+)", bad[0]) if bad else None
    last_fault = run.deposals[-1].start if run.deposals else time.time()
    first = float(at.group(1)) if at else last_fault  # no write to show: the last fault
    report = [f"seed {SEED}, faults:", *run.schedule, excerpt(h, first, 3, 6)] if bad else []
    assert bad == [], "\n".join([*bad, *report])


def test_chaos_the_checker_finds_nothing(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> None:
    topo, fab = svc_fabric
    chaos = Chaos(
        topo, fab, NGNCS, [(FLOW, to, via) for to, via in MOVES], [("vm2", "vm3", "10.0.0.3")],
        where=lambda: {FLOW: where(topo, fab)},
        devices=lambda view: frozenset(topo.nodes) - {n.name for n in topo.hosts},
    )  # fmt: skip
    try:
        run, bad, h = _chaos(chaos, tmp_path, "/test/chaos")
    finally:
        restoring = time.time()
        restore_alone(topo, fab, tmp_path)  # the replicas and etcd are gone: a service alone
        print(f"restored in {time.time() - restoring:.1f} s")
    _verdict(run, bad, h)


PAIRS = ((1, 2), (3, 4))


@pytest.fixture(scope="module")
def pairs_fabric(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Topology, Fabric, Path]]:
    """Four racks, one spine, three OCS (``reroute topo generate leaf-spine``): rack pairs
    1-2 and 3-4 share no leaf and no OCS port, ocs1 and ocs3 join both pairs, ocs2 neither
    (an optical move joins a pair there)."""
    path = tmp_path_factory.mktemp("pairs") / "chaos-pairs.yaml"
    path.write_text(to_yaml(leaf_spine(racks=4, spines=1, ocs=3, name="chaos-pairs")))
    with built(path, "chaos-pairs") as (topo, fab):
        yield topo, fab, path


def test_chaos_with_disjoint_pairs_the_checker_finds_nothing(
    pairs_fabric: tuple[Topology, Fabric, Path], tmp_path: Path
) -> None:
    """The same faults and checks with two flows that share no device but the OCS: reroutes
    of one pair run beside the other's (two owners' groups), of one pair after each other.
    A reroute may write its pair's leaves, and ocs2 when it moves its pair onto ocs2."""
    topo, fab, path = pairs_fabric
    flows = {pair: _flow(topo, *pair) for pair in PAIRS}
    moves = [
        (flows[(a, b)], f"r{a}-{b}-{to}", via and f"r{a}-{b}-{via}")
        for a, b in PAIRS
        for to, via in (("o1", None), ("o3", None), ("o2", "o1"), ("o2", "o3"))
    ]

    def devices(view: RerouteView) -> frozenset[str]:
        a, b = (int(r) for r in view.to_path.removeprefix("r").split("-")[:2])
        optical = {"ocs2"} if view.to_path.endswith("-o2") else set()
        return frozenset({f"leaf{a}", f"leaf{b}", *optical})

    def found() -> dict[str, list[str]]:
        return {flow: where(topo, fab, (f"h{a}", f"h{b}")) for (a, b), flow in flows.items()}

    probes = [(f"h{a}", f"h{b}", str(_host(topo, f"h{b}").address)) for a, b in PAIRS]
    setup: list[Move] = [(flows[(a, b)], f"r{a}-{b}-o1", None) for a, b in PAIRS]  # off the spine
    chaos = Chaos(topo, fab, path, moves, probes, found, devices, 2000, setup, clients=2)
    run, bad, h = _chaos(chaos, tmp_path, "/test/chaos-pairs")
    _verdict(run, bad, h)


def _flow(topo: Topology, a: int, b: int) -> str:
    path = topo.paths[f"r{a}-{b}-s1"]
    return f"{path.src_ip}>{path.dst_ip}"


def _host(topo: Topology, name: str) -> Host:
    node = topo.nodes[name]
    assert isinstance(node, Host)
    return node
