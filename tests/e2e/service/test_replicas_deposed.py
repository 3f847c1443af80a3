"""A deposed replica writes to no device after its successor started (issue 30, Deliver 1),
for every driver, judged from the devices' own write history, not from the replicas' logs.

Two ``reroute serve`` replicas on a 3-member etcd (lease TTL 2 s) share a fabric of the
ngncs-ost shape (``VARIANTS``), the Polatis emulator for ost1 on each (unfenced: it applies
any client's command; its changes in the EMULATORS' write log, ``REROUTE_WRITE_LOG``), its
four packet switches played by:

- ``ovs13``: Open vSwitch bridges on OpenFlow 1.3 (fenced: a claim with a generation id
  makes the other connections slaves, whose FLOW_MODs the switch refuses), reached through
  recording relays (``tests/e2e/recording.py``);
- ``ryu``: the Ryu ofctl_rest EMULATOR (driver ``ryu_rest``; unfenced, lock-delay), each
  applied REST write in the write log with the process that sent it;
- ``p4``: P4Runtime switch EMULATORS (fenced by election id), each applied Write batch in
  the write log with its election id;
- ``dpctl``: bridges on OpenFlow 1.0 through the reference ``dpctl`` (driver ``hp_dpctl``,
  a process per call; unfenced, lock-delay), through recording relays that name the
  connecting process's parent (the replica that ran the tool) as the writer;
- ``odl``: the OpenDaylight EMULATOR (driver ``odl``, RESTCONF; unfenced, lock-delay), a
  topology derived from ngncs-ost-ryu.yaml in the test's temporary directory (none ships).

An optical MBB (long -> short via temporary, the new circuit locking after 2.5 s) starts;
at a point of it (its first table change, the last one before the optical step, the one as
the lock wait begins: ``POINTS``, ``FLOW_ENTRIES`` where each flow entry is a write of its
own) the replica running it is deposed: from a relay's thread before that change is
handed to the switch, or, where an EMULATOR logs the writes, from a thread tailing the
write log (``LogTail``) as soon as the nth one is logged (it is logged before its request
is answered: the writer is stopped awaiting the answer; the emulators are run as for any
other user):

- ``paused``: SIGSTOP until the other replica has ended the reroute (past the lease TTL),
  then SIGCONT, and 3 s (``SETTLE_S``) to do its worst;
- ``cut off``: its etcd connections black-holed (``partition.py``); it keeps running.

Per device kind, the history must hold no applied write by the deposed replica after its
successor started (its first claim or write on any device after the deposal, or, if it
touched none, when it answered the reroute ended): the successor's view of the devices is
final then. Every device answers within 2 s (``DEVICE_TIMEOUT_S``, the inventory's
``timeout_s``), so the lock-delay of an unfenced device (ost1 on every variant) is the
step cap and that, 2.75 s. Each case runs once (10-15 s on ovs13; the unfenced variants'
successors wait out the lock-delay); its history is checked per kind, and a failure
prints the history around the deposal and the deposed replica's log. ``make test`` runs
three ovs13 cases (``SUITE``); ``REROUTE_DEPOSED_ALL=1`` runs all six on every variant
(each variant's fabric built in turn: about 3.5 min per variant).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from math import inf
from pathlib import Path
from typing import Any

import pytest

from fabric.etcdcluster import EtcdCluster
from fabric.fabric import Fabric
from services.reroute.model.topology import Topology
from services.reroute.service.client import RerouteView
from tests.e2e.checker import (
    History,
    after_takeover,
    excerpt,
    final_states,
    one_path,
    successor_started,
)
from tests.e2e.conftest import ROOT, scpi
from tests.e2e.recording import Record, RecordingRelay
from tests.e2e.service.conftest import WRITES, built
from tests.e2e.service.partition import Partition, partitionable
from tests.e2e.service.recorded import (
    FLOW,
    close,
    config,
    history,
    inventory,
    logged_devices,
    restore,
    where,
)
from tests.unit.services.service.conftest import FABRIC, NGNCS, ServeProcess

pytestmark = [
    pytest.mark.fabric,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is missing (make setup)"),
]
SETTLE_S = 3.0  # after SIGCONT: the deposed replica's leftover steps (each capped at 3/8
# of the 2 s lease, 0.75 s; its requests at DEVICE_TIMEOUT_S) have run by then
DEVICE_TIMEOUT_S = 2.0  # every device's: the unfenced ones' lock-delay is 0.75 s + this
BRIDGES = ("br1", "br2", "br3", "br4")
OPTICAL = {"polatis": ("ost1",)}
# where the deposed replica stops: at the nth table change of the reroute's 18 (4 installs
# on temporary, the 2 moves onto it, then the optical step, 6 cleanups, the lock wait...);
# (0 would be its first staged message, a bundle add: none committed; the replica resumed
# then has always let its steps time out, never committed them late)
POINTS = {"first commit": 1, "before the optical step": 6, "in the lock wait": 12}
# the same points where each flow entry is a write of its own (Ryu's REST, dpctl's
# OpenFlow 1.0: no bundles): 6 installs on temporary and the 2 moves, the optical step, 6
# cleanups and the 2 installs of short's transit, the lock wait, 2 moves, 6 cleanups (24);
# P4Runtime's Write batches fall as OpenFlow 1.3's bundles do (POINTS)
FLOW_ENTRIES = {"first commit": 1, "before the optical step": 8, "in the lock wait": 16}


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """A fabric the cases run on: its topology file, the name it is built under, what plays
    its devices, the device kinds checked on it, and its ``POINTS`` (the nth change of
    its packet switches: their count differs by driver)."""

    topology: Path
    name: str
    kinds: dict[str, tuple[str, ...]]
    points: dict[str, int]
    derive: Callable[[Path], None] | None = None  # writes ``topology`` before the build
    options: dict[str, object] = field(default_factory=dict)  # fabric.up's (its players')


TOPOLOGIES = ROOT / "topologies"


def _odl(path: Path) -> None:
    """ngncs-ost with its bridges behind the OpenDaylight EMULATOR (RESTCONF, RFC 8040):
    ngncs-ost-ryu.yaml with the driver changed (no such file ships: only this test uses it)."""
    text = (TOPOLOGIES / "ngncs-ost-ryu.yaml").read_text()
    text = text.replace("name: ngncs-ost-ryu", f"name: {path.stem}")
    text = text.replace(
        "ovs: {protocols: [OpenFlow13]}", "ovs: {protocols: [OpenFlow13], driver: odl}"
    )
    path.write_text(text.replace(", driver: ryu_rest}", "}"))


VARIANTS = {
    # OpenFlow 1.3 bridges, fenced (role, generation): the relays see each change
    "ovs13": Variant(
        topology=NGNCS, name=FABRIC, kinds={"ovs13": BRIDGES, **OPTICAL}, points=POINTS
    ),
    # the Ryu ofctl_rest EMULATOR (unfenced): each flow entry a REST write, in its log
    "ryu": Variant(
        topology=TOPOLOGIES / "ngncs-ost-ryu.yaml",
        name="svc-ryu",
        kinds={"ryu_rest": BRIDGES, **OPTICAL},
        options={"ryu": "emulator"},
        points=FLOW_ENTRIES,
    ),
    # P4Runtime switch EMULATORS (fenced: election id), each Write batch in their log
    "p4": Variant(
        topology=TOPOLOGIES / "ngncs-ost-p4.yaml",
        name="svc-p4",
        kinds={"p4runtime": BRIDGES, **OPTICAL},
        points=POINTS,
    ),
    # OpenFlow 1.0 through the reference dpctl, a process per call (unfenced): the relays
    # name the process that ran it, the replica
    "dpctl": Variant(
        topology=TOPOLOGIES / "ngncs-ost-dpctl.yaml",
        name="svc-dpc",
        kinds={"hp_dpctl": BRIDGES, **OPTICAL},
        options={"hp_tool": "dpctl"},
        points=FLOW_ENTRIES,
    ),
    # the OpenDaylight EMULATOR (unfenced): each flow a RESTCONF PUT or DELETE, in its log
    "odl": Variant(
        topology=Path(tempfile.gettempdir()) / "ngncs-ost-odl.yaml",
        name="svc-odl",
        kinds={"odl": BRIDGES, **OPTICAL},
        points=FLOW_ENTRIES,
        derive=_odl,
        # its driver verifies each write in the operational datastore, which ODL updates
        # every 3 s: over the step cap of a 2 s lease (0.75 s), every step would time out
        options={"odl_stats_s": 0.2},
    ),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run: the history, who was deposed when, and who took over."""

    history: History
    deposed: str
    successor: str
    at: float  # when it was deposed (wall clock)
    ended: float  # when the successor answered the reroute final
    answers: dict[str, dict[str, str]]
    reroute: str
    said: str  # the deposed replica's log, its end
    where: list[str]  # the path the flow was read back on (none: it was not on one)


