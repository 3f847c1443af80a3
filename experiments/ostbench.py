"""Seed 003's optical-hybrid testbed (topologies/ngncs-ost.yaml) as a bench for repeated runs.

:func:`bench` brings the fabric up (its Polatis emulator draws lock times from ``seed``) and
always down. :func:`measure` is one repetition: vm2 -> vm3 traffic on the long path (the
UDP probe, an iperf3 TCP stream and a ping), tcpdump at vm2 and vm3 (seed 003's own
metrics, :mod:`experiments.capture`), ost1 reconfigured under it to move the flows to the
short path by BBM or MBB (or nothing, a control), the flows put back on the long path
afterwards without traffic. It returns the repetition's raw document. The traffic's
parameters are a :class:`BenchConfig` (experiments/configs/).

Lock times: :func:`paired_lock_ms` draws one time from seed 003 Table 4.3 per pair of
repetitions, stratified over the table's quantiles (:func:`lock_quantile`), and
:func:`set_lock` fixes the emulator to it, so that BBM and MBB of pair i (and every
backend's pair i) meet the same lock time and their difference is the strategy's.
"""

from __future__ import annotations

import random
import re
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from emulators.polatis.emulator import TABLE_4_3_KNOTS, quantile
from experiments import audit, capture, measuring
from experiments.config import Config
from experiments.demo_report import RunNumbers, TcpNumbers, UdpNumbers
from experiments.runner import Say
from fabric import drops, fabric, lines, signals
from fabric.errors import FabricError
from fabric.fabric import Fabric, veth_name
from fabric.kinds import optical_controls
from fabric.run import in_netns, run
from fabric.traffic.iperf import DEFAULT_PORT, IperfResult, run_iperf
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.inventory import Inventory, load_inventory
from services.reroute.model.topology import Endpoint, Topology, load_topology
from services.reroute.planning.plan import StepKind

TOPOLOGY = measuring.ROOT / "topologies" / "ngncs-ost.yaml"
STRATEGIES = ("bbm", "mbb", "control")


class BenchConfig(Config):
    """The traffic of a repetition on seed 003's testbed (experiments/configs/*.yaml)."""

    probe_pps: int = Field(5000, ge=100, description="UDP probe, packets/s")
    probe_s: float = Field(4.0, gt=0, description="UDP probe duration")
    tcp_mbps: int = Field(100, ge=1, description="iperf3 TCP cap, Mbit/s")
    tcp_s: int = Field(7, ge=2, description="iperf3 TCP duration (started first)")
    baseline_s: float = Field(0.8, ge=0.2, description="the request, this long into the probe")
    switch_at_s: float | None = Field(
        None,
        gt=0,
        description="the request this long after the TCP stream started (seed 003: 10 s into"
        " its 20 s stream), instead of baseline_s into the probe",
    )
    ping_interval_s: float = Field(0.02, ge=0.002, description="ping's interval")
    rtt_window_ms: float = Field(1500, gt=0, description="'during the switch': request +")
    gap_window_ms: float = Field(3000, gt=0, description="unavailability looked for until")
    capture: bool = Field(True, description="tcpdump at sender and receiver (seed's metrics)")
    line_mbps: int | None = Field(
        None, ge=1, description="the line rate: tbf on br3 -> vm3 (None: the fabric's own)"
    )
    congestion: str = Field(
        "cubic", pattern=r"^[a-z0-9_]+$", description="the TCP senders' congestion control"
    )

    @model_validator(mode="after")
    def _switch_inside_the_stream(self) -> BenchConfig:
        if self.switch_at_s is not None and self.switch_at_s + 1 > self.tcp_s:
            raise ValueError(
                f"switch_at_s ({self.switch_at_s:g}) must leave at least 1 s of the"
                f" {self.tcp_s} s TCP stream (tcp_s) after the request"
            )
        if self.switch_at_s is not None and self.switch_at_s >= self.probe_s:
            raise ValueError(
                f"the probe (probe_s {self.probe_s:g} s, started with the stream) must outlast"
                f" the request at switch_at_s {self.switch_at_s:g} s"
            )
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class Bench:
    topo: Topology
    fab: Fabric
    inv: Inventory
    flows: tuple[FlowSpec, ...]
    congestion: str = "cubic"  # the TCP senders' congestion control (iperf3 -C)


