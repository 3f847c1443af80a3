"""``bandwidth-steering``: seed 003 section 4.3, two streams, one steered onto a new circuit.

vm2 -> vm3 (the long path) and vm1 -> vm4 (the direct path) both cross the electrical link
br1 -> br4, capped here (tbf) below their sum: a bottleneck, as the seed forced 20 Gbit/s of
traffic through 10. Reconfiguring ost1 steers vm2 -> vm3 onto the new short circuit and off
the bottleneck; vm1 -> vm4 is never moved. BBM vs MBB: both streams' throughput and loss
(retransmitted / sent), and the steered stream's seed metrics from packet captures at vm2
and vm3 (its unavailability, retransmitted / sent, RTT) beside the UDP probe's gap. MBB's
temporary path (br2-br1-br4-br3) crosses the bottleneck too, as the seed's did.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from statistics import median
from typing import Any

from pydantic import Field

from experiments import markdown as md
from experiments import ost_vs_mbb as ost
from experiments import ostbench, plots
from experiments.config import Config, typed
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Written
from fabric import lines
from fabric.fabric import veth_name
from services.reroute.model.topology import Endpoint

STRATEGIES = ("bbm", "mbb")
BOTTLENECK = Endpoint(node="br1", port="p3")  # egress towards br4
SEED = {"loss": ("1.28", "0.44"), "gap": ("727", "185")}  # seed 003 4.3: OST, MBB
SEED_LOSS, SEED_GAP = {"bbm": 1.28, "mbb": 0.44}, {"bbm": 727.0, "mbb": 185.0}
_PAREN = {k: tuple(f"({v})" for v in vs) for k, vs in SEED.items()}


class SteeringConfig(ostbench.BenchConfig):
    # the emulated fabric forwards 200 Mbit/s only when idle: 30 + 30 through 45
    tcp_mbps: int = Field(30, ge=1, description="each stream's iperf3 cap, Mbit/s")
    bottleneck_mbps: int = Field(45, ge=1, description="br1 -> br4 (tbf), below the sum")
    lock: str | float = Field("paired", description="paired | table | fixed ms")


def _streams(r: Raw) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(steered, unsteered): each with ``tcp``, ``tcp_loss_pct``, ``tcp_offset_ms``."""
    return r, r["bystander"]


def rate_around(stream: Mapping[str, Any], start_ms: float, end_ms: float) -> float | None:
    """Median TCP rate (Mbit/s) of the intervals inside [start, end) ms after the request."""
    tcp = stream["tcp"]
    step = tcp["interval_s"] * 1000
    offset = stream["tcp_offset_ms"]
    inside = [
        r
        for i, r in enumerate(tcp["series_mbps"])
        if start_ms <= i * step - offset and (i + 1) * step - offset <= end_ms
    ]
    return median(inside) if inside else None