class Deposer:
    """Deposes the replica that makes the ``nth`` change of a packet switch once armed:
    from a relay's thread before that change (a FLOW_MOD, a bundle commit) reaches the
    switch (``__call__``), or as soon as an EMULATOR logged it applied (``logged``, from a
    ``LogTail``; the emulator logs before it answers, so the writer is stopped while it
    awaits the answer)."""

    def __init__(
        self,
        replicas: dict[int, str],
        fault: str,
        parts: dict[str, Partition],
        nth: int,
        logged: Collection[str] = (),
    ) -> None:
        self.replicas, self.fault, self.parts, self.nth = replicas, fault, parts, nth
        self.logged_devices = frozenset(logged)
        self.seen = 0
        self.armed = threading.Event()
        self.done = threading.Event()
        self.who = ""
        self.at = 0.0
        self._lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        changes = record.kind in ("flow_mod", "group_mod") or record.detail == "commit"
        if self.nth == 0:
            changes = record.kind in ("flow_mod", "group_mod", "bundle_add")
        if changes:  # a tool run per call (dpctl) connects: the replica is its parent
            self._hit(record.pid if record.pid in self.replicas else record.parent)

    def logged(self, entry: dict[str, Any]) -> None:
        if entry["device"] in self.logged_devices:
            self._hit(entry["pid"])

    def _hit(self, pid: int | None) -> None:
        if not self.armed.is_set() or pid not in self.replicas:
            return
        with self._lock:
            self.seen += 1
            if self.done.is_set() or self.seen < max(self.nth, 1):
                return
            self.who, self.at = self.replicas[pid], time.time()
            if self.fault == "paused":
                os.kill(pid, signal.SIGSTOP)
            else:
                self.parts[self.who].cut()
            self.done.set()


