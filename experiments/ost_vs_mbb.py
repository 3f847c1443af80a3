"""``ost-vs-mbb``: seed 003 section 4.2.4 (Tables 4.2 and 4.7), many runs of each strategy.

N repetitions of BBM ("OST", plain optical switching) and N of MBB, interleaved (bbm-01,
mbb-01, bbm-02, ...) so that a drift of the machine's load touches both alike. Each one is
:func:`experiments.ostbench.measure`: UDP loss, the longest gap (unavailability), the TCP
dip and retransmissions, the RTT during the switch, request-to-new-path time, the fabric's
own drops and the emulator's drawn lock time.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from experiments import markdown as md
from experiments import ostbench, plots
from experiments.demo_report import SEED_003_GAP_MS, SEED_003_LOSS_PCT
from experiments.runner import Options, Raw, Rep, Say
from experiments.stats import percentile

FULL_RUNS, QUICK_RUNS = 20, 3
LOAD = ostbench.Load(tcp_s=7)  # TCP starts first: 7 s covers its recovery after the switch
STRATEGIES = ("bbm", "mbb")
# seed 003 Table 4.3: switch polling + transceiver locking (ms)
SEED_LOCK = {"mean": 605.0, "std": 115.0, "min": 529.0, "p50": 532.0, "p75": 786.0, "max": 834.0}
Get = Callable[[Mapping[str, Any]], Any]
(_BL, _ML), (_BG, _MG) = SEED_003_LOSS_PCT, SEED_003_GAP_MS
_NO = (md.NONE, md.NONE)


def _timing(key: str) -> Get:
    return lambda r: None if r["timing"] is None else r["timing"][key]


# label, how to read it from a raw document, digits, seed 003's (BBM, MBB)
METRICS: tuple[tuple[str, Get, int, tuple[str, str]], ...] = (
    (
        "TCP loss = retransmitted / sent (%)",
        lambda r: r.get("tcp_loss_pct"),
        2,
        (f"{_BL}", f"{_ML}"),
    ),
    ("UDP probe loss (%)", lambda r: r["udp"]["loss_pct"], 2, (md.NONE, md.NONE)),
    (
        "unavailability = longest gap (ms)",
        lambda r: r["udp"]["longest_gap_ms"],
        1,
        (f"{_BG:.0f}", f"{_MG:.0f}"),
    ),
    ("TCP dip (% of median rate)", lambda r: r["tcp"]["dip_pct"], 0, ("60", "6")),
    ("TCP time below half rate (ms)", lambda r: r["tcp"]["stalled_ms"], 0, (md.NONE, md.NONE)),
    ("TCP retransmissions", lambda r: r["tcp"]["retransmits"], 0, (md.NONE, md.NONE)),
    ("RTT max during the switch (ms)", lambda r: r["rtt"]["during_max_ms"], 1, ("100s", "2.5")),
    (
        "pings answered, 1.5 s from the request (of 75)",
        lambda r: r["rtt"]["during_replies"],
        0,
        _NO,
    ),
    ("request -> traffic on new path (ms)", _timing("new_path_ms"), 0, (md.NONE, md.NONE)),
    ("emulator switching + drawn lock (ms)", _timing("dark_ms"), 0, ("605 (lock)", "605 (lock)")),
    ("dropped by the fabric itself (OVS rx)", lambda r: r["fabric_drops"], 0, (md.NONE, md.NONE)),
)


class OstVsMbb:
    name = "ost-vs-mbb"
    title = "break-before-make (plain optical switching) vs make-before-break, seed 003 4.2.4"
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
        return ostbench.bench(say, seed=seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration with ``rep``'s strategy."""
        return ostbench.measure(session, str(rep.params["strategy"]), LOAD, say)

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """The report (Markdown, plots under ``out``)."""
        by = {s: [r for r in raws.values() if r["strategy"] == s] for s in STRATEGIES}
        parts = [
            "vm2 -> vm3 on the long path (UDP probe 5000 pkt/s for 4 s, iperf3 TCP capped at"
            " 100 Mbit/s for 7 s, ping every 20 ms); 0.8 s into the probe ost1 is reconfigured"
            " to the short path. After each run the flows go back to the long path by an unmeasured"
            " MBB reroute.\n",
            metrics_table(by),
            lock_table(by),
            md.image(cdf_plot(by, out), "CDF of unavailability, BBM vs MBB"),
            md.image(series_plot(by, out), "throughput of a typical run of each"),
            md.image(lock_plot(by, out), "drawn lock times vs seed 003 Table 4.3"),
        ]
        return "\n".join(parts)


def metrics_table(by: Mapping[str, Sequence[Raw]]) -> str:
    """The metrics of each strategy as a Markdown table."""
    header = ["metric"]
    for s in STRATEGIES:
        header += [f"{s.upper()} mean [95 % CI]", f"{s.upper()} median / p95", "std", "n"]
    header += ["seed 003 OST", "seed 003 MBB"]
    rows = []
    for label, get, digits, seed in METRICS:
        row = [label]
        for s in STRATEGIES:
            row += md.stat_cells(md.values(by[s], get), digits)
        rows.append([*row, *seed])
    return "## Per run, BBM vs MBB\n\n" + md.table(header, rows)