@contextmanager
def bench(
    say: Say,
    *,
    seed: int,
    topology: Path = TOPOLOGY,
    congestion: str = "cubic",
    line_mbps: int | None = None,
) -> Iterator[Bench]:
    """The demo fabric up, with its flows and inventory, for a series of measurements whose
    TCP senders use ``congestion``, vm3's access link capped at ``line_mbps`` (``cap_line``;
    None: the fabric's own rate)."""
    topo = load_topology(topology)
    flows = measuring.demo_flows(topo)
    say(f"bringing up {topo.name} (lock-time seed {seed})")
    fab = fabric.up(topo, seed=seed)
    for kind, what in fab.state.peers.items():  # real Ryu, or its emulator (fabric up --ryu)
        say(f"{kind} switches: {what}")
    try:
        inv = load_inventory(fab.state.inventory)
        b = Bench(topo=topo, fab=fab, inv=inv, flows=flows, congestion=congestion)
        if line_mbps is not None:
            say(cap_line(b, line_mbps))
        yield b
    finally:
        say(f"tearing down {topo.name}")
        with signals.shielded():
            fabric.down(topo.name)


LINE = Endpoint(node="br3", port="p1")  # br3 -> vm3: every path's last link


def cap_line(b: Bench, mbps: int) -> str:
    """vm3's access link (every path's last) capped at ``mbps`` with tbf, as the seed's
    testbed's links had a line rate (10 Gbit/s): a stream that stalled cannot catch up above
    it (:func:`fabric.lines.cap`: its queue is what drops, counted). What was capped, for
    the log."""
    packets = lines.cap(b.fab.state.fabric_ns, veth_name(LINE), mbps, burst_kb=32)
    return f"line rate: {LINE} at {mbps} Mbit/s (queue {packets} packets)"


def intent(b: Bench, strategy: str, *, to: str = measuring.SHORT) -> Intent | None:
    """The intent of ``strategy`` onto path ``to`` (None: nothing moved). MBB parks the
    traffic on the temporary path when the move reconfigures the optical switch."""
    if strategy == "bbm":
        return Intent(flows=b.flows, to_path=to, strategy=Strategy.BBM)
    if strategy == "mbb":
        via = measuring.TEMPORARY if to == measuring.SHORT else None
        return Intent(flows=b.flows, to_path=to, via=via, drain_s=measuring.DRAIN_S)
    if strategy == "control":
        return None
    raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def van_der_corput(i: int) -> float:
    """The ``i``-th point (from 0) of the base-2 van der Corput sequence: i's binary digits
    mirrored behind the point (0, 1/2, 1/4, 3/4, 1/8, ...). Its first 2^k points are one in
    each 1/2^k of [0, 1)."""
    u, half = 0.0, 0.5
    while i:
        u += half * (i & 1)
        i >>= 1
        half /= 2
    return u


def lock_quantile(seed: int, pair: int) -> float:
    """Where in Table 4.3's distribution pair ``pair`` (from 1) draws: the van der Corput
    point of the pair, rotated by one uniform draw of ``seed`` (mod 1). Stratified: pairs 1
    to 2^k meet each 1/2^k of the distribution exactly once (the first 4 one per quartile,
    so a quarter of them in the upper mode, where independent draws put 19 of 40 in one
    run), any n pairs are within a few of n / 2^k per stratum, and each pair alone is still
    a uniform draw (the rotation), so the mean is unbiased."""
    shift = random.Random(seed * 100_003).random()
    return (van_der_corput(pair - 1) + shift) % 1.0


def paired_lock_ms(seed: int, pair: int) -> float:
    """A lock time from seed 003 Table 4.3 for pair ``pair`` of a series (stratified,
    :func:`lock_quantile`): the same for every repetition of that pair (BBM and MBB, every
    backend), whatever ran before, and for any number of runs (a resumed or extended
    series draws what the uninterrupted one would have)."""
    return round(quantile(TABLE_4_3_KNOTS, lock_quantile(seed, pair)), 1)


def set_lock(b: Bench, lock: str | float) -> None:
    """The optical emulators' lock model from now on: ``table`` (each connection draws from
    seed 003 Table 4.3) or a fixed time in ms (emulator-only SCPI ``:EMUL:LOCK``)."""
    for control in optical_controls(b.fab.state).values():
        control.set_lock(None if lock == "table" else float(lock))


def measure(
    b: Bench,
    strategy: str,
    cfg: BenchConfig,
    say: Say,
    *,
    frm: str = measuring.LONG,
    to: str = measuring.SHORT,
    bystander: str | None = None,
) -> dict[str, Any]:
    """One repetition's raw document (see the module docstring): the flows moved from
    path ``frm`` to ``to`` under traffic (back to ``long`` afterwards when ``to`` is the
    short circuit)."""
    with measuring.Road(b.topo, b.inv) as road:  # the move and the restore: one road each
        return _measure(b, road, strategy, cfg, say, frm=frm, to=to, bystander=bystander)