class LogTail:
    """Hands ``on_entry`` each line appended to the EMULATORS' write log from now on (a
    thread reading it every millisecond): a hook at an emulator's nth write that leaves
    the emulators as every other user runs them."""

    def __init__(self, path: Path, on_entry: Callable[[dict[str, Any]], None]) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        os.lseek(self._fd, 0, os.SEEK_END)
        self.on_entry = on_entry
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pending = b""
        while not self._stopped.wait(0.001):
            while data := os.read(self._fd, 65536):
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    self.on_entry(json.loads(line))

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        os.close(self._fd)


def _run(
    variant: Variant, topo: Topology, fab: Fabric, into: Path, fault: str, nth: int
) -> Outcome:
    relays: dict[str, RecordingRelay] = {}
    serves: dict[str, ServeProcess] = {}
    with ExitStack() as stack:
        stack.callback(close, relays)
        inventory_ = inventory(fab, into, relays, variant.topology.stem, DEVICE_TIMEOUT_S)
        logged = logged_devices(inventory_)
        etcd = stack.enter_context(EtcdCluster(into / "etcd", size=3))
        parts = {n: stack.enter_context(partitionable(etcd.endpoints)) for n in ("A", "B")}
        stack.callback(_stop, serves)

        def serve(name: str) -> None:
            conf = config(
                inventory_, into, name, parts[name].endpoints, "/test/deposed", variant.topology
            )
            serves[name] = ServeProcess(conf)

        with ThreadPoolExecutor() as pool:  # both at once: each takes a while to come up
            list(pool.map(serve, parts))
        pids = {s.proc.pid: n for n, s in serves.items()}

        deposer = Deposer(pids, fault, parts, nth, logged)
        for relay in relays.values():
            relay.on_record = deposer
        if logged:
            stack.callback(LogTail(fab.state.dir / WRITES, deposer.logged).close)
        scpi(fab, ":EMUL:LOCK 2500")
        stack.callback(scpi, fab, ":EMUL:LOCK DEFault")
        deposer.armed.set()
        started = time.time()
        # asked from a thread: A may be deposed at its first change before it answers
        asking = ThreadPoolExecutor(1)
        stack.callback(asking.shutdown)
        asking.submit(serves["A"].client().create, [FLOW], "short", via="temporary")
        if not deposer.done.wait(15):
            time.sleep(SETTLE_S)
            found = excerpt(history(fab, relays, pids, logged), started, 0, 60)
            raise AssertionError(f"fewer than {nth} changes:\n{found}")
        successor = "B" if deposer.who == "A" else "A"
        reroute = _the_reroute(serves[successor])
        end = _until_final(serves[successor], reroute)
        ended = time.time()
        if fault == "paused":
            os.kill(serves[deposer.who].proc.pid, signal.SIGCONT)
        time.sleep(SETTLE_S)
        answers = {n: _answer(s, reroute) for n, s in serves.items()}
        outcome = Outcome(
            history=history(fab, relays, pids, logged), deposed=deposer.who,
            successor=successor, at=deposer.at, ended=ended, answers=answers,
            reroute=reroute, said=serves[deposer.who].log.read_text()[-2000:],
            where=where(topo, fab),
        )  # fmt: skip
        print(f"{fault} at change {nth}: {deposer.who} deposed, {successor} ended the reroute "
              f"{end.state} {ended - deposer.at:.2f} s later\n"
              f"{excerpt(outcome.history, deposer.at, 3, 15)}")  # fmt: skip
        scpi(fab, ":EMUL:LOCK DEFault")
        restore(serves[successor], topo, fab, outcome.where)
        return outcome
    raise AssertionError("unreachable")  # ExitStack may swallow, to mypy


