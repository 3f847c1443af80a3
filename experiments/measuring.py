"""One measured session on seed 003's testbed: traffic on the long path, a reroute under
it, the numbers (a library: ``reroute demo``, ``ostbench`` and ``mptcp`` use it).

``Traffic`` runs the sequence-numbered UDP probe and an iperf3 TCP stream from the long
path's source to its destination; ``measured`` reconfigures the optical switch under it (or
changes nothing: the fabric's own loss) and returns the run's numbers; ``Road`` is one
repetition's road to the devices (drivers opened once, one engine), whose ``reroute`` runs
an intent and notes when each step ended; ``restore`` puts the flows back by one
unmeasured MBB reroute on the same road.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from emulators.polatis.emulator import EmulatorConfig
from experiments import demo_report as report
from experiments.demo_report import RunNumbers, TcpNumbers, Timing, UdpNumbers
from fabric import drops as counters
from fabric.errors import FabricError
from fabric.fabric import Fabric
from fabric.kinds import optical_control
from fabric.run import in_netns, run
from fabric.traffic.iperf import IperfResult, run_iperf
from services.reroute.engine.engine import Engine
from services.reroute.engine.executor import StepEvent
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.inventory import Inventory, open_drivers
from services.reroute.model.topology import Path as TopoPath
from services.reroute.model.topology import Topology
from services.reroute.planning.plan import Plan, StepKind
from services.reroute.store.records import RerouteState, StepState
from services.reroute.store.sqlite import Journal

ROOT = Path(__file__).resolve().parents[1]
LONG, SHORT, TEMPORARY = "long", "short", "temporary"
TCP_S = 5  # TCP stream per run (iperf3 runs whole seconds); its start burst comes first
PROBE_S = 4  # UDP probe per run, started once TCP runs; reconfigure once the probe flows
BASELINE_S = 0.8  # both flowing on the long path before the reconfiguration
INTERVAL_S = 0.1  # iperf3 reporting interval
DRAIN_S = 0.005  # MBB drain: the fabric's paths have no long-haul delay
PROBE_PORT = 9000
SWITCH_MS = EmulatorConfig().switch_ms  # the fabric starts its emulators with the default
CLI = (sys.executable, "-m", "services.reroute.cli")
KEY_STEPS = (StepKind.SHIFT, StepKind.CIRCUITS, StepKind.AWAIT_LOCK)
_T = TypeVar("_T")


class Traffic:
    """One run's traffic over ``path``: the probe receiver and sender as processes in the
    hosts' namespaces, the iperf3 TCP stream in a thread (``run_iperf`` blocks; none when
    ``tcp_mbps`` is 0). Leaving stops whatever still runs."""

    def __init__(
        self,
        fab: Fabric,
        path: TopoPath,
        *,
        rate: int,
        tcp_mbps: int,
        tcp_s: int = TCP_S,
        probe_s: float = PROBE_S,
        congestion: str | None = None,
    ) -> None:
        self.fab, self.path, self.rate, self.tcp_mbps = fab, path, rate, tcp_mbps
        self.congestion = congestion
        self.tcp_s, self.probe_s = tcp_s, probe_s
        self.tcp_started_ns = 0
        self.run_id = str(random.getrandbits(32))
        self._procs: list[subprocess.Popen[str]] = []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="iperf3")
        self._tcp: Future[IperfResult] | None = None

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        self.tcp_started_ns = time.monotonic_ns()  # iperf3 starts within tens of ms of it
        self._tcp = (
            None
            if not self.tcp_mbps
            else self._pool.submit(
                run_iperf,
                str(self.path.dst_ip),
                duration_s=self.tcp_s,
                bitrate_bps=self.tcp_mbps * 1_000_000,
                interval_s=INTERVAL_S,
                server_netns=self.fab.host_ns(self.path.dst),
                client_netns=self.fab.host_ns(self.path.src),
                congestion=self.congestion,
            )
        )
        to = f"{self.path.dst_ip}:{PROBE_PORT}"
        wait = str(self.probe_s + 30)
        recv = self._probe(self.path.dst, "recv", "--bind", to, "--json", "--timeout", wait)
        _await_listening(recv)
        rate, seconds, before = str(self.rate), str(self.probe_s), _udp_in_datagrams(recv.pid)
        send = self._probe(self.path.src, "send", "--to", to, "--rate", rate, "--duration", seconds)
        _await_datagrams(recv.pid, send, before)  # a busy machine starts Python slowly

    def _probe(self, host: str, *args: str) -> subprocess.Popen[str]:
        cmd = in_netns(self.fab.host_ns(host), [*CLI, "probe", *args, "--run-id", self.run_id])
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
        )
        self._procs.append(proc)
        return proc

    def results(self) -> tuple[dict[str, Any], IperfResult]:
        """Wait for the end of the traffic: the probe receiver's report, the iperf3 result."""
        probe = self.probe_report()
        assert self._tcp is not None, "no TCP stream (tcp_mbps 0): use probe_report()"
        return probe, self._tcp.result(timeout=self.tcp_s + 20)

    def probe_report(self) -> dict[str, Any]:
        """Wait for the end of the probe: its receiver's report."""
        recv, send = self._procs
        sent, err = send.communicate(timeout=self.probe_s + 15)
        if send.returncode != 0:
            raise FabricError(f"probe sender failed ({send.returncode}): {err.strip()}")
        out, err = recv.communicate(timeout=15)
        if recv.returncode != 0:
            raise FabricError(f"probe receiver failed ({recv.returncode}): {err.strip()}")
        errors = re.search(r"\bsend_errors=(\d+)", sent)
        return dict(json.loads(out)) | {"send_errors": int(errors[1]) if errors else None}

    def stop(self) -> None:
        """Stop every traffic process."""
        for proc in self._procs:
            _end(proc)
        self._pool.shutdown(wait=True, cancel_futures=True)  # iperf3 ends within its timeout


