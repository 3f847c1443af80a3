"""``ost-vs-mbb``: seed 003 section 4.2.4 (Tables 4.2 and 4.7), many runs of each strategy.

N repetitions of BBM (seed 003's "OST", plain optical switching) and N of MBB, interleaved
(bbm-01, mbb-01, bbm-02, ...) so that a drift of the machine's load touches both alike, the
two of a pair meeting the same lock time (:func:`experiments.ostbench.paired_lock_ms`).
Each one is :func:`experiments.ostbench.measure`: seed 003's own metrics from packet
captures at vm2 and vm3 (unavailability, retransmitted / sent, RTT), beside ours (the UDP
probe's longest gap and loss, iperf3's counters, ping), the reroute's timings and the
fabric's own drops. Parameters: ``experiments/configs/ost-vs-mbb.yaml``.

``--backend`` picks how the four packet switches are programmed (the testbed is the same),
from :mod:`experiments.backends`. Runs of several backends may share one ``--out`` (their
raw files are named ``BACKEND-bbm-01``, ovs's plain ``bbm-01``): the report then covers
each, side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from experiments import backends as bk
from experiments import markdown as md
from experiments import ostbench, plots
from experiments.config import Config, typed
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Written
from experiments.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("bbm", "mbb")
# seed 003 Table 4.3: switch polling + transceiver locking (ms)
SEED_LOCK = {"mean": 605.0, "std": 115.0, "min": 529.0, "p50": 532.0, "p75": 786.0, "max": 834.0}
SEED_GAP = {"bbm": 598.0, "mbb": 121.0}  # seed 003 chapter 5: link unavailability, ms
SEED_LOSS = {"bbm": 2.8, "mbb": 0.93}  # retransmitted / sent, %
# seed 003 4.2.4 on Figure 4.15: OST "between two and three times" RTO_min (200 ms); MBB
# "75% of the link unavailability is below 200ms ... one half ... is below 20ms"
SEED_GAP_BAND = {"bbm": (400.0, 600.0)}
SEED_GAP_QUANTILES = {"mbb": ((20.0, 0.5), (200.0, 0.75))}
Get = Callable[[Mapping[str, Any]], Any]


class OstConfig(ostbench.BenchConfig):
    lock: Literal["paired", "table"] | float = Field(
        "paired",
        description="paired: one Table 4.3 draw per pair of runs; table: the emulator draws"
        " per connection; a number: that fixed lock time (ms)",
    )


def _timing(key: str) -> Get:
    return lambda r: None if r["timing"] is None else r["timing"][key]


def _get(key: str) -> Get:
    """A raw key that older raw files lack (None: not measured by the commit that ran them)."""
    return lambda r: r.get(key)


def _cap(key: str) -> Get:
    return lambda r: (r.get("capture") or {}).get(key)


def _overhead_ms(raw: Raw) -> float | None:
    """Request -> new path beyond the emulator's switching + drawn lock: the engine's and
    the backend's own time."""
    t = raw["timing"]
    return None if t is None else float(t["new_path_ms"]) - float(t["dark_ms"])