def _the_reroute(serve: ServeProcess) -> str:
    """The id of the one reroute of a run (its etcd is the run's own), as ``serve`` reads it."""
    deadline = time.monotonic() + 10
    while not (found := serve.client().list()):
        assert time.monotonic() < deadline, "no reroute was queued"
        time.sleep(0.05)
    assert len(found) == 1, found
    return found[0].id


def _until_final(serve: ServeProcess, reroute: str) -> RerouteView:
    deadline = time.monotonic() + 40
    while not (view := serve.client().get(reroute)).final:
        assert time.monotonic() < deadline, f"nobody ended {reroute}: {view}"
        time.sleep(0.05)
    return view


def _answer(serve: ServeProcess, reroute: str) -> dict[str, str]:
    """What a replica answers (nothing from one that does not answer in time)."""
    try:
        return {reroute: str(serve.client().get(reroute).state)}
    except Exception:  # a cut-off replica may not answer: it says nothing then
        return {}


def _stop(serves: dict[str, ServeProcess]) -> None:
    for serve in serves.values():
        if serve.proc.poll() is None:
            os.kill(serve.proc.pid, signal.SIGCONT)
            serve.kill()


class Fabrics:
    """The variants' fabrics, each built when a case first needs it, one at a time (the
    one built before is torn down then); ngncs-ost's is the package's ``svc_fabric``."""

    def __init__(self) -> None:
        self.stack = ExitStack()
        self.variant = ""
        self.built: tuple[Topology, Fabric] | None = None

    def get(self, variant: str, request: pytest.FixtureRequest) -> tuple[Topology, Fabric]:
        v = VARIANTS[variant]
        if v.name == FABRIC:
            found: tuple[Topology, Fabric] = request.getfixturevalue("svc_fabric")
            return found
        if self.variant != variant or self.built is None:
            self.stack.close()
            self.variant, self.built = variant, None
            if v.derive is not None:
                v.derive(v.topology)
            self.built = self.stack.enter_context(built(v.topology, v.name, v.options))
        return self.built


