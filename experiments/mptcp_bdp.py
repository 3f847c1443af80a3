"""``mptcp-bdp``: seed 002 Fig. 1, MPTCP vs TCP with a large bandwidth-delay product, without
and with UDP background traffic, congestion windows traced (``ss -ti``).

On ``topologies/mptcp-bdp.yaml`` two disjoint paths a and b join h1 and h2, each through
its own delay line (25 ms each way) and capped (tbf) at ``path_mbps``, and so is h2's access
link, which both cross: MPTCP's two paths together have the capacity TCP's one has
(``path_mbps``), so the comparison is of the protocols, not of one path against two. With
unpaced senders the bandwidth-delay product is large (100 Mbit/s x 50 ms = 625 kB, against
~3 kB on seed 003's testbed; :func:`bdp_kb`). Seed 002 states neither its RTT nor its link
rate (the GÉANT OpenFlow testbed's; only the 200 Mbit/s UDP background is given): these are
chosen here, and the report says so. MPTCP has a subflow on
each path (h1's second address on b), TCP runs on a only. Path a's first link fails for the
case's time. With ``udp_mbps`` > 0 an iperf3 UDP stream bg1 -> bg2 loads path b, so the
subflow that survives has less capacity (the seed's 200 Mbit/s background). Parameters:
``experiments/configs/mptcp-bdp.yaml``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import Field

from experiments.config import Config, typed
from experiments.mptcp import (
    Case,
    Stream,
    case_sections,
    delivered_mb,
    mptcp_missing,
    phase_mbps,
    plan_cases,
    run_stream,
    second_address,
    versus,
)
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Skipped, Written
from fabric import fabric, lines
from fabric.fabric import Fabric, push_flows, veth_name
from fabric.forwarding import ofctl_line
from fabric.traffic.iperf import IperfResult, Protocol, run_iperf
from services.reroute.model.intent import FlowSpec
from services.reroute.model.topology import Endpoint, Topology, load_topology
from services.reroute.rules import path_rules

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = ROOT / "topologies" / "mptcp-bdp.yaml"
SECOND_ADDRESS = "10.30.0.11"
FAILED = Endpoint(node="s1", port="p2")  # s1 -> lh1: path a only
ACCESS = Endpoint(node="s2", port="p1")  # s2 -> h2: every path's last link
CAPPED = (Endpoint(node="s1", port="p2"), Endpoint(node="s1", port="p3"), ACCESS)
UDP_PORT = 5202
SEED_SAYS = {  # case: seed 002 Fig. 1's words (it gives no number), which plot
    "bdp-fail-10s": (
        "no number: MPTCP 'not responsive enough', 'longer flow completion times'",
        "002 Fig. 1 (left)",
    ),
    "bdp-udp-fail-10s": ("no number: 'MPTCP outperforms single TCP'", "002 Fig. 1 (right)"),
}


class BdpCase(Case):
    udp_mbps: float = Field(0.0, ge=0, description="UDP background on path b")


class BdpConfig(Config):
    rate_mbps: float = Field(0, ge=0, description="the sender's pace; 0: unpaced (bulk)")
    path_mbps: int = Field(
        100, ge=1, description="each path's cap and h2's access link's (tbf): MPTCP's and TCP's"
    )
    cwnd_interval_s: float = Field(0.1, gt=0, description="ss -ti sampling")
    congestion: str = Field(
        "cubic", pattern=r"^[a-z0-9_]+$", description="the TCP senders' congestion control"
    )
    cases: dict[str, BdpCase]
    only: list[str] = Field([], description="run only these cases (default: every one)")


class MptcpBdp:
    name = "mptcp-bdp"
    title = "MPTCP vs TCP, large bandwidth-delay product, with UDP background; seed 002 Fig. 1"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = BdpConfig

    def plan(self, opts: Options) -> list[Rep]:
        cfg = typed(opts.config, BdpConfig)
        return plan_cases(cfg.cases, cfg.runs, cfg.only)

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        why = mptcp_missing()
        if why is not None:
            raise Skipped(f"mptcp-bdp skipped: {why}")
        return _fabric(say, typed(opts.config, BdpConfig))

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        topo, fab, cfg = session
        p = rep.params
        case = BdpCase.model_validate({k: p[k] for k in BdpCase.model_fields})
        a = topo.paths["a"]
        spec = Stream(
            src_ns=fab.host_ns(a.src),
            dst_ns=fab.host_ns(a.dst),
            dst_ip=str(a.dst_ip),
            fabric_ns=fab.state.fabric_ns,
            link=veth_name(FAILED),
            proto=str(p["proto"]),
            case=case,
            rate_mbps=cfg.rate_mbps,
            cwnd_interval_s=cfg.cwnd_interval_s,
            congestion=cfg.congestion,
        )
        beside = _Background(topo, fab, case.udp_mbps, case.stream_s)
        doc = run_stream(spec, beside=beside)
        say(f"{rep.key}: {doc['subflows']} subflow(s), background {case.udp_mbps:g} Mbit/s")
        return doc | {
            "congestion": cfg.congestion,
            "path_mbps": cfg.path_mbps,
            "access_capped": ACCESS in CAPPED,
            "rtt_ms": 2 * topo.paths["a"].delay_ms,
            "bdp_kb": bdp_kb(topo, cfg.path_mbps),
            "udp_mbps": case.udp_mbps,
            "background": beside.numbers(),
        }

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        cfg: dict[str, Any] = next(
            (r["config"] for r in reversed(list(raws.values())) if "config" in r), {}
        )
        body = "\n".join(
            [
                _setup(raws, cfg),
                *case_sections(raws, out, "mptcp_bdp"),
            ]
        )
        return Written(conclusions=bdp_conclusions(raws), body=body)

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 002 Fig. 1 says which protocol did better, without a number: that beside
        ours, from each case's table."""
        metrics: list[tuple[str, Callable[[Raw], float], int]] = [
            ("goodput during the failure (Mbit/s)", partial(phase_mbps, phase="during"), 1),
            ("delivered in the whole stream (MB)", delivered_mb, 1),
        ]
        rows = []
        for case, (said, source) in SEED_SAYS.items():
            runs = [r for r in raws.values() if r["params"]["case"] == case]
            if not runs:
                continue
            for metric, get, digits in metrics:
                ours, n = versus(runs, get, digits)
                rows.append(
                    SeedRow(
                        metric=f"{case}: {metric}, MPTCP / TCP",
                        source=source,
                        seed=said,
                        seed_n="2 (Exp#1, Exp#2)",
                        ours=ours,
                        ours_n=n,
                        note=_seed_note(runs[0]),
                    )
                )
        return rows