class BandwidthSteering:
    name = "bandwidth-steering"
    title = "two streams through a bottleneck, one steered onto a new circuit; seed 003 4.3"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = SteeringConfig

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each strategy, ``runs`` times, pairs interleaved."""
        cfg = typed(opts.config, SteeringConfig)
        return [
            Rep(
                key=f"{s}-{i:02d}",
                params={"strategy": s, "pair": i, "lock_ms": _lock(cfg, opts.seed, i)},
            )
            for i in range(1, cfg.runs + 1)
            for s in STRATEGIES
        ]

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        """The demo fabric with its bottleneck, for every repetition."""
        return _bottlenecked(say, seed, typed(opts.config, SteeringConfig))

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration under the steered load."""
        bench, cfg = session
        if rep.params.get("lock_ms") is not None:
            ostbench.set_lock(bench, float(rep.params["lock_ms"]))
        doc = ostbench.measure(bench, str(rep.params["strategy"]), cfg, say, bystander="direct")
        return doc | {"bottleneck_mbps": cfg.bottleneck_mbps}

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        """The report (Markdown, plots under ``out``)."""
        by = {s: [r for r in raws.values() if r["strategy"] == s] for s in STRATEGIES}
        cfg: dict[str, Any] = next(
            (r["config"] for r in reversed(list(raws.values())) if "config" in r), {}
        )
        mbps, cap = cfg.get("tcp_mbps", 30), cfg.get("bottleneck_mbps", 45)
        body = "\n".join(
            [
                f"vm2 -> vm3 (steered) and vm1 -> vm4 (not steered), iperf3 TCP {mbps}"
                f" Mbit/s each for {cfg.get('tcp_s', 7)} s, both through br1 -> br4 capped at"
                f" {cap} Mbit/s (tbf), as seed 003 forced two 10 Gbit/s streams through one"
                " 10 Gbit/s link; a UDP probe and tcpdump at both ends of the steered stream."
                f" {ostbench.when_switched(cfg).capitalize()} ost1 steers vm2 -> vm3 onto the"
                f" short circuit; {ostbench.line_said(cfg)}."
                ' As the seed ("we only'
                " evaluated the stream between vm2 and vm3\"), the seed's loss and"
                " unavailability are the steered stream's; **bold** rows are computed as the"
                " seed did, from the packets. *before* is the median rate of the last second"
                " before the request, *after* of the second from 1.5 s on.\n",
                _table(by),
                md.image(_plot(by, out), "seed 003 Figure 4.18: throughput of both streams"),
                md.image(ost.fig_rtt(by, out, number="4.19"), "seed 003 Figure 4.19: RTT"),
                md.image(
                    ost.fig_loss({"ovs": by}, out, number="4.20", seed=SEED_LOSS),
                    "seed 003 Figure 4.20: packet loss of the steered stream",
                ),
                md.image(
                    ost.fig_unavailability({"ovs": by}, out, number="4.21", seed=SEED_GAP),
                    "seed 003 Figure 4.21: unavailability of the steered stream",
                ),
            ]
        )
        return Written(conclusions=conclusions(by), body=body)

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 003's steered-stream unavailability and loss (4.3, chapter 5) beside ours."""
        by = {s: [r for r in raws.values() if r["strategy"] == s] for s in STRATEGIES}
        cfg: dict[str, Any] = next(
            (r["config"] for r in reversed(list(raws.values())) if "config" in r), {}
        )
        ours = (
            f"ours {cfg.get('tcp_mbps', 30)} Mbit/s streams through"
            f" {cfg.get('bottleneck_mbps', 45)} Mbit/s"
        )
        rows = []
        for metric, get, digits, key in (
            ("TCP unavailability: longest gap at the sender (ms)", _cap("sender_gap_ms"), 1, "gap"),
            ("TCP loss: retransmitted / sent segments (%)", _cap("retransmitted_pct"), 2, "loss"),
        ):
            for s, value in zip(STRATEGIES, SEED[key], strict=True):
                vals = md.values(by[s], get)
                rows.append(
                    SeedRow(
                        metric=f"{plots.SEED_NAMES[s]}: steered stream's {metric}",
                        source="003 ch. 5; 4.3" + (" (Figure 4.20)" if key == "loss" else ""),
                        seed=value,
                        seed_n="50 (4.3: fifty runs of each)",
                        ours=md.stat_cells(vals, digits)[0],
                        ours_n=str(len(vals)),
                        note="both from captures of the steered stream; the seed's two 10"
                        f" Gbit/s streams through a 10 Gbit/s bottleneck, {ours}",
                    )
                )
        return rows


def _lock(cfg: SteeringConfig, seed: int, pair: int) -> float | None:
    if cfg.lock == "paired":
        return ostbench.paired_lock_ms(seed, pair)
    return None if cfg.lock == "table" else float(cfg.lock)


@contextmanager
def _bottlenecked(
    say: Say, seed: int, cfg: SteeringConfig
) -> Iterator[tuple[ostbench.Bench, SteeringConfig]]:
    with ostbench.bench(say, seed=seed, congestion=cfg.congestion, line_mbps=cfg.line_mbps) as b:
        ns, mbps = b.fab.state.fabric_ns, cfg.bottleneck_mbps
        packets = lines.cap(ns, veth_name(BOTTLENECK), mbps, burst_kb=16)
        say(f"bottleneck: {BOTTLENECK} -> br4 at {mbps} Mbit/s (capped queues: {packets} packets)")
        yield b, cfg


def _cap(key: str) -> Any:
    return lambda r: (r.get("capture") or {}).get(key)


def conclusions(by: Mapping[str, Sequence[Raw]]) -> str:
    """Two sentences: the steered stream's outage and loss, and the unsteered stream."""
    gap = {s: md.values(by[s], ost.unavailability) for s in STRATEGIES}
    loss = {
        s: md.values(by[s], lambda r: _cap("retransmitted_pct")(r) or r["tcp_loss_pct"])
        for s in STRATEGIES
    }
    if not all(gap.values()) or not all(loss.values()):
        return "Not enough runs of both strategies to conclude anything."
    after = md.values(by["mbb"], lambda r: rate_around(r["bystander"], 1500, 2500))
    before = md.values(by["mbb"], lambda r: rate_around(r["bystander"], -1000, 0))
    m = statistics.fmean
    freed = (
        f" the stream that stayed went from {m(before):.0f} to {m(after):.0f} Mbit/s once the"
        " other left the bottleneck"
        if before and after
        else " the rate of the stream that stayed was not read both a second before and"
        " 1.5-2.5 s after the request (its stream began too late or ended too soon)"
    )
    return (
        f"Steering the stream onto the new circuit by MBB instead of BBM cut its"
        f" unavailability from {m(gap['bbm']):.0f} to {m(gap['mbb']):.0f} ms and its"
        f" retransmitted share from {m(loss['bbm']):.2f} to {m(loss['mbb']):.2f} % (seed 003:"
        f" 727 -> 185 ms, 1.28 -> 0.44 %). Under MBB{freed}; the steered stream's remaining"
        " loss comes from the shared bottleneck its temporary path crosses, as in the seed."
    )