# label, how to read it from a raw document, digits, seed 003's (BBM, MBB)
METRICS: tuple[tuple[str, Get, int, tuple[str, str]], ...] = (
    (
        "**TCP unavailability: longest gap at the sender, vm2 (ms)** [capture]",
        _cap("sender_gap_ms"),
        1,
        ("598", "121"),
    ),
    (
        "TCP: longest gap in the data arriving at the receiver, vm3 (ms) [capture]",
        _cap("longest_gap_ms"),
        1,
        (md.NONE, md.NONE),
    ),
    (
        "**TCP loss: retransmitted / sent segments (%)** [capture]",
        _cap("retransmitted_pct"),
        2,
        ("2.8", "0.93"),
    ),
    (
        "**TCP RTT max during the switch (ms)** [capture]",
        _cap("rtt_during_max_ms"),
        1,
        ("100s", "2.5"),
    ),
    (
        "TCP RTT before the switch, median (ms) [capture]",
        _cap("rtt_before_median_ms"),
        2,
        ("0.4-0.6", "0.4-0.6"),
    ),
    (
        "TCP segments lost in the network (%) [capture: sent - arrived]",
        _cap("lost_pct"),
        2,
        (md.NONE, md.NONE),
    ),
    (
        "UDP probe: longest gap (ms) [ours]",
        lambda r: r["udp"]["longest_gap_ms"],
        1,
        ("(598)", "(121)"),
    ),
    ("UDP probe loss (%) [ours]", lambda r: r["udp"]["loss_pct"], 2, (md.NONE, md.NONE)),
    (
        "TCP retransmitted / sent (%) [iperf3 counters]",
        lambda r: r.get("tcp_loss_pct"),
        2,
        ("(2.8)", "(0.93)"),
    ),
    ("TCP dip (% of median rate) [iperf3]", lambda r: r["tcp"]["dip_pct"], 0, ("60", "6")),
    (
        "TCP time below half rate (ms) [iperf3]",
        lambda r: r["tcp"]["stalled_ms"],
        0,
        (md.NONE, md.NONE),
    ),
    (
        "RTT max during the switch, answered pings only (ms) [ping]",
        lambda r: r["rtt"]["during_max_ms"],
        1,
        (md.NONE, md.NONE),
    ),
    ("pings answered in the window", lambda r: r["rtt"]["during_replies"], 0, (md.NONE, md.NONE)),
    ("request -> traffic on new path (ms)", _timing("new_path_ms"), 0, (md.NONE, md.NONE)),
    ("emulator switching + lock time (ms)", _timing("dark_ms"), 0, ("630", "630")),
    ("new path - (switching + lock): engine and backend (ms)", _overhead_ms, 0, (md.NONE, md.NONE)),
    ("dropped by the fabric itself (OVS rx)", lambda r: r["fabric_drops"], 0, (md.NONE, md.NONE)),
    ("dropped by the capped line's queue (tc)", _get("line_drops"), 0, (md.NONE, md.NONE)),
    (
        "OVS sends failed, packets lost uncounted (its log; 0: none)",
        _get("send_failures"),
        0,
        (md.NONE, md.NONE),
    ),
)