def _seed_note(r: Raw) -> str:
    """How a case's setting differs from seed 002's."""
    udp = float(r.get("udp_mbps") or 0)
    background = f"; UDP background: the seed's 200 Mbit/s, ours {udp:g}" if udp else ""
    return (
        f"the seed states neither RTT nor link rate, ours {r.get('rtt_ms', '-')} ms and"
        f" {r.get('path_mbps', '-')} Mbit/s per path (chosen here); the seed times a transfer"
        f" to its end, ours a {float(r['stream_s']):g} s bulk stream{background}"
    )


def bdp_kb(topo: Topology, mbps: float) -> float:
    """The bandwidth-delay product (kB) of ``mbps`` over path a's round trip (its delay
    lines both ways)."""
    rtt_s = 2 * topo.paths["a"].delay_ms / 1000
    return mbps * 1e6 * rtt_s / 8 / 1000


def _setup(raws: Mapping[str, Raw], cfg: Mapping[str, Any]) -> str:
    mbps = float(cfg.get("path_mbps", 50))
    recorded = [float(r["rtt_ms"]) for r in raws.values() if r.get("rtt_ms") is not None]
    rtt = recorded[-1] if recorded else 20.0  # runs before it was recorded: 10 ms each way
    bdp = mbps * 1e6 * rtt / 1000 / 8 / 1000
    shared = (
        f" and so is h2's access link, which both paths cross: MPTCP's two paths together"
        f" have the {mbps:g} Mbit/s TCP's one has"
        if any(r.get("access_capped") for r in raws.values())
        else " (h2's access link is not: MPTCP had twice TCP's capacity in these runs)"
    )
    return (
        f"h1 -> h2 over two disjoint paths, each through a delay line ({rtt / 2:g} ms each"
        f" way) capped at {mbps:g} Mbit/s{shared}; bandwidth-delay product {mbps:g} Mbit/s x"
        f" {rtt:g} ms = {bdp:.0f} kB (seed 002 states neither its RTT nor its link rate, only"
        " the 200 Mbit/s background: these are chosen here, not the seed's). An"
        " unpaced bulk stream, MPTCP with a subflow per path or TCP on path a; path a's first"
        " link down for the case's time. With UDP background, iperf3 UDP bg1 -> bg2 loads"
        " path b (seed 002: 200 Mbit/s). The congestion windows are the sender's `ss -ti`"
        f" every {cfg.get('cwnd_interval_s', 0.1)} s, one line per subflow.\n"
    )