def _table(by: Mapping[str, Sequence[Raw]]) -> str:
    header = ["metric"]
    for s in STRATEGIES:
        header += [f"{s.upper()} mean [95 % CI]", "n"]
    header += ["seed 003 OST", "seed 003 MBB"]
    rows = []
    metrics: list[tuple[str, Any, int, tuple[str, ...]]] = [
        (
            "**steered: TCP unavailability, sender's gap (ms)** [capture]",
            _cap("sender_gap_ms"),
            1,
            SEED["gap"],
        ),
        (
            "steered: TCP gap at the receiver (ms) [capture]",
            _cap("longest_gap_ms"),
            1,
            (md.NONE, md.NONE),
        ),
        (
            "**steered: retransmitted / sent (%)** [capture]",
            _cap("retransmitted_pct"),
            2,
            SEED["loss"],
        ),
        (
            "steered: TCP RTT max during the switch (ms) [capture]",
            _cap("rtt_during_max_ms"),
            1,
            ("100s", "2.5"),
        ),
        (
            "steered: UDP probe gap (ms) [ours]",
            lambda r: r["udp"]["longest_gap_ms"],
            1,
            _PAREN["gap"],
        ),
        ("both streams' mean retransmitted / sent (%) [iperf3]", _both_loss, 2, _NO),
    ]
    for i, who in enumerate(("steered", "not steered")):
        metrics += [
            (
                f"{who}: retransmitted / sent (%) [iperf3]",
                lambda r, i=i: _streams(r)[i]["tcp_loss_pct"],
                2,
                _PAREN["loss"] if i == 0 else _NO,
            ),
            (f"{who}: Mbit/s before", lambda r, i=i: rate_around(_streams(r)[i], -1000, 0), 0, _NO),
            (
                f"{who}: Mbit/s after",
                lambda r, i=i: rate_around(_streams(r)[i], 1500, 2500),
                0,
                _NO,
            ),
            (f"{who}: TCP min (Mbit/s)", lambda r, i=i: _streams(r)[i]["tcp"]["min_mbps"], 0, _NO),
            (
                f"{who}: TCP below half rate (ms)",
                lambda r, i=i: _streams(r)[i]["tcp"]["stalled_ms"],
                0,
                _NO,
            ),
        ]
    for label, get, digits, seed in metrics:
        row = [label]
        for s in STRATEGIES:
            cells = md.stat_cells(md.values(by[s], get), digits)
            row += [cells[0], cells[3]]
        rows.append([*row, *seed])
    return md.table(header, rows, title="Both streams, BBM vs MBB", few=md.fewest(*by.values()))


_NO = (md.NONE, md.NONE)


def _both_loss(r: Raw) -> float:
    return float((r["tcp_loss_pct"] + r["bystander"]["tcp_loss_pct"]) / 2)


def _plot(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    fig = plots.figure(1, 2, size=(11, 3.8), seed="003 Figure 4.18", title="dual stream throughput")
    for ax, s in zip(plots.axes(fig), STRATEGIES, strict=True):
        runs = sorted(by[s], key=lambda r: r["udp"]["longest_gap_ms"] or 0.0)
        if not runs:
            continue
        run = runs[len(runs) // 2]
        for stream, label, color in (
            (run, "steered", plots.COLORS[s]),
            (run["bystander"], "not steered", "tab:green"),
        ):
            tcp = stream["tcp"]
            step = tcp["interval_s"] * 1000
            xs = [(i + 1) * step - stream["tcp_offset_ms"] for i in range(len(tcp["series_mbps"]))]
            ax.step(xs, tcp["series_mbps"], where="pre", lw=1, color=color, label=label)
        ax.axvline(0, color="k", ls="--", lw=1, label="request")
        if run["timing"] is not None:
            ax.axvline(
                run["timing"]["new_path_ms"], color="k", ls=":", lw=1, label="on new circuit"
            )
        ax.set_xlim(-2000, 4000)
        ax.set_ylim(bottom=0)
        ax.set_title(
            f"({'ab'[STRATEGIES.index(s)]}) {plots.SEED_NAMES[s]}: {run['key']}", fontsize=9
        )
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("Mbit/s")
        ax.legend(fontsize=7)
    return plots.save(fig, out / "steering_throughput.png")