class OstVsMbb:
    name = "ost-vs-mbb"
    title = "break-before-make (plain optical switching) vs make-before-break, seed 003 4.2.4"
    backends: tuple[str, ...] = bk.ost_backends()
    config_model: type[Config] = OstConfig

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions: each strategy, ``runs`` times, pairs interleaved."""
        cfg = typed(opts.config, OstConfig)
        prefix = "" if opts.backend == "ovs" else f"{opts.backend}-"
        return [
            Rep(
                key=f"{prefix}{s}-{i:02d}",
                params={
                    "strategy": s,
                    "pair": i,
                    "lock_ms": lock_for(cfg, opts.seed, i),
                    "lock_draw": "stratified" if cfg.lock == "paired" else None,
                },
            )
            for i in range(1, cfg.runs + 1)
            for s in STRATEGIES
        ]

    def session(
        self, opts: Options, say: Say, *, seed: int
    ) -> AbstractContextManager[tuple[ostbench.Bench, OstConfig]]:
        """The testbed of ``opts.backend`` with its traffic, for every repetition."""
        cfg = typed(opts.config, OstConfig)
        return _bench(opts.backend, cfg, say, seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One measured reconfiguration with ``rep``'s strategy and lock time."""
        bench, cfg = session
        lock = rep.params.get("lock_ms")
        if lock is not None:
            ostbench.set_lock(bench, float(lock))
        return ostbench.measure(bench, str(rep.params["strategy"]), cfg, say)

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        """The report from every backend's raw documents in ``out``'s ``raw/``."""
        backends = by_backend(raws)
        empty: dict[str, list[Raw]] = {s: [] for s in STRATEGIES}
        first = next(iter(backends.values()), empty)
        parts = [_setup(raws)]
        for backend, by in backends.items():
            parts.append(metrics_table(by, backend if len(backends) > 1 else None))
            parts.append(reading(by))
        if len(backends) > 1:
            parts.append(backends_table(backends))
        parts += [
            lock_table(raws),
            md.image(fig_unavailability(backends, out), "seed 003 Figure 4.15: unavailability"),
            md.image(fig_loss(backends, out), "seed 003 Figure 4.14: packet loss"),
            md.image(fig_throughput(first, out), "seed 003 Figure 4.12: throughput"),
            md.image(fig_rtt(first, out), "seed 003 Figure 4.13: RTT"),
            md.image(fig_lock(raws, out), "seed 003 Figure 4.2 / Table 4.3: lock times"),
        ]
        return Written(conclusions=conclusions(backends), body="\n".join(parts))

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 003's single-stream numbers (4.2.4, chapter 5) beside ours, per backend; the
        rows the seed gives only for a representative run, with one backend only."""
        backends = by_backend(raws)
        cfg = _config(raws)
        stream = f"{cfg.get('tcp_s', 7)} s at {cfg.get('tcp_mbps', 100)} Mbit/s"
        rows = []
        for backend, by in backends.items():
            rows += headline_rows(by, stream, backend if len(backends) > 1 else None)
        if len(backends) == 1:
            rows += detail_rows(next(iter(backends.values())))
        return rows


def lock_for(cfg: OstConfig, seed: int, pair: int) -> float | None:
    """The lock time pair ``pair`` runs with (None: the emulator draws its own)."""
    if cfg.lock == "paired":
        return ostbench.paired_lock_ms(seed, pair)
    if cfg.lock == "table":
        return None
    return float(cfg.lock)


@contextmanager
def _bench(backend: str, cfg: OstConfig, say: Say, seed: int) -> Any:
    topology = ROOT / "topologies" / str(bk.get(backend).ost)
    line = cfg.line_mbps
    with ostbench.bench(
        say, seed=seed, topology=topology, congestion=cfg.congestion, line_mbps=line
    ) as b:
        yield b, cfg


def _config(raws: Mapping[str, Raw]) -> dict[str, Any]:
    """The configuration of the last repetition that recorded one."""
    return next((dict(r["config"]) for r in reversed(list(raws.values())) if "config" in r), {})


def _setup(raws: Mapping[str, Raw]) -> str:
    cfg = _config(raws)
    probe, probe_s = cfg.get("probe_pps", 5000), cfg.get("probe_s", 4)
    tcp, tcp_s = cfg.get("tcp_mbps", 100), cfg.get("tcp_s", 7)
    lock = cfg.get("lock", "table")
    stratified = any(r.get("params", {}).get("lock_draw") == "stratified" for r in raws.values())
    locks = {
        "paired": "the two runs of a pair (and every backend's run i) meet the same lock time,"
        " one draw from seed 003 Table 4.3 per pair"
        + (
            ", stratified over its quantiles (pairs 1-4 one per quartile, 1-8 one per eighth, ...)"
            if stratified
            else " (independent draws: made before they were stratified)"
        ),
        "table": "the emulator draws each new connection's lock time from seed 003 Table 4.3",
    }.get(str(lock), f"every new connection locks after {lock} ms")
    return (
        f"vm2 -> vm3 on the long path: iperf3 TCP capped at {tcp} Mbit/s for {tcp_s} s (100 ms"
        f" reports), the UDP probe at {probe} pkt/s for {probe_s} s, a ping, and tcpdump at"
        f" vm2 and vm3; {ostbench.when_switched(cfg)} ost1 is reconfigured to"
        f" the short path, then the flows go back by an unmeasured MBB reroute;"
        f" {ostbench.line_said(cfg)}. Lock times:"
        f" {locks}. **Bold** rows are seed 003's metrics (Table 4.6) computed as the seed did,"
        " from the packets: the unavailability is the longest time vm2's sniffer saw no packet"
        " of the stream (the seed's tcpdump was on the sender's side), the receiver's gap"
        " beside it; retransmitted / sent is over the whole stream (seed 003: 20 s, the switch"
        " at 10 s). The seed's numbers in parentheses are set beside a different"
        " measurement of ours for orientation only. Seed 003's numbers are its chapter 5"
        " means at 10 Gbit/s; '630' is its 25 ms switch + 605 ms mean lock. BBM's numbers"
        " follow the emulator's lock model, MBB's do not (`lock-sweep` measures how).\n"
    )


def backend_of(raw: Raw) -> str:
    """The backend a repetition ran on (ovs for runs made before there was a choice)."""
    return str(raw.get("backend") or raw.get("params", {}).get("backend", "ovs"))


def by_backend(runs: Mapping[str, Raw]) -> dict[str, dict[str, list[Raw]]]:
    """Runs by backend (in the backends table's order), then by strategy."""
    found: dict[str, dict[str, list[Raw]]] = {}
    for backend in bk.ost_backends():
        mine = [r for _, r in sorted(runs.items()) if backend_of(r) == backend]
        if mine:
            found[backend] = {s: [r for r in mine if r["strategy"] == s] for s in STRATEGIES}
    return found


def metrics_table(by: Mapping[str, Sequence[Raw]], backend: str | None = None) -> str:
    """The metrics of each strategy as a Markdown table (titled with ``backend``'s name
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
    title = "Per run, BBM vs MBB"
    if backend is not None:
        title += f": backend {backend} (`topologies/{bk.get(backend).ost}`)"
    return md.table(header, rows, title=title, few=md.fewest(*by.values()))


def _mean(runs: Sequence[Raw], get: Get) -> float | None:
    vals = md.values(runs, get)
    return statistics.fmean(vals) if vals else None


def unavailability(r: Raw) -> Any:
    """The seed's unavailability: the gap at the sender (capture); the receiver's for runs
    recorded before it was measured, the probe's where there is no capture."""
    return _cap("sender_gap_ms")(r) or _cap("longest_gap_ms")(r) or r["udp"]["longest_gap_ms"]


def conclusions(backends: Mapping[str, Mapping[str, Sequence[Raw]]]) -> str:
    """Two sentences: what MBB changed, in the seed's metrics, and why."""
    every = {s: [r for by in backends.values() for r in by[s]] for s in STRATEGIES}
    gap = {s: _mean(every[s], unavailability) for s in STRATEGIES}
    loss = {
        s: _mean(every[s], lambda r: _cap("retransmitted_pct")(r) or r.get("tcp_loss_pct"))
        for s in STRATEGIES
    }
    if gap["bbm"] is None or gap["mbb"] is None:
        return "Not enough runs of both strategies to conclude anything."
    n = ", ".join(f"{len(by['bbm'])} + {len(by['mbb'])} on {b}" for b, by in backends.items())
    dark = _mean(every["bbm"], _timing("dark_ms")) or 0.0
    return (
        f"Make-before-break cut TCP's unavailability from {gap['bbm']:.0f} ms to"
        f" {gap['mbb']:.0f} ms and its retransmitted share from {loss['bbm'] or 0:.2f} % to"
        f" {loss['mbb'] or 0:.2f} % (seed 003: 598 -> 121 ms, 2.8 -> 0.93 %; {n} runs). BBM's"
        f" outage is the dark circuit (switching + lock, {dark:.0f} ms on average) stretched by"
        f" TCP's retransmission backoff, while MBB parks the traffic on the electrical path"
        f" until the circuit is lit: {_retransmitted(every['mbb'])}."
    )


def _retransmitted(runs: Sequence[Raw]) -> str:
    """How many of ``runs`` retransmitted nothing, said so that none and all read right."""
    counts = [_cap("retransmitted")(r) or 0 for r in runs]
    some = sorted(c for c in counts if c)
    if not some:
        return f"none of its {len(counts)} runs retransmitted anything"
    typical = f"median {statistics.median(some):g} packets"
    if len(some) == len(counts):
        return f"each of its {len(counts)} runs retransmitted a little ({typical})"
    return (
        f"{len(counts) - len(some)} of its {len(counts)} runs retransmitted nothing, the other"
        f" {len(some)} a little ({typical})"
    )


def reading(by: Mapping[str, Sequence[Raw]]) -> str:
    """Why rows that look backwards are not: the ping RTT and the time to the new path."""
    lines = []
    answered = {s: _mean(by[s], lambda r: r["rtt"]["during_replies"]) for s in STRATEGIES}
    expected = next((r["rtt"]["expected_replies"] for s in STRATEGIES for r in by[s]), None)
    ping = {s: _mean(by[s], lambda r: r["rtt"]["during_max_ms"]) for s in STRATEGIES}
    tcp = {s: _mean(by[s], _cap("rtt_during_max_ms")) for s in STRATEGIES}
    if None not in answered.values() and None not in ping.values():
        lines.append(
            f"*RTT max (ping)* counts answered pings only: BBM answered {answered['bbm']:.0f}"
            f" of {expected} in the window (the pings sent into the dark circuit were lost,"
            f" so their wait is in no RTT), MBB {answered['mbb']:.0f}; so BBM's"
            f" {ping['bbm']:.1f} ms against MBB's {ping['mbb']:.1f} ms says nothing about the"
            " switch."
            + (
                f" The TCP RTT from the capture does count the wait of a segment sent into the"
                f" dark: BBM {tcp['bbm']:.0f} ms, MBB {tcp['mbb']:.1f} ms (seed 003: hundreds"
                " of ms against 2.5 ms)."
                if None not in tcp.values()
                else ""
            )
        )
    new = {s: _mean(by[s], _timing("new_path_ms")) for s in STRATEGIES}
    lock = {s: _mean(by[s], _timing("lock_ms")) for s in STRATEGIES}
    over = {s: _mean(by[s], _overhead_ms) for s in STRATEGIES}
    if None not in new.values() and None not in lock.values() and None not in over.values():
        same = abs((lock["bbm"] or 0) - (lock["mbb"] or 0)) < 0.5
        why = (
            "both met the same lock times (paired draws)"
            if same
            else f"they met different lock draws (BBM's mean {lock['bbm']:.0f} ms, MBB's"
            f" {lock['mbb']:.0f} ms)"
        )
        lines.append(
            f"*request -> traffic on new path* is BBM {new['bbm']:.0f} ms against MBB"
            f" {new['mbb']:.0f} ms: {why}, and beyond the dark time MBB spends"
            f" {over['mbb']:.0f} ms (parking the traffic first, the swap after the lock)"
            f" where BBM spends {over['bbm']:.0f} ms. MBB is not faster to the new path; its"
            " traffic is never without one."
        )
    return "".join(f"- {line}\n" for line in lines) + ("\n" if lines else "")


BACKEND_METRICS: tuple[tuple[str, Get, int], ...] = (
    ("MBB TCP unavailability, sender (ms) [capture]", _cap("sender_gap_ms"), 1),
    ("MBB TCP gap at the receiver (ms) [capture]", _cap("longest_gap_ms"), 1),
    ("MBB retransmitted / sent (%) [capture]", _cap("retransmitted_pct"), 2),
    ("MBB UDP probe gap (ms)", lambda r: r["udp"]["longest_gap_ms"], 1),
    ("MBB request -> new path (ms)", _timing("new_path_ms"), 0),
    ("MBB new path - dark time (ms)", _overhead_ms, 0),
)


def backends_table(backends: Mapping[str, Mapping[str, Sequence[Raw]]]) -> str:
    """MBB's numbers of each backend in one table (mean [95 % CI], n)."""
    header = ["backend", "topology", *(label for label, _, _ in BACKEND_METRICS)]
    header.append("BBM TCP unavailability, sender (ms) [capture]")
    rows = []
    for backend, by in backends.items():
        row = [backend, f"`{bk.get(backend).ost}`"]
        for _, get, digits in BACKEND_METRICS:
            row.append(md.mean_ci(md.values(by["mbb"], get), digits))
        rows.append([*row, md.mean_ci(md.values(by["bbm"], _cap("sender_gap_ms")), 1)])
    few = md.fewest(*(by["mbb"] for by in backends.values()))
    return md.table(header, rows, title="Backends side by side (MBB; BBM for reference)", few=few)


def pair_locks(raws: Mapping[str, Raw]) -> list[float]:
    """The lock times the runs met, each draw once: one per pair with paired draws (the
    same pair on several backends counts once), one per run when the emulator drew."""
    seen: dict[Any, float] = {}
    for key, r in raws.items():
        lock = (r.get("timing") or {}).get("lock_ms")
        if lock is None:
            continue
        drawn = r.get("params", {}).get("lock_ms")
        ident = ("pair", r.get("seed"), r["params"].get("pair")) if drawn is not None else key
        seen.setdefault(ident, float(lock))
    return list(seen.values())


def lock_table(raws: Mapping[str, Raw]) -> str:
    """The lock times met (each draw once) as a Markdown table beside Table 4.3."""
    drawn = pair_locks(raws)
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
    title = f"The lock times met (n = {len(drawn)} draws) vs seed 003 Table 4.3"
    return md.table(["ms", "drawn here", "seed 003 (485 runs)"], rows, title=title)


def fig_unavailability(
    backends: Mapping[str, Mapping[str, Sequence[Raw]]],
    out: Path,
    *,
    number: str = "4.15",
    seed: Mapping[str, float] = SEED_GAP,
) -> str:
    """Seed 003 Figure 4.15 (4.21: dual stream): (a) BBM/OST, (b) MBB, a CDF per backend
    each; the file."""
    fig = plots.figure(
        1, 2, size=(11, 4), seed=f"003 Figure {number}", title="link unavailability", sharex=True
    )
    for ax, s in zip(plots.axes(fig), STRATEGIES, strict=True):
        for backend, by in backends.items():
            gaps = md.values(by[s], unavailability)
            if gaps:
                plots.cdf(ax, gaps, label=backend, color=bk.colour(backend))
        ax.axvline(seed[s], ls=":", color="k", label=f"seed 003 mean {seed[s]:.0f} ms")
        if number == "4.15" and s in SEED_GAP_QUANTILES:
            plots.seed_quantiles(
                ax, SEED_GAP_QUANTILES[s], label="seed 003: half below 20 ms, 75 % below 200"
            )
        if number == "4.15" and s in SEED_GAP_BAND:
            low, high = SEED_GAP_BAND[s]
            ax.axvspan(low, high, color="0.9", label="seed 003: 2-3 x RTO_min")
        ax.set_title(f"({'ab'[STRATEGIES.index(s)]}) {plots.SEED_NAMES[s]}", fontsize=9)
        ax.set_xlabel("longest gap at the sender (ms, capture)")
        ax.set_xlim(left=0)
        ax.legend(fontsize=7, loc="upper left")
    return plots.save(fig, out / f"fig{number.replace('.', '_')}_unavailability.png")


def fig_loss(
    backends: Mapping[str, Mapping[str, Sequence[Raw]]],
    out: Path,
    *,
    number: str = "4.14",
    seed: Mapping[str, float] = SEED_LOSS,
) -> str:
    """Seed 003 Figure 4.14 (4.20: dual stream): retransmitted / sent per run, (a) BBM,
    (b) MBB; the file."""
    fig = plots.figure(
        1, 2, size=(11, 3.8), seed=f"003 Figure {number}", title="packet loss", sharey=True
    )
    get = _cap("retransmitted_pct")
    for ax, s in zip(plots.axes(fig), STRATEGIES, strict=True):
        groups = {b: md.values(by[s], get) for b, by in backends.items()}
        colors = {b: bk.colour(b) for b in backends}
        plots.strip(ax, groups, colors=colors)
        ax.axhline(seed[s], ls=":", color="k", label=f"seed 003 mean {seed[s]} %")
        ax.set_title(f"({'ab'[STRATEGIES.index(s)]}) {plots.SEED_NAMES[s]}", fontsize=9)
        ax.set_ylabel("retransmitted / sent segments (%)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return plots.save(fig, out / f"fig{number.replace('.', '_')}_loss.png")


def typical(runs: Sequence[Raw]) -> Raw | None:
    """The run whose unavailability is the median of its strategy's."""
    ranked = sorted(runs, key=lambda r: unavailability(r) or 0.0)
    return ranked[len(ranked) // 2] if ranked else None


def _trace_axis(run: Raw) -> tuple[list[float], dict[str, Any]] | None:
    trace = (run.get("capture") or {}).get("trace")
    if not trace or not trace["rx_mbps"]:
        return None
    step = trace["bin_ms"]
    xs = [i * step - trace["request_ms"] for i in range(len(trace["rx_mbps"]))]
    return xs, trace


def _marks(ax: Any, run: Raw) -> None:
    ax.axvline(0, color="k", ls="--", lw=1, label="reconfiguration requested")
    if run["timing"] is not None and run.get("circuits_ms") is not None:
        t, start = run["timing"], run["circuits_ms"]
        ax.axvspan(start, start + t["lock_ms"], color="orange", alpha=0.2, label="lock time")
        ax.axvline(t["new_path_ms"], color="green", ls="--", lw=1, label="traffic on new path")


def fig_throughput(by: Mapping[str, Sequence[Raw]], out: Path) -> str:
    """Seed 003 Figure 4.12: a typical run's TCP throughput at vm3, (a) BBM, (b) MBB."""
    fig = plots.figure(
        1, 2, size=(11, 3.8), seed="003 Figure 4.12", title="throughput", sharey=True
    )
    for ax, s in zip(plots.axes(fig), STRATEGIES, strict=True):
        run = typical(by[s])
        axis = None if run is None else _trace_axis(run)
        if run is None or axis is None:
            continue
        xs, trace = axis
        w = 10  # 100 ms windows of the 10 ms bins, as the seed's plots smooth
        ys = [sum(trace["rx_mbps"][i : i + w]) / w for i in range(0, len(xs), w)]
        ax.step(xs[::w], ys, where="post", color=plots.COLORS[s], lw=1)
        _marks(ax, run)
        ax.set_title(
            f"({'ab'[STRATEGIES.index(s)]}) {plots.SEED_NAMES[s]}: {run['key']}", fontsize=9
        )
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("Mbit/s at vm3 (capture, 100 ms)")
        ax.set_xlim(-1000, 3000)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="lower right")
    return plots.save(fig, out / "fig4_12_throughput.png")


def fig_rtt(by: Mapping[str, Sequence[Raw]], out: Path, *, number: str = "4.13") -> str:
    """Seed 003 Figure 4.13 (4.19: dual stream): a typical run's TCP RTT (capture), (a) BBM,
    (b) MBB."""
    fig = plots.figure(1, 2, size=(11, 3.8), seed=f"003 Figure {number}", title="RTT", sharey=True)
    for ax, s in zip(plots.axes(fig), STRATEGIES, strict=True):
        run = typical(by[s])
        axis = None if run is None else _trace_axis(run)
        if run is None or axis is None:
            continue
        xs, trace = axis
        pts = [(x, y) for x, y in zip(xs, trace["rtt_max_ms"], strict=True) if y is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=2, color=plots.COLORS[s])
        _marks(ax, run)
        ax.set_ylim(bottom=0)
        ax.set_title(
            f"({'ab'[STRATEGIES.index(s)]}) {plots.SEED_NAMES[s]}: {run['key']}", fontsize=9
        )
        ax.set_xlabel("ms after the request")
        ax.set_ylabel("TCP RTT (ms, capture; max per 10 ms)")
        ax.set_xlim(-1000, 3000)
        ax.legend(fontsize=7, loc="upper right")
    return plots.save(fig, out / f"fig{number.replace('.', '_')}_rtt.png")


def fig_lock(raws: Mapping[str, Raw], out: Path) -> str:
    """Seed 003 Figure 4.2 / Table 4.3: the lock times met, each draw once."""
    drawn = pair_locks(raws)
    fig = plots.figure(seed="003 Figure 4.2 / Table 4.3", title="transceiver lock times")
    (ax,) = plots.axes(fig)
    ax.hist(drawn, bins=20, range=(500, 860), color="tab:purple", label=f"met (n={len(drawn)})")
    for k, style in (("mean", "-"), ("p50", "--"), ("p75", "-."), ("min", ":"), ("max", ":")):
        ax.axvline(
            SEED_LOCK[k], color="k", ls=style, lw=1, label=f"seed 003 {k} {SEED_LOCK[k]:.0f}"
        )
    ax.set_xlabel("transceiver lock time (ms)")
    ax.set_ylabel("draws")
    ax.legend(fontsize=7)
    return plots.save(fig, out / "fig4_2_lock_times.png")


# --- seed 003's numbers beside ours (`reroute experiment seeds`) ---------------------------

SEED_N = "50 (4.2.4: fifty runs of each)"
_HEADLINE = (  # a METRICS label's words, the metric as the side-by-side table names it
    ("TCP unavailability", "TCP unavailability: longest gap at the sender (ms)"),
    ("TCP loss", "TCP loss: retransmitted / sent segments (%)"),
)
_HEADLINE_NOTES = {
    ("TCP unavailability", "bbm"): "both from a capture at the sender; BBM's follows the"
    " emulated lock time (Table 4.3 draws; lock-sweep)",
    ("TCP unavailability", "mbb"): "both from a capture at the sender; the seed parked the"
    " traffic for a fixed 1 s, ours until the new circuit is up",
    ("TCP loss", "bbm"): "4.2.4 reads an average of 2 % (max 9.5 %) off Figure 4.14",
    ("TCP loss", "mbb"): "4.2.4 reads an average of 0.9 % (max 3.4 %) off Figure 4.14",
}


def _metric(words: str) -> tuple[Get, int, tuple[str, str]]:
    """The getter, digits and seed 003 values of the METRICS row whose label has ``words``."""
    return next((get, digits, seed) for label, get, digits, seed in METRICS if words in label)


def _ours(runs: Sequence[Raw], get: Get, digits: int) -> tuple[str, str]:
    """Our cell (mean [95 % CI], the values below 5 runs) and n, as the report's tables."""
    vals = md.values(runs, get)
    return md.stat_cells(vals, digits)[0], str(len(vals))


def headline_rows(
    by: Mapping[str, Sequence[Raw]], stream: str, backend: str | None = None
) -> list[SeedRow]:
    """Seed 003's unavailability and loss (chapter 5) of each strategy beside ours; the
    backend is named when there are several."""
    rows = []
    for words, metric in _HEADLINE:
        get, digits, seed = _metric(words)
        for s, value in zip(STRATEGIES, seed, strict=True):
            ours, n = _ours(by[s], get, digits)
            notes = [f"backend {backend}"] if backend else []
            notes.append(_HEADLINE_NOTES[(words, s)])
            if words == "TCP loss":
                notes.append(f"seed: a 20 s stream at 10 Gbit/s, ours {stream}")
            rows.append(
                SeedRow(
                    metric=f"{plots.SEED_NAMES[s]}: {metric}",
                    source="003 ch. 5; 4.2.4",
                    seed=value,
                    seed_n=SEED_N,
                    ours=ours,
                    ours_n=n,
                    note="; ".join(notes),
                )
            )
    return rows


def detail_rows(by: Mapping[str, Sequence[Raw]]) -> list[SeedRow]:
    """The seed's MBB quantiles (Figure 4.15), its RTT (Figure 4.13) and throughput dip
    (Figure 4.12) beside ours."""
    gap, _, _ = _metric("TCP unavailability")
    mbb = md.values(by["mbb"], gap)
    limits = SEED_GAP_QUANTILES["mbb"]
    share = [100 * sum(v < ms for v in mbb) / len(mbb) for ms, _ in limits] if mbb else []
    rows = [
        SeedRow(
            metric="MBB: runs with the unavailability below "
            + " / ".join(f"{ms:.0f}" for ms, _ in limits)
            + " ms (%)",
            source="003 4.2.4 on Figure 4.15",
            seed=" / ".join(f"{100 * q:.0f}" for _, q in limits),
            seed_n=SEED_N,
            ours=" / ".join(f"{v:.0f}" for v in share) or md.NONE,
            ours_n=str(len(mbb)),
            note="the sender's gap, as the rows above",
        )
    ]
    rtt, digits, _ = _metric("TCP RTT max")
    for s, said in zip(STRATEGIES, ("hundreds", "2.5 at most"), strict=True):
        ours, n = _ours(by[s], rtt, digits)
        rows.append(
            SeedRow(
                metric=f"{plots.SEED_NAMES[s]}: TCP RTT max during the switch (ms)",
                source="003 4.2.4 (Figure 4.13); ch. 5",
                seed=said,
                seed_n="n not stated (Figure 4.13: one representative run)",
                ours=ours,
                ours_n=n,
                note="both TCP's RTT from a capture at the sender; ours the mean of each"
                " run's maximum",
            )
        )
    dip, digits, seed = _metric("TCP dip")
    for s, value in zip(STRATEGIES, seed, strict=True):
        ours, n = _ours(by[s], dip, digits)
        rows.append(
            SeedRow(
                metric=f"{plots.SEED_NAMES[s]}: TCP throughput dip (% of the rate)",
                source="003 4.2.4 (Figure 4.12); ch. 5",
                seed=f"{value} ({float(value) / 10:g} of 10 Gbit/s)",
                seed_n="1 (Figure 4.12: a representative run)",
                ours=ours,
                ours_n=n,
                note="not the same measurement: the seed's rate at the sender at 10 Gbit/s,"
                " ours iperf3's 100 ms rate at the receiver against its median",
            )
        )
    return rows
