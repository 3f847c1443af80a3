"""``rto-sweep``: seed 003 section 4.2.2, BBM under TCP ``rto_min`` of 200, 800, 900, 2000 ms.

The sender's route (vm2 -> vm3) gets ``rto_min`` (``ip route replace ... rto_min``) before
each repetition; then :func:`experiments.ostbench.measure` runs a BBM reconfiguration of
ost1 under the TCP stream (MBB at the default 200 ms for reference). While the circuit is
dark every retransmission is lost and the timer doubles, so TCP resumes at the first
retransmission after the lock: ``rto_min * (2^k - 1)`` for the smallest ``k`` that reaches
past the dark time (seed 003: at 800 ms some runs resumed after one timeout, some after
two; at 900 ms and 2 s after one). The report sets the measured stall beside that model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from experiments import markdown as md
from experiments import ostbench, plots
from experiments.runner import Options, Raw, Rep, Say

RTO_MS = (200, 800, 900, 2000)
DEFAULT_RTO_MS = 200
FULL_RUNS, QUICK_RUNS = 5, 1
LOAD = ostbench.Load(tcp_s=7, probe_s=5)  # room for a 2 s timeout and the recovery after it


def cases() -> list[tuple[str, int]]:
    """The cases: BBM at each minimum RTO, MBB at the default."""
    return [("bbm", rto) for rto in RTO_MS] + [("mbb", DEFAULT_RTO_MS)]


class RtoSweep:
    name = "rto-sweep"
    title = (
        "BBM stall against TCP rto_min (200, 800, 900, 2000 ms), MBB for reference; seed 003 4.2.2"
    )
    backends: tuple[str, ...] = ("ovs",)

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each case, ``runs`` times."""
        n = opts.runs or (QUICK_RUNS if opts.quick else FULL_RUNS)
        return [
            Rep(key=f"{s}-rto{rto}-{i:02d}", params={"strategy": s, "rto_min_ms": rto})
            for i in range(1, n + 1)
            for s, rto in cases()
        ]

    def session(
        self, opts: Options, say: Say, *, seed: int
    ) -> AbstractContextManager[ostbench.Bench]:
        """The demo fabric with its traffic, for every repetition."""
        return ostbench.bench(say, seed=seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration with ``rep``'s minimum RTO."""
        rto = int(rep.params["rto_min_ms"])
        route = ostbench.set_rto_min(session, rto)
        doc = ostbench.measure(session, str(rep.params["strategy"]), LOAD, say)
        return doc | {"rto_min_ms": rto, "route": route, "recovery_ms": recovery_ms(doc)}

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """The report (Markdown, plots under ``out``)."""
        groups = {
            c: [r for r in raws.values() if (r["strategy"], r["rto_min_ms"]) == c] for c in cases()
        }
        return "\n".join(
            [
                "vm2 -> vm3 on the long path (iperf3 TCP capped at 100 Mbit/s for 7 s, UDP probe"
                " 5000 pkt/s), ost1 reconfigured 0.8 s into the probe. `rto_min` is set on the"
                " sender's route to vm3. *TCP resumes* is the time from the request until the"
                " stream is back above half its median rate (100 ms intervals); *model* is"
                " when the circuit broke + `rto_min * (2^k - 1)`: the first retransmission after"
                " the circuit's dark time (switching + drawn lock), the timeout doubling each"
                " time.\n",
                _table(groups),
                md.image(_plot(groups, out), "TCP resume time against rto_min"),
                md.image(_series(groups, out), "TCP throughput per rto_min"),
            ]
        )


def recovery_ms(doc: Mapping[str, Any]) -> float:
    """From the request until TCP is back above half its median rate (end of the last slow
    100 ms interval after the request; 0 if it never slowed)."""
    tcp = doc["tcp"]
    step = tcp["interval_s"] * 1000
    half = tcp["median_mbps"] / 2
    offset = doc["tcp_offset_ms"]
    ends = [(i + 1) * step - offset for i, r in enumerate(tcp["series_mbps"]) if r < half]
    return max((e for e in ends if e > 0), default=0.0)


def backoff_ms(rto: float, dark_ms: float) -> float:
    """The first retransmission at or after ``dark_ms`` with timeouts rto, 2 rto, 4 rto, ..."""
    k, at = 0, 0.0
    while at < dark_ms:
        at += rto * 2**k
        k += 1
    return at


def model_ms(doc: Mapping[str, Any]) -> float | None:
    """When the model says TCP resumes, ms after the request: the circuit breaks when the
    switch begins (its cross-connect step's end minus the switching time), is dark for
    switching + lock, and TCP's first retransmission after that gets through."""
    t, circuits = doc["timing"], doc["circuits_ms"]
    if doc["strategy"] != "bbm" or t is None or circuits is None:
        return None
    broke = circuits - t["switch_ms"]
    return float(broke + backoff_ms(doc["rto_min_ms"], t["dark_ms"]))


def _table(groups: Mapping[tuple[str, int], Sequence[Raw]]) -> str:
    header = ["case", "TCP resumes (ms) mean [95 % CI]", "median / p95", "std", "n"]
    header += ["model (ms)", "unavailability (ms)", "retransmissions", "seed 003 resumes after"]
    seed = {200: "2-3 RTOs", 800: "800 (3/5) or 2400 (2/5)", 900: "900", 2000: "2000"}
    rows = []
    for (s, rto), runs in groups.items():
        model = md.values(runs, model_ms)
        rows.append(
            [
                f"{s.upper()} rto_min {rto}",
                *md.stat_cells(md.values(runs, lambda r: r["recovery_ms"]), 0),
                f"{sum(model) / len(model):.0f}" if model else md.NONE,
                md.stat_cells(md.values(runs, lambda r: r["udp"]["longest_gap_ms"]), 0)[0],
                md.stat_cells(md.values(runs, lambda r: r["tcp"]["retransmits"]), 0)[0],
                seed.get(rto, md.NONE) if s == "bbm" else "no timeout (4.2.4)",
            ]
        )
    return "## TCP stall against rto_min\n\n" + md.table(header, rows)


def _plot(groups: Mapping[tuple[str, int], Sequence[Raw]], out: Path) -> str:
    fig = plots.figure()
    (ax,) = plots.axes(fig)
    for (s, rto), runs in groups.items():
        xs = [rto] * len(runs)
        label = f"{s.upper()} measured" if rto == DEFAULT_RTO_MS else None
        ax.scatter(xs, [r["recovery_ms"] for r in runs], color=plots.COLORS[s], s=18, label=label)
        if s == "bbm":
            model = md.values(runs, model_ms)
            label = "model rto_min*(2^k-1)" if rto == DEFAULT_RTO_MS else None
            ax.scatter([rto] * len(model), model, marker="x", color="k", s=30, label=label)
    ax.set_xlabel("rto_min (ms)")
    ax.set_ylabel("request -> TCP back above half rate (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return plots.save(fig, out / "rto_resume.png")


def _series(groups: Mapping[tuple[str, int], Sequence[Raw]], out: Path) -> str:
    fig = plots.figure(len(groups), 1, size=(8, 2.0 * len(groups)))
    for ax, ((s, rto), runs) in zip(plots.axes(fig), groups.items(), strict=True):
        for r in runs:
            tcp = r["tcp"]
            step = tcp["interval_s"] * 1000
            xs = [(i + 1) * step - r["tcp_offset_ms"] for i in range(len(tcp["series_mbps"]))]
            ax.step(xs, tcp["series_mbps"], where="pre", lw=0.8, color=plots.COLORS[s], alpha=0.7)
        ax.axvline(0, color="k", ls="--", lw=1)
        ax.set_title(f"{s.upper()}, rto_min {rto} ms ({len(runs)} runs)", fontsize=9)
        ax.set_ylabel("Mbit/s")
        ax.set_xlim(-1000, 4500)
    fig.axes[-1].set_xlabel("ms after the request")
    return plots.save(fig, out / "rto_throughput.png")
