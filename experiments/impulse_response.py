"""``impulse-response``: seed 000 sections IV-V (Table I, Figures 8-11) on the two-site fabric.

A train of n degradations, one every T seconds (path switching or rtt extension, see
:mod:`experiments.impulse_train`), each detected by both sites' ``reroute monitor`` and failed
over by both sites' ``reroute serve``, with a TCP stream sampled every 100 ms throughout. Per
configuration (backend x degradation x extra flows) the responses R_i(t) = B - T(t) aligned
at the degradation start, their mean with a bootstrap band, and the time to 90 % recovery
(:mod:`experiments.impulse_analysis`). Parameters: ``experiments/configs/impulse-response.yaml``.

``--backend`` picks the two-site topology from :mod:`experiments.backends` (seed 000 Table I
configurations: dpctl A, odl C (path) and D (rtt), odl-local B, dpctl+10 / +100 Figure 11;
ovs and p4runtime have no seed analogue). Configuration E (ODL, rtt extension, Cisco
switches) differs from D only in the switch hardware, which this fabric has one kind of:
it is not run (experiments/README.md says why).

Runs of several backends may share one ``--out``: the report covers every train in
``raw/`` (so ODL vs dpctl and the per-backend means appear once both ran there).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from pydantic import Field

from experiments import backends as bk
from experiments import impulse_analysis as ia
from experiments import markdown as md
from experiments import plots
from experiments.config import Config, typed
from experiments.impulse_train import Train, run_train
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Written
from experiments.stats import mean_band
from services.reroute.model.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[1]
DEGRADATIONS = ("path", "rtt")
RELATIVE_COLORS = {"path": "tab:green", "rtt": "tab:olive"}
SEED_RELATIVE = "2-3 s in the majority of cases"
SEED_N = "100 + 100 path degradations, T = 50 s"  # seed 000 Figures 10 and 11
# (slower, faster configuration, what seed 000 says of their difference, where)
SEED_PAIRS = (
    ("odl-path", "dpctl-path", SEED_RELATIVE, "000 Figure 10b"),
    ("odl-path", "dpctl+10-path", "2-3 s on average", "000 Figure 11b"),
    ("odl-path", "dpctl+100-path", "2-3 s on average", "000 Figure 11b"),
    ("dpctl+10-path", "dpctl-path", "no significant difference", "000 Figure 11b"),
    ("dpctl+100-path", "dpctl-path", "no significant difference", "000 Figure 11b"),
)


class ImpulseConfig(Config):
    n: int = Field(10, ge=1, description="degradations per train")
    n_by_config: dict[str, int] = Field({}, description="n of a configuration, e.g. odl-path")
    max_n: int = Field(
        25, ge=1, description="a train of more degradations runs as trains of at most this many"
    )
    period_s: float = Field(10.0, gt=1, description="T: a degradation every T s")
    period_s_by_backend: dict[str, float] = Field({}, description="T of a backend")
    window_bytes: int = Field(65536, ge=4096, description="iperf3 -w (see impulse_train)")
    long_ms: float = Field(15.0, gt=0, description="one-way delay of the long path / extension")
    trigger_ms: float = Field(10.0, gt=0, description="the monitors' rtt trigger")
    clear_ms: float = Field(5.0, gt=0, description="the monitors' rtt clear threshold")
    odl_stats_s: float = Field(3.0, gt=0, description="the ODL emulator's statistics poll")
    congestion: str = Field(
        "cubic", pattern=r"^[a-z0-9_]+$", description="the TCP senders' congestion control"
    )


def train_sizes(n: int, max_n: int) -> list[int]:
    """A train of ``n`` degradations as repetitions of at most ``max_n`` each, as even as
    can be (100 by 25: 4 x 25; 30 by 25: 15 + 15): each is written once complete, so an
    interruption loses at most one piece, and the report pools them by configuration."""
    pieces = -(-n // max_n)
    return [n // pieces + (1 if i < n % pieces else 0) for i in range(pieces)]


def configurations(backend: str) -> tuple[tuple[str, int], ...]:
    """(degradation, extra flows) a backend runs: extra flows and local mode path only."""
    b = bk.get(backend)
    if b.extra_flows or b.local:
        return (("path", b.extra_flows),)
    return (("path", 0), ("rtt", 0))


def config_name(backend: str, degradation: str, extra: int) -> str:
    """``dpctl-path``; with extra flows the backend names them already (``dpctl+10-path``)."""
    named = extra == 0 or backend.endswith(f"+{extra}")
    return f"{backend}-{degradation}" + ("" if named else f"-x{extra}")


def label(name: str) -> str:
    """A configuration with its seed 000 letter: ``dpctl-path (A)``."""
    letter = bk.seed_000_letter(_backend(name), name.rsplit("-", 1)[-1])
    return f"{name} ({letter})" if letter else name


class ImpulseResponse:
    name = "impulse-response"
    title = "trains of degradations, response means with bootstrap bands; seed 000 IV-V"
    backends: tuple[str, ...] = bk.impulse_backends()
    config_model: type[Config] = ImpulseConfig

    def plan(self, opts: Options) -> list[Rep]:
        cfg = typed(opts.config, ImpulseConfig)
        period = cfg.period_s_by_backend.get(opts.backend, cfg.period_s)
        reps = []
        for deg, extra in configurations(opts.backend):
            name = config_name(opts.backend, deg, extra)
            n = cfg.n_by_config.get(name, cfg.n)
            sizes = train_sizes(n, cfg.max_n)
            for i in range(cfg.runs * len(sizes)):
                params = {"degradation": deg, "extra_flows": extra, "n": sizes[i % len(sizes)]}
                params["period_s"] = period
                if len(sizes) > 1:  # one of the pieces of an n-degradation train
                    params["piece_of"] = n
                reps.append(Rep(key=f"{name}-{i + 1:02d}", params=params))
        return reps

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        return _topology(opts.backend, typed(opts.config, ImpulseConfig), say)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        topo, cfg = session
        p = rep.params
        train = Train(
            degradation=str(p["degradation"]),
            n=int(p["n"]),
            period_s=float(p["period_s"]),
            extra_flows=int(p["extra_flows"]),
            window_bytes=cfg.window_bytes,
            long_ms=cfg.long_ms,
            trigger_ms=cfg.trigger_ms,
            clear_ms=cfg.clear_ms,
            odl_stats_s=cfg.odl_stats_s,
            congestion=cfg.congestion,
        )
        say(f"{rep.key}: {train.n} x {train.degradation} every {train.period_s:g} s")
        return run_train(topo, train, rep.key)

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        configs = by_config(raws)
        responses = {c: [i for r in rs for i in ia.impulses(r)] for c, rs in configs.items()}
        parts = [_intro(configs), _pieces(configs), _table(configs, responses)]
        parts.append(md.image(_plot_single(responses, out), "seed 000 Figure 8"))
        parts.append(md.image(_plot_means(responses, out), "seed 000 Figures 9 and 10a"))
        parts.append(_relative(responses, out))
        parts.append(_extra_flows(responses, out))
        parts.append(_local_mode(responses))
        return Written(conclusions=conclusions(responses), body="\n".join(parts))

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 000's differences of recovery (Figures 10b, 11b) beside ours: the mean
        difference with its two-sample interval, every pair's median in the note."""
        configs = by_config(raws)
        responses = {c: [i for r in rs for i in ia.impulses(r)] for c, rs in configs.items()}
        rows = []
        for slow, fast, said, source in SEED_PAIRS:
            a, b = _recoveries(responses.get(slow, [])), _recoveries(responses.get(fast, []))
            if not a or not b:
                continue
            pairs = md.stat_cells([x - y for x in a for y in b], 2)[1]
            periods = sorted({r["period_s"] for c in (slow, fast) for r in configs[c]})
            rows.append(
                SeedRow(
                    metric=f"recovery to 90 % of B, {label(slow)} - {label(fast)} (s)",
                    source=source,
                    seed=said,
                    seed_n=SEED_N,
                    ours=md.difference_cell(a, b),
                    ours_n=f"{len(a)} / {len(b)} impulses",
                    note=f"every pair's difference: median / p95 {pairs} s (the seed's"
                    f" histogram is of pairs); ours T = {', '.join(f'{p:g}' for p in periods)} s,"
                    " throughput every 100 ms (the seed's every 1 s)",
                )
            )
        return rows


