"""``data-rate-sweep``: seed 003 section 4.2.1 (Figures 4.6 and 4.7), one TCP stream at rates
from half to all of the line rate through a plain optical reconfiguration (BBM, the seed's
OST).

The seed sent iperf at 5..10 Gbit/s over 10 Gbit/s links for 60 s and reconfigured ost1 at
30 s: the stream stops while the circuit is dark, then the sender catches up at the line
rate (9.4 Gbit/s) "for a few seconds" before settling at its rate again, and the RTT shows a
sawtooth while it does; at 10 Gbit/s the link is saturated throughout (RTT ~2 ms against
0.4-0.6). Here the line is the last link to vm3, capped with tbf at ``line_mbps`` (the
emulated fabric's own forwarding is slower than 10 Gbit/s), and the rates are fractions of
it. Throughput and RTT come from tcpdump at vm2 and vm3. Parameters:
``experiments/configs/data-rate-sweep.yaml``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from pydantic import Field

from experiments import markdown as md
from experiments import ostbench, plots
from experiments.config import Config, typed
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Written

LINE = ostbench.LINE  # br3 -> vm3: every path's last link
SEED_RATES = "5, 6, 7, 8, 9, 10 Gbit/s on 10 Gbit/s links"


class RateConfig(ostbench.BenchConfig):
    rates_mbps: list[int] = Field([50, 60, 70, 80, 90, 100], min_length=1)
    line_mbps: int = Field(100, ge=1, description="the line rate: tbf on br3 -> vm3")
    lock: str | float = Field("paired", description="paired | table | fixed ms")


class DataRateSweep:
    name = "data-rate-sweep"
    title = "TCP at rates up to the line rate through a BBM reconfiguration; seed 003 4.2.1"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = RateConfig

    def plan(self, opts: Options) -> list[Rep]:
        """Each rate ``runs`` times; the runs of one index meet the same lock time."""
        cfg = typed(opts.config, RateConfig)
        return [
            Rep(
                key=f"rate{rate:04d}-{i:02d}",
                params={
                    "tcp_mbps": rate,
                    "tcp_s": cfg.tcp_s,
                    "pair": i,
                    "lock_ms": _lock(cfg, opts.seed, i),
                },
            )
            for i in range(1, cfg.runs + 1)
            for rate in cfg.rates_mbps
        ]

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        return _line(say, seed, typed(opts.config, RateConfig))

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        b, cfg = session
        if rep.params.get("lock_ms") is not None:
            ostbench.set_lock(b, float(rep.params["lock_ms"]))
        mine = cfg.model_copy(update={"tcp_mbps": int(rep.params["tcp_mbps"])})
        doc = ostbench.measure(b, "bbm", mine, say)
        return doc | {"line_mbps": cfg.line_mbps, "rate_mbps": mine.tcp_mbps}

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        rates = sorted({int(r["rate_mbps"]) for r in raws.values()})
        by = {rate: [r for r in raws.values() if int(r["rate_mbps"]) == rate] for rate in rates}
        line = next((r["line_mbps"] for r in raws.values()), 100)
        body = "\n".join(
            [
                f"vm2 -> vm3, iperf3 TCP at each rate through a line of {line} Mbit/s (tbf on"
                f" br3 -> vm3; the seed: {SEED_RATES}); ost1 reconfigured long -> short (BBM)"
                " in the middle of the stream. From tcpdump at vm3 (throughput) and vm2 (RTT):"
                " the *unavailability* is seed 003's, the longest gap in the TCP data at the"
                " sender (vm2), with the gap at the receiver (vm3) beside it; *catch-up* is"
                " the time from the end of the outage to the end of the last"
                " 100 ms above 1.1 x the rate (the sender clearing its backlog), *peak* the"
                " highest 100 ms rate after the outage.\n",
                _table(by),
                md.image(_fig_throughput(by, out, line), "seed 003 Figure 4.6"),
                md.image(_fig_rtt(by, out), "seed 003 Figure 4.7"),
            ]
        )
        return Written(conclusions=conclusions(by, line), body=body)

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 003 4.2.1's RTT before the switch (below and at the line rate) and the
        sender's peak after the outage beside ours."""
        rates = sorted({int(r["rate_mbps"]) for r in raws.values()})
        by = {rate: [r for r in raws.values() if int(r["rate_mbps"]) == rate] for rate in rates}
        line = next((r["line_mbps"] for r in raws.values()), 100)
        rtt = rtt_before(by)
        below = [v for rate in by if rate < line for v in rtt[rate]]
        full = rtt.get(int(line), [])
        peaks = [u[1] for runs in by.values() for r in runs if (u := catch_up(r))[1] is not None]
        where = f"ours at {', '.join(map(str, rates))} Mbit/s on a {line} Mbit/s line (tbf)"
        unstated = "n not stated (Figures 4.6, 4.7 show a run per rate)"
        return [
            SeedRow(
                metric="TCP RTT before the switch, below the line rate (ms)",
                source="003 4.2.1 (Figure 4.7)",
                seed="0.4-0.6",
                seed_n=unstated,
                ours=md.stat_cells(below, 2)[0],
                ours_n=str(len(below)),
                note=f"ours each run's median from a capture at the sender; {where}",
            ),
            SeedRow(
                metric="TCP RTT before the switch, at the line rate (ms)",
                source="003 4.2.1 (Figure 4.7f)",
                seed="around 2",
                seed_n=unstated,
                ours=md.stat_cells(full, 2)[0],
                ours_n=str(len(full)),
                note=f"the seed's link saturated at 10 Gbit/s; {where}",
            ),
            SeedRow(
                metric="peak rate after the outage, the sender catching up",
                source="003 4.2.1 (Figure 4.6)",
                seed="9.4 Gbit/s (line 10)",
                seed_n=unstated,
                ours=f"{md.stat_cells(peaks, 0)[0]} Mbit/s (line {line})",
                ours_n=str(len(peaks)),
                note="ours the highest 100 ms rate at vm3 in the 10 s after the outage (the"
                " report's *peak*)",
            ),
        ]