def _during_cwnd(r: Raw) -> list[float]:
    """Each socket's median congestion window while the link was down."""
    down, up = float(r["down_s"]), float(r["up_s"])
    found = []
    for samples in (r.get("cwnd") or {}).values():
        inside = sorted(s[1] for s in samples if down + 0.5 <= s[0] <= up)
        if inside:
            found.append(float(inside[len(inside) // 2]))
    return found


def bdp_conclusions(raws: Mapping[str, Raw]) -> str:
    """Two sentences: what each protocol carried and delivered, and the windows behind it."""
    parts, windows = [], []
    for case in dict.fromkeys(r["params"]["case"] for r in raws.values()):
        runs = {p: [r for r in raws.values() if r["params"]["case"] == case and r["proto"] == p]
                for p in ("mptcp", "tcp")}  # fmt: skip
        if not runs["mptcp"] or not runs["tcp"]:
            continue
        m = {p: statistics.fmean(phase_mbps(r, "during") for r in rs) for p, rs in runs.items()}
        d = {p: statistics.fmean(delivered_mb(r) for r in rs) for p, rs in runs.items()}
        parts.append(
            f"{case}: {m['mptcp']:.1f} against {m['tcp']:.1f} Mbit/s during the failure,"
            f" {d['mptcp']:.0f} against {d['tcp']:.0f} MB over the stream"
        )
        mp = [max(w) for r in runs["mptcp"] if (w := _during_cwnd(r))]
        tc = [min(w) for r in runs["tcp"] if (w := _during_cwnd(r))]
        if mp and tc:
            windows.append(f"{statistics.fmean(mp):.0f} against {statistics.fmean(tc):.0f}")
    if not parts:
        return "Not enough runs of both protocols to conclude anything."
    why = (
        "; the median congestion window while the link was down, the surviving MPTCP"
        f" subflow's against TCP's: {', '.join(windows)} segments (TCP backs off on its"
        " retransmission timer with a window of 1, the subflow on the other path keeps"
        " growing)"
        if windows
        else ""
    )
    return (
        "MPTCP against single-path TCP through a 10 s failure at a large bandwidth-delay"
        f" product: {'; '.join(parts)}. With the UDP background the surviving path has less"
        f" to give, as in seed 002's right-hand plot{why}."
    )


@contextmanager
def _fabric(say: Say, cfg: BdpConfig) -> Iterator[tuple[Topology, Fabric, BdpConfig]]:
    topo = load_topology(TOPOLOGY)
    say(f"bringing up {topo.name}")
    fab = fabric.up(topo)
    try:
        for end in CAPPED:
            packets = lines.cap(fab.state.fabric_ns, veth_name(end), cfg.path_mbps, burst_kb=32)
        a, b = topo.paths["a"], topo.paths["b"]
        second_address(fab.host_ns(a.src), fab.host_ns(a.dst), SECOND_ADDRESS)
        flow = FlowSpec.parse(f"{SECOND_ADDRESS}>{b.dst_ip}")
        for bridge, rules in path_rules(topo, b, [flow]).items():
            push_flows(fab.ovs, bridge, [ofctl_line(r) for r in rules], "OpenFlow13")
        say(
            f"paths and h2's access capped at {cfg.path_mbps} Mbit/s (BDP"
            f" {bdp_kb(topo, cfg.path_mbps):.0f} kB, queues of {packets} packets);"
            f" {SECOND_ADDRESS} -> {b.dst_ip} on b"
        )
        yield topo, fab, cfg
    finally:
        say(f"tearing down {topo.name}")
        fabric.down(topo.name)


class _Background:
    """iperf3 UDP bg1 -> bg2 at ``mbps`` for the stream's length (nothing at 0)."""

    def __init__(self, topo: Topology, fab: Fabric, mbps: float, seconds: float) -> None:
        self.path = topo.paths["background"]
        self.fab, self.mbps, self.seconds = fab, mbps, max(1, round(seconds))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="udp-background")
        self._future: Future[IperfResult] | None = None

    def __enter__(self) -> _Background:
        if self.mbps > 0:
            self._future = self._pool.submit(
                run_iperf,
                str(self.path.dst_ip),
                port=UDP_PORT,
                protocol=Protocol.UDP,
                duration_s=self.seconds,
                bitrate_bps=int(self.mbps * 1e6),
                server_netns=self.fab.host_ns(self.path.dst),
                client_netns=self.fab.host_ns(self.path.src),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def numbers(self) -> dict[str, Any] | None:
        """What the background sent (None if there was none)."""
        if self._future is None:
            return None
        try:
            r = self._future.result(timeout=self.seconds + 20)
        except Exception as exc:  # its failure is said in the raw file, not fatal
            return {"error": str(exc)}
        return {"sent_mbps": r.sent_bps / 1e6, "duration_s": r.duration_s}
