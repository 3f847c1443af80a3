"""Seed 003's optical-hybrid testbed (topologies/ngncs-ost.yaml) as a bench for repeated runs.

:func:`bench` brings the fabric up (its Polatis emulator draws lock times from ``seed``) and
always down. :func:`measure` is one repetition: vm2 -> vm3 traffic on the long path (the
UDP probe, an iperf3 TCP stream and a 20 ms ping), ost1 reconfigured under it to move the
flows to the short path by BBM or MBB (or nothing, a control), the flows put back on the
long path afterwards without traffic. It returns the repetition's raw document.
"""

from __future__ import annotations

import asyncio
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments import demo
from experiments.demo_report import RunNumbers, TcpNumbers, UdpNumbers
from experiments.runner import Say
from fabric import fabric
from fabric.fabric import Fabric
from fabric.run import in_netns, run
from fabric.traffic.iperf import IperfResult, run_iperf
from services.reroute.inventory import Inventory, load_inventory
from services.reroute.model import FlowSpec, Intent, Strategy
from services.reroute.planning.plan import StepKind
from services.reroute.topology import Topology, load_topology

TOPOLOGY = demo.ROOT / "topologies" / "ngncs-ost.yaml"
PING_INTERVAL_S = 0.02
RTT_WINDOW_MS = 1500.0  # "during the switch": from the request to this much later
STRATEGIES = ("bbm", "mbb", "control")


