"""``reroute demo``: break-before-make vs make-before-break across an optical reconfiguration.

On seed 003's testbed (topologies/ngncs-ost.yaml): bring the fabric up (its Polatis SCPI
emulator starts with it); send vm2 -> vm3 traffic on the long path (the sequence-numbered
UDP probe and an iperf3 TCP stream) and reconfigure ost1 under it to move the flows to the
short path, first BBM, then MBB (parked on the electrical temporary path while the new
circuit locks). Between the two, the flows go back to the long path by one unmeasured MBB
reroute, and a control run sends the same traffic with nothing reconfigured: what the
emulated fabric loses by itself. The fabric is always torn down (on errors, Ctrl-C and
SIGTERM too); then the runs are printed next to seed 003's numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, Self

from emulators.polatis.emulator import EmulatorConfig
from experiments import demo_report as report
from experiments.demo_report import Results, RunNumbers, TcpNumbers, Timing, UdpNumbers
from fabric import fabric
from fabric import state as fabric_state
from fabric.errors import FabricError
from fabric.fabric import Fabric
from fabric.run import in_netns, run
from fabric.traffic.iperf import IperfResult, run_iperf
from services.reroute.engine import Engine
from services.reroute.executor import StepEvent
from services.reroute.inventory import Inventory, load_inventory, open_drivers
from services.reroute.journal import Journal, RerouteState, StepState
from services.reroute.model import FlowSpec, Intent, Strategy
from services.reroute.planning.plan import Plan, StepKind
from services.reroute.topology import Path as TopoPath
from services.reroute.topology import Topology, load_topology

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
STEPS = 7


def _say(message: str) -> None:
    print(message, flush=True)


def _detail(message: str) -> None:
    _say(f"      .. {message}")


def _stage(n: int, message: str) -> None:
    _say(f"[{n}/{STEPS}] {message}")


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
        _, err = send.communicate(timeout=self.probe_s + 15)
        if send.returncode != 0:
            raise FabricError(f"probe sender failed ({send.returncode}): {err.strip()}")
        out, err = recv.communicate(timeout=15)
        if recv.returncode != 0:
            raise FabricError(f"probe receiver failed ({recv.returncode}): {err.strip()}")
        return dict(json.loads(out))

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
            (self.ended_ms[i], f"{'' if phase == step.kind else phase + ': '}{step.describe()}")
            for i, (phase, step) in enumerate(named, start=1)
            if step.kind in KEY_STEPS
        ]
        return [f"+{ms:4.0f} ms  {text}" for ms, text in sorted(marks)]


async def reroute(topo: Topology, inv: Inventory, intent: Intent) -> Done:
    """Run ``intent`` on the devices of ``inv``; when each step ended."""
    ended: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        """Note when each step ended."""
        if event.state is StepState.DONE:
            ended[event.index] = time.perf_counter()

    journal = Journal(inv.journal)
    try:
        async with open_drivers(inv, topo) as drivers:
            engine = Engine.of(topo, inv, drivers, journal)
            t0, requested_ns = time.perf_counter(), time.monotonic_ns()
            plan, outcome = await engine.apply(intent, on_event=on_event)
            total_ms = (time.perf_counter() - t0) * 1000
    finally:
        journal.close()
    if outcome.state is not RerouteState.DONE:
        raise FabricError(f"the {intent.strategy} reroute failed:\n{outcome.describe()}")
    ended_ms = {i: (t - t0) * 1000 for i, t in ended.items()}
    return Done(plan=plan, requested_ns=requested_ns, ended_ms=ended_ms, total_ms=total_ms)


def _drawn_lock_ms(fab: Fabric, plan: Plan) -> float:
    """The emulator's drawn lock time of the plan's new circuits (the slowest: a duplex link
    carries frames once both directions have locked)."""
    times = []
    for step in plan.steps():
        if step.kind is StepKind.CIRCUITS and step.connect:
            drawn = _emulator_locks(fab.state.scpi[step.device])
            times += [drawn[c.egress] for c in step.connect]
    return max(times, default=0.0)


def _emulator_locks(port: int) -> dict[int, float]:
    """Ask a Polatis emulator (emulator-only SCPI) what lock times it last drew."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.sendall(b":EMUL:LOCK?\n")
            return report.parse_lock_reply(conn.makefile().readline())
    except (OSError, ValueError) as exc:
        raise FabricError(f"cannot read the emulator's lock times on port {port}: {exc}") from exc