@contextmanager
def _topology(backend: str, cfg: ImpulseConfig, say: Say) -> Iterator[tuple[Topology, Any]]:
    topo = load_topology(ROOT / "topologies" / str(bk.get(backend).two_site))
    say(f"topology {topo.name}: a fabric per train")
    yield topo, cfg


def _key_backend(key: str) -> str:
    names = sorted(bk.BACKENDS, key=len, reverse=True)
    return next((b for b in names if key.startswith(f"{b}-")), key.split("-", 1)[0])


def by_config(trains: Mapping[str, Raw]) -> dict[str, list[Raw]]:
    """Trains grouped by configuration (backend, degradation, extra flows), in the backends
    table's order."""
    found: dict[str, list[Raw]] = {}
    for backend in bk.impulse_backends():
        for deg, extra in configurations(backend):
            name = config_name(backend, deg, extra)
            rs = [r for k, r in sorted(trains.items()) if k.rsplit("-", 1)[0] == name]
            if rs:
                found[name] = rs
    return found


def _intro(configs: Mapping[str, Sequence[Raw]]) -> str:
    periods = sorted({r["period_s"] for rs in configs.values() for r in rs})
    return (
        "Each train: iperf3 TCP client -> server sampled every 100 ms, a degradation every T s"
        f" (T = {', '.join(f'{p:g}' for p in periods)} s), both sites' `reroute monitor rtt`"
        " (50 Hz, 3 samples over the trigger) failing over to standby through their own"
        " `reroute serve`. *path*: the flows diverted onto the delay line; *rtt*: the delay"
        " line (the current connection, at 0 ms) raised, reset (and the flows moved back onto"
        " it) once both sites failed over. r(t) = R(t)/B = 1 - T(t)/B, B the median"
        " throughput in the second before the degradations; recovery: from the degradation to"
        " the first of 3 samples averaging above 90 % of B, after the first one below it."
        " *trigger*: the first site's monitor fired, *both failed over*: the later site's"
        " failover call returned (ms after the degradation, impulses where both did);"
        " *spurious*: triggers (either site) not within 2 s of a degradation; *injection"
        " errors*: degradations the network failed to inject (its move refused; the impulse"
        " then measures nothing). *dips*: 100 ms samples below half of B outside every"
        " response (after the recovery, or before the train's first degradation), the"
        " spikes of the single responses between the degradations; in brackets those where"
        " iperf3 counted retransmissions in the sample or the one before (marked x in the"
        " single responses): the stream lost"
        " packets there (the fabric's own drops; with its 64 KiB window TCP recovers such a"
        " loss by a retransmission timeout, rto_min 200 ms), so they are not the reroute's;"
        " a dip without retransmissions is the sender or the fabric held up (CPU)."
        " The letter is seed 000 Table I's configuration; its E (D on"
        " Cisco 3064 instead of HP 5406zl switches) is not run: this fabric has one kind of"
        " switch, so an E here would measure D again.\n"
    )