def _measure(
    b: Bench,
    road: measuring.Road,
    strategy: str,
    cfg: BenchConfig,
    say: Say,
    *,
    frm: str = measuring.LONG,
    to: str = measuring.SHORT,
    bystander: str | None = None,
) -> dict[str, Any]:
    """One repetition on ``road`` (``measure``)."""
    move = intent(b, strategy, to=to)
    path = b.topo.paths[frm]
    before = measuring.drops(b.fab)
    resent = drops.needless_resends(b.fab.host_ns(path.src))
    traffic = measuring.Traffic(
        b.fab,
        path,
        rate=cfg.probe_pps,
        tcp_mbps=cfg.tcp_mbps,
        tcp_s=cfg.tcp_s,
        probe_s=cfg.probe_s,
        congestion=b.congestion,
    )
    other = _Bystander(b, cfg, bystander)
    with tempfile.TemporaryDirectory(prefix="reroute-cap-") as tmpdir:
        dumps = _captures(b, path, Path(tmpdir), cfg.capture)
        with ExitStack() as stack:
            for d in dumps:
                stack.enter_context(d)
            ping = stack.enter_context(
                _Ping(b.fab.host_ns(path.src), str(path.dst_ip), cfg.ping_interval_s)
            )
            stack.enter_context(other)
            stack.enter_context(traffic)
            time.sleep(_until_switch(cfg, traffic.tcp_started_ns))
            request_wall, request_ns = time.time(), time.monotonic_ns()
            done = None if move is None else road.reroute(move)
            if done is not None:
                request_ns = done.requested_ns
            probe, tcp = traffic.results()
        seen = None  # the ping and the captures have ended: their files are complete
        if dumps:
            seen = capture.analyse(
                dumps[0].file,
                dumps[1].file,
                port=DEFAULT_PORT,
                request_t=request_wall,
                rtt_window_s=cfg.rtt_window_ms / 1000,
                gap_window_s=cfg.gap_window_ms / 1000,
                dropped=(dumps[0].dropped, dumps[1].dropped),
            )
            hosts = (path.src, path.dst)
            kept = [audit.keep(d.file, h) for d, h in zip(dumps, hosts, strict=True)]
            if all(kept):
                seen["pcaps"] = kept
    dropped = measuring.drops(b.fab) - before
    needless = drops.needless_resends(b.fab.host_ns(path.src)) - resent
    numbers = RunNumbers(
        strategy=strategy,
        udp=UdpNumbers.from_probe(probe, request_ns=request_ns),
        tcp=TcpNumbers.from_iperf(tcp, measuring.INTERVAL_S, needless=needless),
        timing=None if done is None else measuring.timing(b.fab, done),
        fabric_drops=dropped.sockets,
        line_drops=dropped.queues,
        send_failures=dropped.send_failures,
        other_drops=measuring.other_drops(dropped, probe),
    )
    if done is not None:
        say(f"{strategy}: " + "; ".join(done.milestones()))
        if to == measuring.SHORT:
            measuring.restore(road, b.flows)
    return {
        **numbers.to_dict(),
        "moved": [frm, to],
        "milestones": [] if done is None else done.milestones(),
        "circuits_ms": None if done is None else circuits_ms(done),
        "tcp_offset_ms": (request_ns - traffic.tcp_started_ns) / 1e6,  # request, TCP's clock
        "probe_rate": _probe_rate(probe, request_ns),
        "rtt": ping.during(request_wall, cfg.rtt_window_ms),
        "tcp_loss_pct": tcp_loss_pct(tcp),
        "congestion": b.congestion,
        "capture": seen,
        "bystander": other.numbers(request_ns),
        "peers": dict(b.fab.state.peers),  # what played the kinds' peers (fabric up --ryu, ...)
    }


def when_switched(cfg: Mapping[str, Any]) -> str:
    """When a recorded configuration requested the reconfiguration, in words."""
    at = cfg.get("switch_at_s")
    if at is not None:
        return f"{at:g} s into the {cfg.get('tcp_s', 7)} s TCP stream"
    return f"{cfg.get('baseline_s', 0.8):g} s into the probe"


def line_said(cfg: Mapping[str, Any]) -> str:
    """The line rate a recorded configuration capped vm3's access link at, in words."""
    if "line_mbps" not in cfg:
        return "vm3's access link not capped (made before the line cap: the fabric's own rate)"
    line = cfg["line_mbps"]
    if line is None:
        return "vm3's access link not capped (the fabric's own rate)"
    return f"vm3's access link capped at a line rate of {line} Mbit/s (tbf)"


def _until_switch(cfg: BenchConfig, tcp_started_ns: int) -> float:
    """Seconds to wait before the request: to ``switch_at_s`` after the TCP stream started,
    or ``baseline_s`` (the probe has just started)."""
    if cfg.switch_at_s is None:
        return cfg.baseline_s
    return max(0.0, cfg.switch_at_s - (time.monotonic_ns() - tcp_started_ns) / 1e9)