def _measured(
    topo: Topology,
    fab: Fabric,
    inv: Inventory,
    args: argparse.Namespace,
    name: str,
    intent: Intent | None,
) -> RunNumbers:
    """Run the traffic, reconfigure under it (nothing if ``intent`` is None), and measure."""
    drops = fabric_drops(fab)
    with Traffic(fab, topo.paths[LONG], rate=args.rate, tcp_mbps=args.tcp_mbps) as traffic:
        time.sleep(BASELINE_S)  # a baseline: the traffic's rate before the event
        if intent is None:
            _detail(f"changing nothing, {BASELINE_S:g} s into the probe")
            done, request_ns = None, time.monotonic_ns()
        else:
            _detail(f"reconfiguring {_optical(topo)} now, {BASELINE_S:g} s into the probe")
            done = asyncio.run(reroute(topo, inv, intent))
            request_ns = done.requested_ns
            for line in done.milestones():
                _detail(line)
        _detail(f"collecting the traffic reports (probe {PROBE_S} s, TCP {TCP_S} s)")
        probe, tcp = traffic.results()
    drops = fabric_drops(fab) - drops
    return RunNumbers(
        strategy=name,
        udp=UdpNumbers.from_probe(probe, request_ns=request_ns),
        tcp=TcpNumbers.from_iperf(tcp, INTERVAL_S),
        timing=None if done is None else timing(fab, done),
        fabric_drops=drops,
    )


def fabric_drops(fab: Fabric) -> int:
    """Packets OVS dropped so far in its receive sockets (one per port, in the fabric's
    namespace): what the fabric lost by itself, when its forwarding thread fell behind."""
    return report.socket_drops(run(["ss", "-0", "-a", "-m"], ns=fab.state.fabric_ns))


def timing(fab: Fabric, done: Done) -> Timing:
    """The reroute's timings, with the emulator's switching and drawn lock times."""
    return Timing(
        new_path_ms=done.new_path_ms(),
        total_ms=done.total_ms,
        switch_ms=SWITCH_MS,
        lock_ms=_drawn_lock_ms(fab, done.plan),
    )


def restore(topo: Topology, inv: Inventory, flows: tuple[FlowSpec, ...]) -> str:
    """Put ``flows`` back on the long path by one MBB reroute (not measured); a line saying so."""
    intent = Intent(flows=flows, to_path=LONG, via=TEMPORARY, drain_s=DRAIN_S)
    done = asyncio.run(reroute(topo, inv, intent))
    circuits = [s.describe() for s in done.plan.steps() if s.kind is StepKind.CIRCUITS]
    return (
        f"flows back on the {LONG} path by one MBB reroute via {TEMPORARY} without traffic"
        f" ({'; '.join(circuits)}) in {done.total_ms:.0f} ms"
    )


def _optical(topo: Topology) -> str:
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


def _runs(
    topo: Topology,
    fab: Fabric,
    inv: Inventory,
    args: argparse.Namespace,
    flows: tuple[FlowSpec, ...],
) -> tuple[Results, str]:
    long = topo.paths[LONG]
    traffic = (
        f"{long.src} -> {long.dst} on the {LONG} path: UDP probe {args.rate} pkt/s + iperf3"
        f" TCP {args.tcp_mbps} Mbit/s"
    )
    move = f"reconfiguring {_optical(topo)} {LONG} -> {SHORT} under traffic ({traffic})"
    _stage(2, f"BBM: {move}")
    bbm_intent = Intent(flows=flows, to_path=SHORT, strategy=Strategy.BBM)
    bbm = _measured(topo, fab, inv, args, "bbm", bbm_intent)
    _stage(3, f"back to the {LONG} path for the next runs")
    restored = restore(topo, inv, flows)
    _detail(restored)
    _stage(4, "nothing moved: the same traffic, no reconfiguration (the fabric's own loss)")
    control = _measured(topo, fab, inv, args, "control", None)
    _stage(5, f"MBB via {TEMPORARY}: {move}")
    mbb_intent = Intent(flows=flows, to_path=SHORT, via=TEMPORARY, drain_s=DRAIN_S)
    mbb = _measured(topo, fab, inv, args, "mbb", mbb_intent)
    return Results(bbm=bbm, mbb=mbb, control=control), restored


Handler = Callable[[int, FrameType | None], object] | signal.Handlers


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