def _pieces(configs: Mapping[str, Sequence[Raw]]) -> str:
    """Which configurations ran their train in pieces (``max_n``), pooled here."""
    split = {
        name: (len(rs), sum(len(r["impulses"]) for r in rs))
        for name, rs in configs.items()
        if any("piece_of" in r.get("params", {}) for r in rs)
    }
    if not split:
        return ""
    listed = ", ".join(f"{name} ({k} trains, {n} impulses)" for name, (k, n) in split.items())
    return (
        f"Trains of more than `max_n` degradations ran as several shorter trains (a fabric,"
        f" and a baseline B, each), their impulses pooled: {listed}.\n"
    )


def _table(configs: Mapping[str, Sequence[Raw]], responses: Mapping[str, list[ia.Impulse]]) -> str:
    header = ["configuration", "seed 000", "trains", "impulses", "T (s)", "B (Mbit/s)"]
    header += ["recovery (s) mean [CI]", "median / p95", "of the mean (s)", "not recovered"]
    header += ["trigger (ms)", "both failed over (ms)", "spurious triggers", "injection errors"]
    header += ["dips outside the responses (with retransmissions)"]
    rows = []
    for name, rs in configs.items():
        imps = responses[name]
        rec = [i.recovery_s for i in imps if i.recovery_s is not None]
        cells = md.stat_cells(rec, 2)
        mean_rec = _mean_recovery(imps)
        trig = [i.trigger_s for i in imps if i.trigger_s is not None]
        done = [i.failover_s for i in imps if i.failover_s is not None]
        first = rs[0]
        letter = bk.seed_000_letter(_backend(name), first["degradation"]) or md.NONE
        rows.append(
            [
                name,
                letter,
                str(len(rs)),
                str(len(imps)),
                f"{first['period_s']:g}",
                f"{statistics.median([ia.baseline_mbps(r) for r in rs]):.0f}",
                cells[0],
                cells[1],
                md.NONE if mean_rec is None else f"{mean_rec:.2f}",
                str(len(imps) - len(rec)),
                _ms(trig),
                _ms(done),
                str(sum(ia.spurious_triggers(r) for r in rs)),
                str(sum("inject_error" in i for r in rs for i in r["impulses"])),
                _dips_cell(rs),
            ]
        )
    few = md.fewest(*responses.values())
    return md.table(header, rows, title="Recovery per configuration", few=few)