def _lock(cfg: RateConfig, seed: int, pair: int) -> float | None:
    if cfg.lock == "paired":
        return ostbench.paired_lock_ms(seed, pair)
    return None if cfg.lock == "table" else float(cfg.lock)


@contextmanager
def _line(say: Say, seed: int, cfg: RateConfig) -> Iterator[tuple[ostbench.Bench, RateConfig]]:
    with ostbench.bench(say, seed=seed, congestion=cfg.congestion, line_mbps=cfg.line_mbps) as b:
        yield b, cfg


def _series_100ms(run: Raw) -> tuple[list[float], list[float]] | None:
    """(ms after the request, Mbit/s) per 100 ms from the capture at vm3."""
    trace = (run.get("capture") or {}).get("trace")
    if not trace or not trace["rx_mbps"]:
        return None
    w = 10
    vals = trace["rx_mbps"]
    ys = [sum(vals[i : i + w]) / len(vals[i : i + w]) for i in range(0, len(vals), w)]
    xs = [i * trace["bin_ms"] - trace["request_ms"] for i in range(0, len(vals), w)]
    return xs, ys


def catch_up(run: Raw) -> tuple[float | None, float | None]:
    """(s from the end of the outage to the end of the last 100 ms above 1.1 x the rate in
    the 10 s after it: how long the sender caught up at more than its rate; the peak 100 ms
    rate then), from the capture at vm3 and its gap (the receiver's: the outage as vm3's
    series shows it). (0, peak) when it never exceeded its rate."""
    got = _series_100ms(run)
    cap = run.get("capture") or {}
    gap, at = cap.get("longest_gap_ms"), cap.get("gap_at_ms")
    if got is None or gap is None or at is None:
        return None, None
    end = at + gap
    rate = float(run["rate_mbps"])
    after = [(x, y) for x, y in zip(*got, strict=True) if end <= x <= end + 10_000]
    if not after:
        return None, None
    above = [x for x, y in after if y > 1.1 * rate]
    return (max(above) + 100 - end) / 1000 if above else 0.0, max(y for _, y in after)


def _table(by: Mapping[int, Sequence[Raw]]) -> str:
    header = [
        "rate (Mbit/s)",
        "n",
        "TCP unavailability, sender (ms) [capture]",
        "gap at the receiver (ms)",
        "retransmitted / sent (%)",
        "catch-up (s)",
        "peak after (Mbit/s)",
        "RTT before, median (ms)",
        "RTT max after the switch (ms)",
    ]
    rows = []
    for rate, runs in by.items():
        cap = [r.get("capture") or {} for r in runs]
        ups = [catch_up(r) for r in runs]
        rows.append(
            [
                str(rate),
                str(len(runs)),
                md.stat_cells(md.values(cap, lambda c: c.get("sender_gap_ms")), 0)[0],
                md.stat_cells(md.values(cap, lambda c: c.get("longest_gap_ms")), 0)[0],
                md.stat_cells(md.values(cap, lambda c: c.get("retransmitted_pct")), 2)[0],
                md.stat_cells([u[0] for u in ups if u[0] is not None], 1)[0],
                md.stat_cells([u[1] for u in ups if u[1] is not None], 0)[0],
                md.stat_cells(md.values(cap, lambda c: c.get("rtt_before_median_ms")), 2)[0],
                md.stat_cells(md.values(cap, lambda c: c.get("rtt_during_max_ms")), 0)[0],
            ]
        )
    few = md.fewest(*by.values())
    return md.table(header, rows, title="Per rate (BBM), seed 003 4.2.1", few=few)