@contextmanager
def _signals(handler: Handler, *signums: signal.Signals) -> Iterator[None]:
    """``signums`` handled by ``handler`` inside, as before outside."""
    before = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def _demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    topo = load_topology(args.topology)
    flows = demo_flows(topo)
    if args.inventory is not None:
        fab = _running(topo)
        inv = load_inventory(args.inventory)
        _stage(1, f"fabric {topo.name} is up; reaching its devices through {inv.file}")
        results, restored = _runs(topo, fab, inv, args, flows)
    else:
        _stage(1, f"bringing up {topo.name} ({topo.file}) with its Polatis SCPI emulator")
        fab = fabric.up(topo, progress=_detail, seed=args.seed)
        try:
            results, restored = _runs(topo, fab, load_inventory(fab.state.inventory), args, flows)
        finally:
            _stage(6, f"tearing down {topo.name}")
            with _signals(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM):  # no half teardown
                fabric.down(topo.name)
    wall_s = time.monotonic() - started
    _stage(7, f"results: {_optical(topo)} reconfigured {LONG} -> {SHORT} under traffic")
    _say(report.table(results.runs))
    for line in report.explain(results, _hops(topo.paths[TEMPORARY])):
        _say(line)
    _say(f"Loss % depends on the run length ({PROBE_S} s of probe here): compare the gaps.")
    _say(f"Between the runs: {restored}.")
    if args.json is not None:
        doc = report.document(results, between_runs=restored, wall_s=wall_s)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    _say(f"demo done in {wall_s:.1f} s")
    return 0


def _running(topo: Topology) -> Fabric:
    """The fabric of ``topo`` that is already up (``--inventory``: the demo leaves it up)."""
    st = fabric_state.load(topo.name)
    if st is None or st.phase != "up":
        raise FabricError(
            f"--inventory: the demo runs on a fabric that is up: `reroute fabric up {topo.file}`"
        )
    return Fabric(state=st)


def _hops(path: TopoPath) -> str:
    return "-".join(h.node for h in path.hops)


def _run(args: argparse.Namespace) -> int:
    # SIGTERM unwinds like Ctrl-C, and Ctrl-C interrupts at once (also inside asyncio.run,
    # whose own handler only cancels the running task): either way the fabric comes down
    with _signals(_raise_interrupt, signal.SIGINT, signal.SIGTERM):
        return _demo(args)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


DESCRIPTION = """\
Break-before-make vs make-before-break across an optical reconfiguration, measured.

Brings up the fabric of --topology (default: seed 003's ngncs-ost testbed) with its Polatis
SCPI emulator, sends vm2 -> vm3 traffic on the long path (the sequence-numbered UDP probe at
--rate and an iperf3 TCP stream capped at --tcp-mbps, 100 ms reports), and reconfigures
ost1 under it to move the flows onto the short path: first BBM (traffic dark until the new
circuit locks), then MBB (traffic parked on the electrical temporary path while the new
circuit locks). In between: one unmeasured MBB reroute back to the long path, and a control
run of the same traffic with nothing reconfigured (the emulated fabric's own loss). Tears
the fabric down (also on errors and Ctrl-C) and prints the runs next to seed 003's numbers:
packets lost, longest gap, TCP retransmissions and throughput dip, reconfiguration times,
the emulator's drawn lock time. Needs root; takes about 20 s."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the ``reroute`` parser."""
    demo = sub.add_parser(
        "demo",
        help="BBM vs MBB across an optical reconfiguration, measured (needs root)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    default = ROOT / "topologies" / "ngncs-ost.yaml"
    demo.add_argument(
        "--topology", type=Path, default=default, metavar="FILE", help="default: ngncs-ost"
    )
    demo.add_argument(
        "--rate", type=_positive, default=5000, metavar="PPS", help="UDP probe rate, default 5000"
    )
    demo.add_argument(
        "--tcp-mbps", type=_positive, default=100, metavar="N", help="TCP cap, default 100 Mbit/s"
    )
    demo.add_argument("--json", type=Path, metavar="FILE", help="also write the numbers as JSON")
    demo.add_argument(
        "--seed", type=int, default=0, help="seed of the emulator's lock times (Table 4.3 draws)"
    )
    demo.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="reach the devices through FILE instead of the fabric's own inventory; the "
        "fabric must be up already (`reroute fabric up`) and is left up",
    )
    demo.set_defaults(func=_run)