def _dips_cell(trains: Sequence[Raw]) -> str:
    """How many samples dipped below half of B outside the responses, and in how many of
    them the stream retransmitted (``-``: trains that did not record it)."""
    found = [d for r in trains for d in ia.train_dips(ia.impulses(r))]
    counted = [n for _, n in found if n is not None]
    if len(counted) < len(found):
        return f"{len(found)} (-)"
    return f"{len(found)} ({sum(1 for n in counted if n > 0)})"


def _backend(config: str) -> str:
    return _key_backend(config)


def _ms(vals: Sequence[float]) -> str:
    return md.NONE if not vals else f"{1000 * sum(vals) / len(vals):.0f}"


def _mean_recovery(imps: Sequence[ia.Impulse]) -> float | None:
    if not imps:
        return None
    n = ia.common_length(imps)
    mean = [statistics.fmean(i.r[k] for i in imps) for k in range(n)]
    return ia.recovery_s(imps[0].times[:n], mean)


def _recoveries(imps: Sequence[ia.Impulse]) -> list[float]:
    return [i.recovery_s for i in imps if i.recovery_s is not None]


def conclusions(responses: Mapping[str, list[ia.Impulse]]) -> str:
    """Two sentences: ODL against dpctl (the seed's finding) and what decides it."""
    diffs = []
    for deg in DEGRADATIONS:
        slow, fast = (
            _recoveries(responses.get(f"odl-{deg}", [])),
            _recoveries(responses.get(f"dpctl-{deg}", [])),
        )
        if slow and fast:
            diffs.append(f"{md.difference_cell(slow, fast, unit='s')} with {deg} degradations")
    means = {n: statistics.fmean(r) for n, imps in responses.items() if (r := _recoveries(imps))}
    if not means:
        return "No recovered impulses to conclude from."
    fastest = min(means, key=lambda n: means[n])
    slowest = max(means, key=lambda n: means[n])
    first = (
        f"ODL restored TCP later than dpctl by {'; '.join(diffs)} (mean difference, two-sample"
        f" bootstrap 95 % CI; seed 000: {SEED_RELATIVE}), the seed's direction but not its size."
        if diffs
        else f"Mean recovery ranged from {means[fastest]:.2f} s ({label(fastest)}) to"
        f" {means[slowest]:.2f} s ({label(slowest)})."
    )
    if not diffs:
        return (
            f"{first} Seed 000's comparison, ODL against dpctl, needs trains of both in this"
            " directory (`--backend odl` and `--backend dpctl` into the same `--out`)."
        )
    return (
        f"{first} The difference is ODL's statistics poll: a site's failover is confirmed only"
        " by a poll after its writes, while dpctl, OpenFlow 1.3 and P4Runtime confirm at once"
        " (see the poll sweep, odl-poll-sweep, for how the gap follows the poll interval)."
    )


