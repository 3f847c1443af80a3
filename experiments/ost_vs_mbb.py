"""``ost-vs-mbb``: seed 003 section 4.2.4 (Tables 4.2 and 4.7), many runs of each strategy.

N repetitions of BBM ("OST", plain optical switching) and N of MBB, interleaved (bbm-01,
mbb-01, bbm-02, ...) so that a drift of the machine's load touches both alike. Each one is
:func:`experiments.ostbench.measure`: UDP loss, the longest gap (unavailability), the TCP
dip and retransmissions, the RTT during the switch, request-to-new-path time, the fabric's
own drops and the emulator's drawn lock time.

``--backend`` picks how the four packet switches are programmed (the testbed is the same):
``ovs`` OpenFlow 1.3 bundles (ngncs-ost), ``ryu`` through a Ryu ofctl_rest controller as
seed 003 did (ngncs-ost-ryu), ``dpctl`` OpenFlow 1.0 to each switch, no controller
(ngncs-ost-dpctl), ``p4runtime`` P4Runtime switches running p4/reroute.p4 (ngncs-ost-p4).
Runs of several backends may share one ``--out`` (their raw files are named
``BACKEND-bbm-01``, ovs's plain ``bbm-01``): the report then covers each, side by side.
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
from experiments.runner import Options, Raw, Rep, Say, every_raw
from experiments.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = {  # --backend -> the testbed with its packet switches driven that way
    "ovs": "ngncs-ost.yaml",
    "ryu": "ngncs-ost-ryu.yaml",
    "dpctl": "ngncs-ost-dpctl.yaml",
    "p4runtime": "ngncs-ost-p4.yaml",
}

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
    backends: tuple[str, ...] = tuple(TOPOLOGIES)

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each strategy, ``runs`` times."""
        n = opts.runs or (QUICK_RUNS if opts.quick else FULL_RUNS)
        prefix = "" if opts.backend == "ovs" else f"{opts.backend}-"
        return [
            Rep(key=f"{prefix}{s}-{i:02d}", params={"strategy": s, "backend": opts.backend})
            for i in range(1, n + 1)
            for s in STRATEGIES
        ]

    def session(
        self, opts: Options, say: Say, *, seed: int
    ) -> AbstractContextManager[ostbench.Bench]:
        """The testbed of ``opts.backend`` with its traffic, for every repetition."""
        topology = ROOT / "topologies" / TOPOLOGIES[opts.backend]
        return ostbench.bench(say, seed=seed, topology=topology)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration with ``rep``'s strategy."""
        return ostbench.measure(session, str(rep.params["strategy"]), LOAD, say)

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """The report (Markdown, plots under ``out``): every backend run into ``out``."""
        runs = {**every_raw(out), **raws}
        backends = by_backend(runs)
        parts = [
            "vm2 -> vm3 on the long path (UDP probe 5000 pkt/s for 4 s, iperf3 TCP capped at"
            " 100 Mbit/s for 7 s, ping every 20 ms); 0.8 s into the probe ost1 is reconfigured"
            " to the short path. After each run the flows go back to the long path by an unmeasured"
            " MBB reroute.\n",
        ]
        for backend, by in backends.items():
            parts.append(metrics_table(by, backend if len(backends) > 1 else None))
        if len(backends) > 1:
            parts.append(backends_table(backends))
        every = {s: [r for by in backends.values() for r in by[s]] for s in STRATEGIES}
        first = next(iter(backends.values()), every)
        parts += [
            lock_table(every),
            md.image(cdf_plot(backends, out), "CDF of unavailability, BBM vs MBB"),
            md.image(series_plot(first, out), "throughput of a typical run of each"),
            md.image(lock_plot(every, out), "drawn lock times vs seed 003 Table 4.3"),
        ]
        return "\n".join(parts)


def backend_of(raw: Raw) -> str:
    """The backend a repetition ran on (ovs for runs made before there was a choice)."""
    return str(raw.get("params", {}).get("backend", "ovs"))


def by_backend(runs: Mapping[str, Raw]) -> dict[str, dict[str, list[Raw]]]:
    """Runs by backend (in ``TOPOLOGIES`` order), then by strategy."""
    found: dict[str, dict[str, list[Raw]]] = {}
    for backend in TOPOLOGIES:
        mine = [r for _, r in sorted(runs.items()) if backend_of(r) == backend]
        if mine:
            found[backend] = {s: [r for r in mine if r["strategy"] == s] for s in STRATEGIES}
    return found


def metrics_table(by: Mapping[str, Sequence[Raw]], backend: str | None = None) -> str:
    """The metrics of each strategy as a Markdown table (headed with ``backend``'s name
    when the report has several)."""
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
    title = "## Per run, BBM vs MBB"
    if backend is not None:
        title += f": backend {backend} (`topologies/{TOPOLOGIES[backend]}`)"
    return f"{title}\n\n" + md.table(header, rows)


BACKEND_METRICS: tuple[tuple[str, Get, int], ...] = (
    ("MBB unavailability (ms)", lambda r: r["udp"]["longest_gap_ms"], 1),
    ("MBB UDP loss (%)", lambda r: r["udp"]["loss_pct"], 2),
    ("MBB TCP retransmissions", lambda r: r["tcp"]["retransmits"], 0),
    ("MBB request -> new path (ms)", _timing("new_path_ms"), 0),
    ("MBB new path - drawn dark time (ms)", lambda r: _overhead_ms(r), 0),
)


def _overhead_ms(raw: Raw) -> float | None:
    """Request -> new path beyond the emulator's switching + drawn lock: the engine's and
    the backend's own time."""
    t = raw["timing"]
    return None if t is None else float(t["new_path_ms"]) - float(t["dark_ms"])


def backends_table(backends: Mapping[str, Mapping[str, Sequence[Raw]]]) -> str:
    """MBB's numbers of each backend in one table (mean [95 % CI], n)."""
    header = [
        "backend",
        "topology",
        *(label for label, _, _ in BACKEND_METRICS),
        "BBM unavailability (ms)",
    ]
    rows = []
    for backend, by in backends.items():
        row = [backend, f"`{TOPOLOGIES[backend]}`"]
        for _, get, digits in BACKEND_METRICS:
            row.append(_mean_ci(md.values(by["mbb"], get), digits))
        bbm = md.values(by["bbm"], lambda r: r["udp"]["longest_gap_ms"])
        rows.append([*row, _mean_ci(bbm, 1)])
    return "## Backends side by side (MBB; BBM for reference)\n\n" + md.table(header, rows)


def _mean_ci(values: Sequence[float], digits: int) -> str:
    cells = md.stat_cells(values, digits)
    return f"{cells[0]} (n = {cells[3]})" if values else md.NONE


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


LINESTYLES = ("-", "--", "-.", ":")


def cdf_plot(backends: Mapping[str, Mapping[str, Sequence[Raw]]], out: Path) -> str:
    """Plot the CDF of the probes' gaps per strategy (and backend); the Markdown image line."""
    fig = plots.figure()
    (ax,) = plots.axes(fig)
    for style, (backend, by) in zip(LINESTYLES, backends.items(), strict=False):
        for s in STRATEGIES:
            gaps = md.values(by[s], lambda r: r["udp"]["longest_gap_ms"])
            label = s.upper() if len(backends) == 1 else f"{s.upper()} {backend}"
            if gaps:
                plots.cdf(ax, gaps, label=label, color=plots.COLORS[s], ls=style)
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
