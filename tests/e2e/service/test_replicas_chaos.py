"""Chaos under replicas, checked as Jepsen checks (issue 30, Deliver 4).

Three ``reroute serve`` replicas on a 3-member etcd (lease TTL 2 s) share the ngncs-ost
fabric, its bridges behind recording relays and its Polatis emulator logging its writes
(``recorded.py``). A client sends reroutes of the one flow vm2 -> vm3 (electrical and
optical moves, so they overlap on every device: the fabric has no disjoint pair) to
random replicas, while a schedule drawn from ``CHAOS_SEED`` (default 31) injects one fault
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
  reroute (every reroute's window is the answer's started..finished);
- the flow is on exactly one path at the end, read back;
- the probe (5 kpps, vm2 -> vm3, through the faults) lost no more than OVS dropped itself:
  every reroute, ended or deposed and taken over, left the flow a path at every moment.

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
from collections.abc import Iterator
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
from services.reroute.service.client import RerouteClient, RerouteView
from services.reroute.topology import Topology
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
from tests.e2e.conftest import Probe, wait_arriving
from tests.e2e.recording import RecordingRelay
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
from tests.unit.services.service.conftest import OPERATOR, ServeProcess

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
MOVES = [("temporary", None), ("long", None), ("short", "temporary"), ("long", "temporary")]
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


@dataclass
class Run:
    rng: random.Random
    replicas: list[Replica]
    etcd: EtcdCluster
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
            to, via = rng.choice(MOVES)
            if replica.serve is not None and not replica.paused:
                try:
                    view = replica.serve.client().create([FLOW], to, via=via)
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


def _check(run: Run, h: History, views: dict[str, RerouteView], found: list[str]) -> list[str]:
    bad = final_states(list(views), _answers(run.replicas, list(views)))
    for d in run.deposals:
        term = _new_term(d)
        bad += after_successor(_window(h, d.start, d.end + GRACE_S), d.writer, d.start, term)
    writers = frozenset(run.replicas[0].pids.values())
    devices = frozenset(h)
    spans = [
        Span(reroute=i, start=v.started, end=v.finished or inf, devices=devices, runners=writers)
        for i, v in views.items()
        if v.started is not None  # one still running owns its writes so far
    ]
    bad += overlapping(h, spans)
    return bad + one_path({FLOW: found})


def test_chaos_the_checker_finds_nothing(
    svc_fabric: tuple[Topology, Fabric], tmp_path: Path
) -> None:
    topo, fab = svc_fabric
    rng = random.Random(SEED)
    relays: dict[str, RecordingRelay] = {}
    pids: dict[int, str] = {}
    with ExitStack() as stack:
        stack.callback(close, relays)
        inv = inventory(fab, tmp_path, relays)
        etcd = stack.enter_context(EtcdCluster(tmp_path / "etcd", size=3))
        replicas = []
        for i in range(3):
            part = stack.enter_context(partitionable(etcd.endpoints))
            conf = config(inv, tmp_path, f"r{i}", part.endpoints, "/test/chaos")
            replicas.append(Replica(f"r{i}", conf, part, pids))
        stack.callback(_stop, replicas)
        begun = time.time()  # the fabric's write log holds the module's earlier tests' too
        with ThreadPoolExecutor() as pool:  # at once: each takes a while to come up
            list(pool.map(Replica.start, replicas))
        run = Run(rng, replicas, etcd)
        client = threading.Thread(target=run.client, daemon=True)
        drops = fabric_drops(fab)
        probe = Probe(fab, max(SECONDS, ROUND_S) + 2)  # the faults' time (the drain's start)
        wait_arriving(fab, "vm3")
        t0 = time.time()
        client.start()
        stack.callback(run.stop.set)
        kinds = _rounds(rng)
        while len(run.schedule) < len(FAULTS) or time.time() - t0 < SECONDS - FAULT_S - 2:
            time.sleep(rng.uniform(*GAP_S))
            run.fault(next(kinds), t0)
        run.stop.set()
        client.join(timeout=20)
        drain = time.time()
        views = _views(replicas, run.accepted, timeout=DRAIN_S)
        time.sleep(GRACE_S)
        found = where(topo, fab)
        h = _window(history(fab, relays, pids), begun, inf)
        sent = probe.report()
        dropped = fabric_drops(fab) - drops
        bad = _check(run, h, views, found) + probe_loss(sent["lost"], dropped)
        ended = sum(v.final for v in views.values())
        states = sorted({str(v.state) for v in views.values()})
        faults = "\n  ".join(run.schedule)
        print(f"seed {SEED}, {SECONDS:g} s: {len(run.accepted)} accepted, {len(views)} known, "
              f"{ended} ended ({', '.join(states)}), drained in {time.time() - drain:.1f} s; "
              f"probe lost {sent['lost']} of {sent['sent']}, OVS dropped {dropped}; "
              f"faults:\n  {faults}")  # fmt: skip
    restoring = time.time()
    restore_alone(topo, fab, tmp_path)  # the replicas and etcd are gone: a service alone
    print(f"restored in {time.time() - restoring:.1f} s")
    at = re.search(r"@(\d+\.\d+)", bad[0]) if bad else None
    last_fault = run.deposals[-1].start if run.deposals else t0
    first = float(at.group(1)) if at else last_fault  # no write to show: the last fault
    report = [f"seed {SEED}, faults:", *run.schedule, excerpt(h, first, 3, 6)] if bad else []
    assert bad == [], "\n".join([*bad, *report])