def _plot_single(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    names = list(responses)
    fig = plots.grid(
        len(names), seed="000 Figure 8", title="impulse responses of single degradations", head=0.4
    )
    for ax, name in zip(plots.axes(fig), names, strict=False):
        for i, imp in enumerate(responses[name]):
            ax.plot(imp.times, imp.r, lw=0.7, alpha=0.6, color=bk.colour(_backend(name)))
            lost = [(t, v) for t, v in _dip_points(imp, i == 0) if v is not None]
            ax.scatter(
                [p[0] for p in lost], [p[1] for p in lost], marker="x", s=12, lw=0.8, color="k",
                zorder=4,
            )  # fmt: skip
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_title(f"{label(name)}: {len(responses[name])} impulses", fontsize=9)
        ax.set_xlabel("s after the degradation")
        ax.set_ylabel("R/B")
        ax.set_ylim(-0.5, 1.1)
    return plots.save(fig, out / "impulse_single.png")


def _dip_points(imp: ia.Impulse, first: bool) -> list[tuple[float, float | None]]:
    """Where a dip had retransmissions: (t, r), r None for the others."""
    r = dict(zip(imp.times, imp.r, strict=True))
    return [(t, r[t] if n else None) for t, n in ia.dips(imp, before=first)]


def _plot_means(
    responses: Mapping[str, list[ia.Impulse]],
    out: Path,
    *,
    only: Sequence[str] = (),
    seed: str = "000 Figures 9 and 10a",
    file: str = "impulse_means.png",
) -> str:
    names = [n for n in (only or responses) if responses.get(n)]
    degs = sorted({n.rsplit("-", 1)[-1] for n in names}) or ["path"]
    fig = plots.figure(1, len(degs), size=(6 * len(degs), 4.0), seed=seed, title="response means")
    styles = ["-", "--", ":", "-."]
    for ax, deg in zip(plots.axes(fig), degs, strict=True):
        for j, name in enumerate(n for n in names if n.rsplit("-", 1)[-1] == deg):
            imps = responses[name]
            n = ia.common_length(imps)
            mean, low, high = mean_band([i.r[:n] for i in imps])  # no band below 5 impulses
            times = imps[0].times[:n]
            color = bk.colour(_backend(name))
            ls = styles[j % len(styles)] if only else "-"
            ax.plot(times, mean, color=color, ls=ls, lw=1.3, label=f"{label(name)}, n={len(imps)}")
            if low is not None and high is not None:
                ax.fill_between(times, low, high, color=color, alpha=0.2)
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.axhline(1 - ia.RECOVERED, color="gray", ls=":", lw=0.8)
        ax.set_title(f"{deg} degradation (95 % bootstrap band)", fontsize=9)
        ax.set_xlabel("s after the degradation")
        ax.set_ylabel("mean R/B")
        ax.set_xlim(
            -ia.PRE_S,
            min(8.0, max((i.times[-1] for n in names for i in responses[n]), default=8.0)),
        )
        ax.legend(fontsize=7)
    return plots.save(fig, out / file)


def _relative(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    head = "## ODL against dpctl: relative delays (seed 000 Figure 10b)\n\n"
    pairs = {  # degradation -> (ODL's recoveries, dpctl's)
        deg: (_recoveries(slow), _recoveries(fast))
        for deg, slow, fast in (
            (d, responses.get(f"odl-{d}"), responses.get(f"dpctl-{d}")) for d in DEGRADATIONS
        )
        if slow and fast
    }
    if not pairs:
        return head + "Needs trains of both odl and dpctl (one degradation) in this `raw/`.\n"
    if not all(a and b for a, b in pairs.values()):
        return head + "No recovered impulses to compare.\n"
    fig = plots.figure(1, 1, size=(6, 3.8), seed="000 Figure 10b", title="relative delays")
    ax = plots.axes(fig)[0]
    rows = []
    for deg, (slow, fast) in pairs.items():
        letter = bk.seed_000_letter("odl", deg)
        delays = [x - y for x in slow for y in fast]
        name = f"{deg}: ODL ({letter}) - dpctl ({bk.seed_000_letter('dpctl', deg) or '-'})"
        ax.hist(delays, bins=20, alpha=0.6, color=RELATIVE_COLORS[deg], label=name)
        cells = md.stat_cells(delays, 2)  # pairs are not independent: median / p95, no CI
        rows.append(
            [
                name,
                f"{len(slow)} / {len(fast)}",
                md.difference_cell(slow, fast),
                cells[1],
                SEED_RELATIVE,
            ]
        )
    ax.set_xlabel("recovery time ODL - dpctl (s), every pair of impulses")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=7)
    file = plots.save(fig, out / "impulse_relative_delays.png")
    few = min(min(len(a), len(b)) for a, b in pairs.values())
    table = md.table(
        [
            "degradation",
            "impulses ODL / dpctl",
            "mean difference (s) [two-sample 95 % CI]",
            "pairwise median / p95 (s)",
            "seed 000",
        ],
        rows,
        few=few,
    )
    return (
        head + "The interval resamples ODL's and dpctl's impulses independently (each impulse"
        " counted once); the histogram shows every pair's difference, as the seed's did.\n\n"
        + table
        + "\n"
        + md.image(file, "relative delays ODL vs dpctl")
    )


EXTRA_FLOWS = ("dpctl-path", "dpctl+10-path", "dpctl+100-path", "odl-path")  # Figure 11


def _extra_flows(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    head = "## dpctl with 10 and 100 extra flows, ODL for reference (seed 000 Figure 11)\n\n"
    have = [n for n in EXTRA_FLOWS if responses.get(n)]
    if len([n for n in have if n.startswith("dpctl")]) < 2:
        return head + "Needs trains of dpctl and dpctl+10 or dpctl+100 in this `raw/`.\n"
    file = _plot_means(
        responses, out, only=have, seed="000 Figure 11b", file="impulse_extra_flows.png"
    )
    return head + md.image(file, "dpctl, extra flows")


def _local_mode(responses: Mapping[str, list[ia.Impulse]]) -> str:
    head = "## ODL local (B) against remote (C) mode\n\n"
    local, remote = (
        _recoveries(responses.get("odl-local-path", [])),
        _recoveries(responses.get("odl-path", [])),
    )
    if not local or not remote:
        return head + "Needs trains of odl-local and odl (path) in this `raw/`.\n"
    return head + (
        f"B - C: {md.difference_cell(local, remote, unit='s')} (two-sample bootstrap,"
        f" {len(local)} and"
        f' {len(remote)} impulses). Seed 000: "the measurements in Configurations B and C'
        ' are quite similar". Here both modes reach the controller and the site services'
        " over loopback; they differ only in the hosts that carry the traffic.\n"
    )