def _await_listening(recv: subprocess.Popen[str]) -> None:
    assert recv.stderr is not None
    line = recv.stderr.readline()
    if "listening" not in line:
        recv.wait(timeout=5)
        raise FabricError(f"probe receiver did not start: {line.strip()} {recv.stderr.read()}")


def _await_datagrams(pid: int, sender: subprocess.Popen[str], before: int) -> None:
    """Until the namespace of process ``pid`` has received more than ``before`` UDP
    datagrams (the probe's): FabricError if the sender ends first or after 15 s."""
    timeout_s = 15.0
    deadline = time.monotonic() + timeout_s
    while _udp_in_datagrams(pid) <= before:
        if sender.poll() is not None or time.monotonic() > deadline:
            raise FabricError(f"no probe datagram arrived in {timeout_s:g} s")
        time.sleep(0.01)


def _udp_in_datagrams(pid: int) -> int:
    """``Udp: InDatagrams`` of the network namespace process ``pid`` is in."""
    text = Path(f"/proc/{pid}/net/snmp").read_text()
    names, values = (line.split() for line in text.splitlines() if line.startswith("Udp:"))
    return int(dict(zip(names, values, strict=True))["InDatagrams"])


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """One finished reroute: its plan and when each step ended (ms from the request)."""

    plan: Plan
    requested_ns: int  # CLOCK_MONOTONIC, as the probe's timestamps
    ended_ms: dict[int, float]  # by step number (1-based)
    total_ms: float

    def new_path_ms(self) -> float:
        """When the flows ran on the new path: the last shift done and the circuit locked."""
        steps = enumerate(self.plan.steps(), start=1)
        gates = (StepKind.SHIFT, StepKind.AWAIT_LOCK)
        return max(self.ended_ms[i] for i, s in steps if s.kind in gates)

    def milestones(self) -> list[str]:
        """The shifts, circuit changes and lock waits, in the order they ended."""
        named = [(p.name, s) for p in self.plan.phases for s in p.steps]
        marks = [
            (
                self.ended_ms[i],
                f"{'' if phase.value == step.kind.value else phase + ': '}{step.describe()}",
            )
            for i, (phase, step) in enumerate(named, start=1)
            if step.kind in KEY_STEPS
        ]
        return [f"+{ms:4.0f} ms  {text}" for ms, text in sorted(marks)]