@dataclass(frozen=True, slots=True, kw_only=True)
class Bench:
    topo: Topology
    fab: Fabric
    inv: Inventory
    flows: tuple[FlowSpec, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Load:
    """The traffic of one repetition."""

    rate: int = 5000  # UDP probe, packets/s
    tcp_mbps: int = 100
    tcp_s: int = demo.TCP_S
    probe_s: float = demo.PROBE_S
    bystander: str | None = None  # a path whose own TCP stream runs alongside, never moved


@contextmanager
def bench(say: Say, *, seed: int, topology: Path = TOPOLOGY) -> Iterator[Bench]:
    """The demo fabric up, with its flows and inventory, for a series of measurements."""
    topo = load_topology(topology)
    flows = demo.demo_flows(topo)
    say(f"bringing up {topo.name} (lock-time seed {seed})")
    fab = fabric.up(topo, seed=seed)
    for kind, what in fab.state.peers.items():  # real Ryu, or its emulator (fabric up --ryu)
        say(f"{kind} switches: {what}")
    try:
        yield Bench(topo=topo, fab=fab, inv=load_inventory(fab.state.inventory), flows=flows)
    finally:
        say(f"tearing down {topo.name}")
        before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            fabric.down(topo.name)
        finally:
            for s, h in before.items():
                signal.signal(s, h)


def intent(b: Bench, strategy: str) -> Intent | None:
    """The intent of ``strategy`` (None: nothing moved)."""
    if strategy == "bbm":
        return Intent(flows=b.flows, to_path=demo.SHORT, strategy=Strategy.BBM)
    if strategy == "mbb":
        return Intent(flows=b.flows, to_path=demo.SHORT, via=demo.TEMPORARY, drain_s=demo.DRAIN_S)
    if strategy == "control":
        return None
    raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def measure(b: Bench, strategy: str, load: Load, say: Say) -> dict[str, Any]:
    """One repetition's raw document (see the module docstring)."""
    move = intent(b, strategy)
    long = b.topo.paths[demo.LONG]
    drops = demo.fabric_drops(b.fab)
    traffic = demo.Traffic(
        b.fab,
        long,
        rate=load.rate,
        tcp_mbps=load.tcp_mbps,
        tcp_s=load.tcp_s,
        probe_s=load.probe_s,
    )
    other = _Bystander(b, load)
    with _Ping(b.fab.host_ns(long.src), str(long.dst_ip)) as ping, other, traffic:
        time.sleep(demo.BASELINE_S)
        request_wall, request_ns = time.time(), time.monotonic_ns()
        done = None if move is None else asyncio.run(demo.reroute(b.topo, b.inv, move))
        if done is not None:
            request_ns = done.requested_ns
        probe, tcp = traffic.results()
    drops = demo.fabric_drops(b.fab) - drops
    numbers = RunNumbers(
        strategy=strategy,
        udp=UdpNumbers.from_probe(probe, request_ns=request_ns),
        tcp=TcpNumbers.from_iperf(tcp, demo.INTERVAL_S),
        timing=None if done is None else demo.timing(b.fab, done),
        fabric_drops=drops,
    )
    if done is not None:
        say(f"{strategy}: " + "; ".join(done.milestones()))
        demo.restore(b.topo, b.inv, b.flows)
    return {
        **numbers.to_dict(),
        "milestones": [] if done is None else done.milestones(),
        "circuits_ms": None if done is None else circuits_ms(done),
        "load": {"rate": load.rate, "tcp_mbps": load.tcp_mbps, "tcp_s": load.tcp_s},
        "tcp_offset_ms": (request_ns - traffic.tcp_started_ns) / 1e6,  # request, TCP's clock
        "probe_rate": _probe_rate(probe, request_ns),
        "rtt": ping.during(request_wall),
        "tcp_loss_pct": tcp_loss_pct(tcp),
        "bystander": other.numbers(request_ns),
        "peers": dict(b.fab.state.peers),  # what played the devices' peers (fabric.fabric.Peers)
    }


MSS = 1448  # bytes of payload per segment on these 1500-byte links (timestamps on)


def tcp_loss_pct(result: IperfResult) -> float:
    """Seed 003's packet loss: segments retransmitted / segments sent."""
    segments = result.sent_bps * result.duration_s / 8 / MSS
    return 100.0 * (result.retransmits or 0) / segments if segments else 0.0


class _Bystander:
    """An iperf3 TCP stream on ``load.bystander``'s path (its own port), in a thread, for
    the length of a repetition; nothing when there is no bystander."""

    PORT = 5202

    def __init__(self, b: Bench, load: Load) -> None:
        self.b, self.load = b, load
        self.started_ns = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bystander")
        self._future: Future[IperfResult] | None = None

    def __enter__(self) -> _Bystander:
        if self.load.bystander is not None:
            path = self.b.topo.paths[self.load.bystander]
            self.started_ns = time.monotonic_ns()
            self._future = self._pool.submit(
                run_iperf,
                str(path.dst_ip),
                port=self.PORT,
                duration_s=self.load.tcp_s,
                bitrate_bps=self.load.tcp_mbps * 1_000_000,
                interval_s=demo.INTERVAL_S,
                server_netns=self.b.fab.host_ns(path.dst),
                client_netns=self.b.fab.host_ns(path.src),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def numbers(self, request_ns: int) -> dict[str, Any] | None:
        """The bystander's numbers around ``request_ns``, or None if it did not run."""
        if self._future is None:
            return None
        result = self._future.result(timeout=self.load.tcp_s + 20)
        return {
            "path": self.load.bystander,
            "tcp": TcpNumbers.from_iperf(result, demo.INTERVAL_S).to_dict(),
            "tcp_loss_pct": tcp_loss_pct(result),
            "tcp_offset_ms": (request_ns - self.started_ns) / 1e6,
        }


def circuits_ms(done: demo.Done) -> float | None:
    """When the optical switch's cross-connects were changed (ms after the request)."""
    steps = enumerate(done.plan.steps(), start=1)
    return next((done.ended_ms[i] for i, s in steps if s.kind is StepKind.CIRCUITS), None)


def _probe_rate(probe: dict[str, Any], request_ns: int) -> dict[str, Any]:
    """The probe's delivered rate (packets/s per bin), with the request on its time axis."""
    rate = probe["rate"]
    return {
        "bin_ms": rate["bin_ms"],
        "request_ms": (request_ns - int(rate["start_ns"])) / 1e6,
        "counts": rate["counts"],
    }


PING_LINE = re.compile(r"^\[(\d+\.\d+)\] .*icmp_seq=(\d+) .*time=([\d.]+) ms")


class _Ping:
    """``ping -D -i 0.02`` in a namespace for the length of a repetition."""

    def __init__(self, ns: str, dst: str) -> None:
        self.cmd = in_netns(ns, ["ping", "-D", "-n", "-i", str(PING_INTERVAL_S), dst])
        self.proc: subprocess.Popen[str] | None = None
        self.output = ""

    def __enter__(self) -> _Ping:
        self.proc = subprocess.Popen(
            self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.output, _ = self.proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.output, _ = self.proc.communicate()

    def during(self, request_wall: float) -> dict[str, Any]:
        """RTTs of the pings sent from the request to ``RTT_WINDOW_MS`` later, and before."""
        return rtt_summary(parse_ping(self.output), request_wall)


def parse_ping(output: str) -> list[tuple[float, int, float]]:
    """``(wall time of the reply, icmp_seq, rtt ms)`` of each reply ``ping -D`` printed."""
    found = (PING_LINE.match(line) for line in output.splitlines())
    return [(float(m[1]), int(m[2]), float(m[3])) for m in found if m]


def rtt_summary(replies: list[tuple[float, int, float]], request_wall: float) -> dict[str, Any]:
    """The RTT before the request and its maximum just after, from ping replies."""
    window = RTT_WINDOW_MS / 1000
    before = [r for t, _, r in replies if t < request_wall]
    during = [r for t, _, r in replies if request_wall <= t - r / 1000 < request_wall + window]
    return {
        "before_median_ms": statistics.median(before) if before else None,
        "during_max_ms": max(during, default=None),
        "during_median_ms": statistics.median(during) if during else None,
        "during_replies": len(during),
        "expected_replies": round(window / PING_INTERVAL_S),
    }


def set_rto_min(b: Bench, ms: int) -> str:
    """TCP ``rto_min`` of vm2's route to vm3 (the sender's side): ``ip route ... rto_min``
    (iproute2 locks the metric, which the kernel needs to use it). The route as read back."""
    long = b.topo.paths[demo.LONG]
    ns, dst = b.fab.host_ns(long.src), f"{long.dst_ip}/32"
    run(["ip", "route", "replace", dst, "dev", "eth0", "rto_min", f"{ms}ms"], ns=ns)
    return run(["ip", "route", "show", dst], ns=ns).strip()