def lock_table(by: Mapping[str, Sequence[Raw]]) -> str:
    """The drawn lock times as a Markdown table."""
    drawn = md.values([r for s in STRATEGIES for r in by[s]], _timing("lock_ms"))
    if not drawn:
        return ""
    ours = {
        "mean": statistics.fmean(drawn),
        "std": statistics.stdev(drawn) if len(drawn) > 1 else 0.0,
        "min": min(drawn),
        "p50": statistics.median(drawn),
        "p75": percentile(drawn, 0.75),
        "max": max(drawn),
    }
    rows = [[k, f"{ours[k]:.0f}", f"{SEED_LOCK[k]:.0f}"] for k in SEED_LOCK]
    return (
        f"## The emulator's drawn lock times (n = {len(drawn)}) vs seed 003 Table 4.3\n\n"
        + md.table(["ms", "drawn here", "seed 003"], rows)
    )


def cdf_plot(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    """Plot the CDF of the probes' gaps per strategy; the Markdown image line."""
    fig = plots.figure()
    (ax,) = plots.axes(fig)
    for s in STRATEGIES:
        gaps = md.values(by[s], lambda r: r["udp"]["longest_gap_ms"])
        if gaps:
            plots.cdf(ax, gaps, label=s.upper(), color=plots.COLORS[s])
    for s, gap in zip(STRATEGIES, SEED_003_GAP_MS, strict=True):
        ax.axvline(gap, ls=":", color=plots.COLORS[s], label=f"seed 003 {s.upper()} mean")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(left=0)
    ax.set_xlabel("unavailability: longest gap of the UDP probe (ms)")
    ax.legend()
    return plots.save(fig, out / "unavailability_cdf.png")


def typical(runs: Sequence[Raw]) -> Raw | None:
    """The run whose unavailability is the median of its strategy's."""
    ranked = sorted(runs, key=lambda r: r["udp"]["longest_gap_ms"] or 0.0)
    return ranked[len(ranked) // 2] if ranked else None


def series_plot(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    """Plot the traffic series around the request; the Markdown image line."""
    fig = plots.figure(2, 2, size=(11, 6))
    ax = plots.axes(fig)
    for col, s in enumerate(STRATEGIES):
        run = typical(by[s])
        if run is None:
            continue
        _udp_series(ax[col], run, s)
        _tcp_series(ax[2 + col], run, s)
    return plots.save(fig, out / "throughput_typical.png")


def _marks(ax: Any, run: Raw) -> None:
    ax.axvline(0, color="k", ls="--", lw=1, label="reconfiguration requested")
    if run["timing"] is not None:
        t, start = run["timing"], run["circuits_ms"]
        ax.axvspan(start, start + t["lock_ms"], color="orange", alpha=0.2, label="drawn lock")
        ax.axvline(t["new_path_ms"], color="green", ls="--", lw=1, label="traffic on new path")


def _udp_series(ax: Any, run: Raw, strategy: str) -> None:
    rate = run["probe_rate"]
    xs = [i * rate["bin_ms"] - rate["request_ms"] for i in range(len(rate["counts"]))]
    ys = [c * 1000 / rate["bin_ms"] for c in rate["counts"]]
    ax.plot(xs, ys, color=plots.COLORS[strategy], lw=1)
    _marks(ax, run)
    ax.set_title(f"{strategy.upper()} ({run['key']}): UDP probe delivered")
    ax.set_xlabel("ms after the request")
    ax.set_ylabel("packets/s (10 ms bins)")
    ax.set_ylim(bottom=0)
    ax.set_xlim(-800, 2000)
    ax.legend(fontsize=7, loc="lower right")


def _tcp_series(ax: Any, run: Raw, strategy: str) -> None:
    tcp = run["tcp"]
    step = tcp["interval_s"] * 1000
    xs = [(i + 1) * step - run["tcp_offset_ms"] for i in range(len(tcp["series_mbps"]))]
    ax.step(xs, tcp["series_mbps"], where="pre", color=plots.COLORS[strategy], lw=1)
    _marks(ax, run)
    ax.set_title(f"{strategy.upper()}: TCP throughput ({tcp['retransmits']} retransmissions)")
    ax.set_xlabel("ms after the request (iperf3 100 ms intervals, +-50 ms)")
    ax.set_ylabel("Mbit/s")
    ax.set_xlim(-1500, 3000)
    ax.set_ylim(bottom=0)


def lock_plot(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    """Plot the drawn lock times; the Markdown image line."""
    drawn = md.values([r for s in STRATEGIES for r in by[s]], _timing("lock_ms"))
    fig = plots.figure()
    (ax,) = plots.axes(fig)
    ax.hist(drawn, bins=20, range=(500, 860), color="tab:purple", label=f"drawn (n={len(drawn)})")
    for k, style in (("mean", "-"), ("p50", "--"), ("p75", "-."), ("min", ":"), ("max", ":")):
        ax.axvline(
            SEED_LOCK[k], color="k", ls=style, lw=1, label=f"seed 003 {k} {SEED_LOCK[k]:.0f}"
        )
    ax.set_xlabel("transceiver lock time (ms)")
    ax.set_ylabel("runs")
    ax.legend(fontsize=7)
    return plots.save(fig, out / "lock_times.png")