@pytest.fixture(scope="module")
def fabrics() -> Iterator[Fabrics]:
    made = Fabrics()
    with made.stack:
        yield made
    made.stack.close()


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str, str], Outcome]:
    """Each case's run, done once when a test first asks for it."""
    return {}


@pytest.fixture
def outcome(
    request: pytest.FixtureRequest,
    fabrics: Fabrics,
    outcomes: dict[tuple[str, str, str], Outcome],
    tmp_path_factory: pytest.TempPathFactory,
) -> Outcome:
    case: tuple[str, str, str] = request.param
    if case not in outcomes:
        variant, fault, point = case
        topo, fab = fabrics.get(variant, request)
        into = tmp_path_factory.mktemp("deposed")
        outcomes[case] = _run(
            VARIANTS[variant], topo, fab, into, fault, VARIANTS[variant].points[point]
        )
    return outcomes[case]


# ``make test`` runs the cases that found or guard a bug (the race at the first commit, a
# step cancelled in the lock wait, a cut at the first commit, on OpenFlow 1.3: 36 s); all
# of them, on every variant, with REROUTE_DEPOSED_ALL=1 (bench/README, "bench/chaos.py")
EVERY = os.environ.get("REROUTE_DEPOSED_ALL") == "1"
SUITE = {
    ("ovs13", "paused", "first commit"),
    ("ovs13", "paused", "in the lock wait"),
    ("ovs13", "cut off", "first commit"),
}
CASES = [
    (variant, fault, point)
    for variant, v in VARIANTS.items()
    for fault in ("paused", "cut off")
    for point in v.points
    if EVERY or (variant, fault, point) in SUITE
]


def _id(case: tuple[str, str, str]) -> str:
    return "-".join(case)


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        pytest.param(case, kind, id=f"{_id(case)}-{kind}")
        for case in CASES
        for kind in sorted(VARIANTS[case[0]].kinds)
    ],
    indirect=["outcome"],
)
def test_a_deposed_replica_writes_nothing_after_its_successor_started(
    outcome: Outcome, kind: str, request: pytest.FixtureRequest
) -> None:
    h = outcome.history
    started = min(successor_started(h, outcome.successor, outcome.at) or inf, outcome.ended)
    variant = request.node.callspec.params["outcome"][0]
    mine = {d: h[d] for d in VARIANTS[variant].kinds[kind] if d in h}
    bad = after_takeover(mine, outcome.deposed, started)
    # a write nobody is named for might be the deposed replica's (a tool run per call that
    # exited before the relay found it): none may land after the successor started
    replicas = {outcome.deposed, outcome.successor}
    bad += [
        f"{d}: {w.writer}@{w.t:.3f} [{w.conn}] {w.what}: by no replica the test knows"
        for d, ws in mine.items()
        for w in ws
        if w.applied and w.t > started and w.writer not in replicas
    ]
    report = [f"history from the deposal of {outcome.deposed} ({outcome.at:.3f}):"]
    report += [excerpt(h, outcome.at, 3, 15), f"{outcome.deposed} said:", outcome.said]
    assert bad == [], "\n".join([*bad, *report])


@pytest.mark.parametrize("outcome", [pytest.param(c, id=_id(c)) for c in CASES], indirect=True)
def test_the_reroute_ends_once_and_the_flow_on_one_path(outcome: Outcome) -> None:
    assert final_states([outcome.reroute], outcome.answers) == []
    assert one_path({FLOW: outcome.where}) == []