def _captures(b: Bench, path: Any, tmp: Path, wanted: bool) -> list[capture.Tcpdump]:
    """tcpdump at the sender and the receiver of ``path``'s TCP stream (none if not
    ``wanted``)."""
    if not wanted:
        return []
    if not capture.available():
        raise FabricError("tcpdump is not installed (run `make setup`), or set capture: false")
    bpf = f"tcp port {DEFAULT_PORT}"
    return [
        capture.Tcpdump(b.fab.host_ns(host), "eth0", tmp / f"{host}.pcap", bpf)
        for host in (path.src, path.dst)
    ]


MSS = 1448  # bytes of payload per segment on these 1500-byte links (timestamps on)


def tcp_loss_pct(result: IperfResult) -> float:
    """Seed 003's packet loss: segments retransmitted / segments sent."""
    segments = result.sent_bps * result.duration_s / 8 / MSS
    return 100.0 * (result.retransmits or 0) / segments if segments else 0.0


class _Bystander:
    """An iperf3 TCP stream on ``path`` (its own port), in a thread, for
    the length of a repetition; nothing when there is no bystander."""

    PORT = 5202

    def __init__(self, b: Bench, cfg: BenchConfig, path: str | None) -> None:
        self.b, self.cfg, self.path = b, cfg, path
        self.started_ns = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bystander")
        self._future: Future[IperfResult] | None = None

    def __enter__(self) -> _Bystander:
        if self.path is not None:
            path = self.b.topo.paths[self.path]
            self.started_ns = time.monotonic_ns()
            self._future = self._pool.submit(
                run_iperf,
                str(path.dst_ip),
                port=self.PORT,
                duration_s=self.cfg.tcp_s,
                bitrate_bps=self.cfg.tcp_mbps * 1_000_000,
                interval_s=measuring.INTERVAL_S,
                server_netns=self.b.fab.host_ns(path.dst),
                client_netns=self.b.fab.host_ns(path.src),
                congestion=self.b.congestion,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def numbers(self, request_ns: int) -> dict[str, Any] | None:
        """The bystander's numbers around ``request_ns``, or None if it did not run."""
        if self._future is None:
            return None
        result = self._future.result(timeout=self.cfg.tcp_s + 20)
        return {
            "path": self.path,
            "tcp": TcpNumbers.from_iperf(result, measuring.INTERVAL_S).to_dict(),
            "tcp_loss_pct": tcp_loss_pct(result),
            "tcp_offset_ms": (request_ns - self.started_ns) / 1e6,
        }


def circuits_ms(done: measuring.Done) -> float | None:
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

    def __init__(self, ns: str, dst: str, interval_s: float) -> None:
        self.interval_s = interval_s
        self.cmd = in_netns(ns, ["ping", "-D", "-n", "-i", f"{interval_s:g}", dst])
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

    def during(self, request_wall: float, window_ms: float) -> dict[str, Any]:
        """RTTs of the pings sent from the request to ``window_ms`` later, and before."""
        return rtt_summary(parse_ping(self.output), request_wall, window_ms, self.interval_s)


def parse_ping(output: str) -> list[tuple[float, int, float]]:
    """``(wall time of the reply, icmp_seq, rtt ms)`` of each reply ``ping -D`` printed."""
    found = (PING_LINE.match(line) for line in output.splitlines())
    return [(float(m[1]), int(m[2]), float(m[3])) for m in found if m]


def rtt_summary(
    replies: list[tuple[float, int, float]],
    request_wall: float,
    window_ms: float = 1500.0,
    interval_s: float = 0.02,
) -> dict[str, Any]:
    """The RTT before the request and its maximum just after, from ping replies (a ping
    that got no reply is not in them: see ``during_replies``)."""
    window = window_ms / 1000
    before = [r for t, _, r in replies if t < request_wall]
    during = [r for t, _, r in replies if request_wall <= t - r / 1000 < request_wall + window]
    return {
        "before_median_ms": statistics.median(before) if before else None,
        "during_max_ms": max(during, default=None),
        "during_median_ms": statistics.median(during) if during else None,
        "during_replies": len(during),
        "expected_replies": round(window / interval_s),
    }


def set_rto_min(b: Bench, ms: int) -> str:
    """TCP ``rto_min`` of vm2's route to vm3 (the sender's side): ``ip route ... rto_min``
    (iproute2 locks the metric, which the kernel needs to use it). The route as read back."""
    long = b.topo.paths[measuring.LONG]
    ns, dst = b.fab.host_ns(long.src), f"{long.dst_ip}/32"
    run(["ip", "route", "replace", dst, "dev", "eth0", "rto_min", f"{ms}ms"], ns=ns)
    return run(["ip", "route", "show", dst], ns=ns).strip()