def predicted_s(run: Raw, line: float) -> float | None:
    """The catch-up a backlog of rate x outage predicts at the spare (line - rate)."""
    gap = (run.get("capture") or {}).get("longest_gap_ms")
    rate = float(run["rate_mbps"])
    return None if gap is None or rate >= line else rate * gap / 1000 / (line - rate)


def rtt_before(by: Mapping[int, Sequence[Raw]]) -> dict[int, list[float]]:
    """Each rate's runs' median RTT before the switch (ms, the capture at vm2)."""
    return {
        rate: md.values(
            [r.get("capture") or {} for r in runs], lambda c: c.get("rtt_before_median_ms")
        )
        for rate, runs in by.items()
    }


def conclusions(by: Mapping[int, Sequence[Raw]], line: float) -> str:
    """Two sentences: the catch-up against the backlog model, and the saturated RTT."""
    peaks = [u[1] for runs in by.values() for r in runs if (u := catch_up(r))[1] is not None]
    if not peaks:
        return "No captured runs to conclude from."
    took, model = [], []
    for rate, runs in by.items():
        ups = [u[0] for r in runs if (u := catch_up(r))[0] is not None]
        pred = md.values(runs, lambda r: predicted_s(r, line))
        if ups:
            took.append(f"{rate}: {statistics.fmean(ups):.1f} s")
            model.append(f"{statistics.fmean(pred):.1f} s" if pred else "none")
    rtt = rtt_before(by)
    below = [v for rate in by if rate < line for v in rtt[rate]]
    full = rtt.get(int(line), [])
    saturated = (
        f" RTT before the switch was {statistics.median(below):.2f} ms below the line rate and"
        f" {statistics.median(full):.2f} ms at it (seed: 0.4-0.6 ms, ~2 ms saturated)."
        if below and full
        else ""
    )
    return (
        f"After the dark circuit the sender cleared its backlog at up to {max(peaks):.0f} Mbit/s"
        f" (line {line:.0f}) for {', '.join(took)} (rate x outage / (line - rate) predicts"
        f" {', '.join(model)}), then settled at its rate, as seed 003 saw at 9.4 of 10"
        f" Gbit/s; at the line rate itself no capacity is left to catch up." + saturated
    )


def _fig_throughput(by: Mapping[int, Sequence[Raw]], out: Path, line: float) -> str:
    fig = plots.grid(
        len(by), seed="003 Figure 4.6", title="throughput at different data rates", share=True
    )
    for k, (ax, (rate, runs)) in enumerate(zip(plots.axes(fig), by.items(), strict=False)):
        for r in runs:
            got = _series_100ms(r)
            if got:
                ax.step(got[0], got[1], where="post", lw=0.8, color=plots.COLORS["bbm"], alpha=0.7)
        ax.axhline(line, color="k", ls=":", lw=0.8)
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_title(f"({'abcdefghij'[k % 10]}) {rate} Mbit/s ({len(runs)} runs)", fontsize=9)
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("Mbit/s at vm3 (100 ms)")
        ax.set_ylim(0, line * 1.2)
    return plots.save(fig, out / "fig4_6_throughput_rates.png")


def _fig_rtt(by: Mapping[int, Sequence[Raw]], out: Path) -> str:
    fig = plots.grid(
        len(by), seed="003 Figure 4.7", title="RTT at different data rates", share=True
    )
    for k, (ax, (rate, runs)) in enumerate(zip(plots.axes(fig), by.items(), strict=False)):
        for r in runs[:1]:
            trace = (r.get("capture") or {}).get("trace")
            if not trace:
                continue
            pts = [
                (i * trace["bin_ms"] - trace["request_ms"], v)
                for i, v in enumerate(trace["rtt_max_ms"])
                if v is not None
            ]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=1.5, color="tab:purple")
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_ylim(bottom=0)
        ax.set_title(f"({'abcdefghij'[k % 10]}) {rate} Mbit/s: {runs[0]['key']}", fontsize=9)
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("TCP RTT (ms, capture)")
    return plots.save(fig, out / "fig4_7_rtt_rates.png")