class Road:
    """One repetition's road to the devices: the drivers opened once (one connection per
    device, as the service keeps them), one journal and one engine, on an event loop of its
    own that runs the whole time (in a thread: the connections answer their devices' echo
    requests and port events between reroutes, as in the service). The measured move and
    the restore after it go the same way, and opening the connections is not on the
    clock."""

    def __init__(self, topo: Topology, inv: Inventory) -> None:
        self.topo = topo
        self.inv = inv
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="road", daemon=True)
        self._stack = AsyncExitStack()
        self._journal: Journal | None = None
        self._engine: Engine | None = None

    def __enter__(self) -> Self:
        self._thread.start()
        try:
            self._engine = self._call(self._open())
        except BaseException:
            self.__exit__()
            raise
        return self

    def _call(self, work: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def _open(self) -> Engine:
        drivers = await self._stack.enter_async_context(open_drivers(self.inv, self.topo))
        self._journal = Journal(self.inv.journal)  # used in the loop's thread alone
        return Engine.of(self.topo, self.inv, drivers, self._journal)

    async def _close(self) -> None:
        try:
            await self._stack.aclose()
        finally:
            if self._journal is not None:
                self._journal.close()

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def reroute(self, intent: Intent) -> Done:
        """Run ``intent`` on the devices; when each step ended (FabricError: it failed)."""
        if self._engine is None or self._loop.is_closed():
            raise FabricError("a measuring.Road is used inside its with block only")
        return self._call(_reroute(self._engine, intent))


async def _reroute(engine: Engine, intent: Intent) -> Done:
    ended: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        """Note when each step ended."""
        if event.state is StepState.DONE:
            ended[event.index] = time.perf_counter()

    t0, requested_ns = time.perf_counter(), time.monotonic_ns()
    plan, outcome = await engine.apply(intent, on_event=on_event)
    total_ms = (time.perf_counter() - t0) * 1000
    if outcome.state is not RerouteState.DONE:
        raise FabricError(f"the {intent.strategy} reroute failed:\n{outcome.describe()}")
    ended_ms = {i: (t - t0) * 1000 for i, t in ended.items()}
    return Done(plan=plan, requested_ns=requested_ns, ended_ms=ended_ms, total_ms=total_ms)


def reroute(topo: Topology, inv: Inventory, intent: Intent) -> Done:
    """Run ``intent`` on the devices of ``inv`` by a road of its own (``Road``)."""
    with Road(topo, inv) as road:
        return road.reroute(intent)


def _drawn_lock_ms(fab: Fabric, plan: Plan) -> float:
    """The emulator's drawn lock time of the plan's new circuits (the slowest: a duplex link
    carries frames once both directions have locked)."""
    times = []
    for step in plan.steps():
        if step.kind is StepKind.CIRCUITS and step.connect:
            drawn = optical_control(fab.state, step.device).drawn_locks()
            times += [drawn[c.egress] for c in step.connect]
    return max(times, default=0.0)


def measured(
    road: Road,
    fab: Fabric,
    args: argparse.Namespace,
    name: str,
    intent: Intent | None,
    say: Callable[[str], None],
) -> RunNumbers:
    """Run the traffic, reconfigure under it (nothing if ``intent`` is None), and measure;
    what it does is told to ``say``."""
    topo = road.topo
    before = drops(fab)
    sender = fab.host_ns(topo.paths[LONG].src)
    resent = counters.needless_resends(sender)
    with Traffic(fab, topo.paths[LONG], rate=args.rate, tcp_mbps=args.tcp_mbps) as traffic:
        time.sleep(BASELINE_S)  # a baseline: the traffic's rate before the event
        if intent is None:
            say(f"changing nothing, {BASELINE_S:g} s into the probe")
            done, request_ns = None, time.monotonic_ns()
        else:
            say(f"reconfiguring {optical_names(topo)} now, {BASELINE_S:g} s into the probe")
            done = road.reroute(intent)
            request_ns = done.requested_ns
            for line in done.milestones():
                say(line)
        say(f"collecting the traffic reports (probe {PROBE_S} s, TCP {TCP_S} s)")
        probe, tcp = traffic.results()
    dropped = drops(fab) - before
    needless = counters.needless_resends(sender) - resent
    return RunNumbers(
        strategy=name,
        udp=UdpNumbers.from_probe(probe, request_ns=request_ns),
        tcp=TcpNumbers.from_iperf(tcp, INTERVAL_S, needless=needless),
        timing=None if done is None else timing(fab, done),
        fabric_drops=dropped.sockets,
        line_drops=dropped.queues,
        send_failures=dropped.send_failures,
        other_drops=other_drops(dropped, probe),
    )


def other_drops(dropped: Drops, probe: Mapping[str, Any]) -> dict[str, int]:
    """The drop counters beyond the fabric's own that moved in a run, and the probe's
    sends that failed (a datagram counted sent that never left the sender)."""
    failed = probe.get("send_errors") or 0
    return dropped.others | ({"probe/send_errors": failed} if failed else {})


@dataclass(frozen=True, slots=True)
class Drops:
    """What the fabric dropped by itself so far, by where (see :func:`drops`)."""

    sockets: int  # OVS's receive sockets (its forwarding thread fell behind)
    queues: int  # the queues of capped links (the line was full)
    send_failures: int  # OVS's failed sends, from its log (a lower bound; 0: none)
    # every other drop counter (fabric.drops): read, then the ones that moved
    others: dict[str, int] = field(default_factory=dict)

    def __sub__(self, earlier: Drops) -> Drops:
        return Drops(
            self.sockets - earlier.sockets,
            self.queues - earlier.queues,
            self.send_failures - earlier.send_failures,
            counters.moved(earlier.others, self.others),
        )


def drops(fab: Fabric) -> Drops:
    """Everything :class:`Drops` counts, read now: one reading before a run and one after
    give what the fabric itself lost during it."""
    others = counters.read(fab.state)
    return Drops(fabric_drops(fab), line_drops(fab), counters.send_failures(others), others)


def fabric_drops(fab: Fabric) -> int:
    """Packets OVS dropped so far in its receive sockets (one per port, in the fabric's
    namespace): what the fabric lost by itself, when its forwarding thread fell behind."""
    return report.socket_drops(run(["ss", "-0", "-a", "-m"], ns=fab.state.fabric_ns))


def line_drops(fab: Fabric) -> int:
    """Packets the queues of the fabric's links dropped so far (a line-rate cap's tbf, in
    the fabric's namespace, :mod:`fabric.lines`): the streams exceeded the line (TCP's slow
    start overshoots it, and a probe packet in the same queue goes with TCP's), not a
    reroute's doing."""
    return report.qdisc_drops(run(["tc", "-s", "qdisc", "show"], ns=fab.state.fabric_ns))


def timing(fab: Fabric, done: Done) -> Timing:
    """The reroute's timings, with the emulator's switching and drawn lock times."""
    return Timing(
        new_path_ms=done.new_path_ms(),
        total_ms=done.total_ms,
        switch_ms=SWITCH_MS,
        lock_ms=_drawn_lock_ms(fab, done.plan),
    )


def restore(road: Road, flows: tuple[FlowSpec, ...]) -> str:
    """Put ``flows`` back on the long path by one MBB reroute (not measured); a line saying so."""
    intent = Intent(flows=flows, to_path=LONG, via=TEMPORARY, drain_s=DRAIN_S)
    done = road.reroute(intent)
    circuits = [s.describe() for s in done.plan.steps() if s.kind is StepKind.CIRCUITS]
    return (
        f"flows back on the {LONG} path by one MBB reroute via {TEMPORARY} without traffic"
        f" ({'; '.join(circuits)}) in {done.total_ms:.0f} ms"
    )


def optical_names(topo: Topology) -> str:
    """The topology's optical switches, for a sentence."""
    return ", ".join(o.name for o in topo.optical_switches)


def demo_flows(topo: Topology) -> tuple[FlowSpec, ...]:
    """The flows the demo moves (the long path's hosts); FabricError if the topology lacks
    what the demo needs."""
    missing = [p for p in (LONG, SHORT, TEMPORARY) if p not in topo.paths]
    if missing or not topo.optical_switches:
        raise FabricError(
            f"{topo.file}: the demo needs an optical switch and paths {LONG}, {SHORT} and"
            f" {TEMPORARY} (as in topologies/ngncs-ost.yaml); missing paths: {missing or '-'}"
        )
    long = topo.paths[LONG]
    return (FlowSpec.parse(f"{long.src_ip}>{long.dst_ip}"),)
