"""``bandwidth-steering``: seed 003 section 4.3, two streams, one steered onto a new circuit.

vm2 -> vm3 (the long path) and vm1 -> vm4 (the direct path) both cross the electrical link
br1 -> br4, capped here (tbf) below their sum: a bottleneck, as the seed forced 20 Gbit/s of
traffic through 10. Reconfiguring ost1 steers vm2 -> vm3 onto the new short circuit and off
the bottleneck; vm1 -> vm4 is never moved. BBM vs MBB: both streams' throughput and loss
(retransmitted / sent), the steered stream's unavailability (the UDP probe's longest gap).
MBB's temporary path (br2-br1-br4-br3) crosses the bottleneck too, as the seed's did.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from statistics import median
from typing import Any

from experiments import markdown as md
from experiments import ostbench, plots
from experiments.runner import Options, Raw, Rep, Say
from fabric.fabric import veth_name
from fabric.run import run as run_cmd
from services.reroute.topology import Endpoint

FULL_RUNS, QUICK_RUNS = 10, 2
STRATEGIES = ("bbm", "mbb")
BOTTLENECK = Endpoint(node="br1", port="p3")  # egress towards br4
STREAM_MBPS, BOTTLENECK_MBPS = 30, 45  # the emulated fabric forwards 200 Mbit/s only when idle
LOAD = ostbench.Load(tcp_s=7, tcp_mbps=STREAM_MBPS, bystander="direct")
SEED = {"loss": ("1.28", "0.44"), "gap": ("727", "185")}  # seed 003 4.3: OST, MBB


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

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each strategy, ``runs`` times."""
        n = opts.runs or (QUICK_RUNS if opts.quick else FULL_RUNS)
        return [
            Rep(key=f"{s}-{i:02d}", params={"strategy": s})
            for i in range(1, n + 1)
            for s in STRATEGIES
        ]

    def session(
        self, opts: Options, say: Say, *, seed: int
    ) -> AbstractContextManager[ostbench.Bench]:
        """The demo fabric with its traffic, for every repetition."""
        return _bottlenecked(say, seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration under the steered load."""
        doc = ostbench.measure(session, str(rep.params["strategy"]), LOAD, say)
        return doc | {"bottleneck_mbps": BOTTLENECK_MBPS}

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """The report (Markdown, plots under ``out``)."""
        by = {s: [r for r in raws.values() if r["strategy"] == s] for s in STRATEGIES}
        return "\n".join(
            [
                f"vm2 -> vm3 (steered) and vm1 -> vm4 (not steered), iperf3 TCP {STREAM_MBPS}"
                " Mbit/s each"
                f" for 7 s, both through br1 -> br4 capped at {BOTTLENECK_MBPS} Mbit/s (tbf);"
                " a UDP probe (5000 pkt/s) with the steered stream. 0.8 s into the probe ost1"
                " steers vm2 -> vm3 onto the short circuit. *before* is the median rate of the"
                " last second before the request, *after* of the second from 1.5 s on.\n",
                _table(by),
                md.image(_plot(by, out), "both streams' throughput, a typical run of each"),
            ]
        )


@contextmanager
def _bottlenecked(say: Say, seed: int) -> Iterator[ostbench.Bench]:
    with ostbench.bench(say, seed=seed) as b:
        dev = veth_name(BOTTLENECK)
        tbf = ["rate", f"{BOTTLENECK_MBPS}mbit", "burst", "16kb", "latency", "20ms"]
        run_cmd(
            ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", *tbf], ns=b.fab.state.fabric_ns
        )
        say(f"bottleneck: {BOTTLENECK} -> br4 at {BOTTLENECK_MBPS} Mbit/s")
        yield b


def _table(by: Mapping[str, Sequence[Raw]]) -> str:
    header = ["metric"]
    for s in STRATEGIES:
        header += [f"{s.upper()} mean [95 % CI]", "n"]
    header += ["seed 003 OST", "seed 003 MBB"]
    rows = []
    metrics: list[tuple[str, Any, int, tuple[str, str]]] = [
        ("steered: unavailability (ms)", lambda r: r["udp"]["longest_gap_ms"], 1, SEED["gap"]),
        ("both: TCP loss = retransmitted / sent (%)", _both_loss, 2, SEED["loss"]),
    ]
    for i, who in enumerate(("steered", "not steered")):
        metrics += [
            (f"{who}: TCP loss (%)", lambda r, i=i: _streams(r)[i]["tcp_loss_pct"], 2, _NO),
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
    return "## Both streams, BBM vs MBB\n\n" + md.table(header, rows)


_NO = (md.NONE, md.NONE)


def _both_loss(r: Raw) -> float:
    return float((r["tcp_loss_pct"] + r["bystander"]["tcp_loss_pct"]) / 2)


def _plot(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    fig = plots.figure(1, 2, size=(11, 3.8))
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
        ax.set_title(f"{s.upper()} ({run['key']})")
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("Mbit/s")
        ax.legend(fontsize=7)
    return plots.save(fig, out / "steering_throughput.png")
