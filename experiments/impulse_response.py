"""``impulse-response``: seed 000 sections IV-V (Table I, Figures 8-11) on the two-site fabric.

A train of n degradations, one every T seconds (path switching or rtt extension, see
:mod:`experiments.impulse_train`), each detected by both sites' ``reroute monitor`` and failed
over by both sites' ``reroute serve``, with a TCP stream sampled every 100 ms throughout. Per
configuration (backend x degradation x extra flows) the responses R_i(t) = B - T(t) aligned
at the degradation start, their mean with a bootstrap band, and the time to 90 % recovery
(:mod:`experiments.impulse_analysis`).

``--backend`` picks the two-site topology (configuration analogues of seed 000 Table I):

========= ============================== =============================================
backend   topology                       configurations run
========= ============================== =============================================
dpctl     two-site-dpctl (A: dpctl, HP)  path, rtt
dpctl+10  two-site-dpctl                 path, 10 extra flows per switch (Figure 11)
dpctl+100 two-site-dpctl                 path, 100 extra flows per switch (Figure 11)
odl       two-site-odl (C/D: ODL remote) path (C), rtt (D)
ovs       two-site-longhaul              path, rtt
p4runtime two-site-p4                    path, rtt
========= ============================== =============================================

Runs of several backends may share one ``--out``: the report covers every train in
``raw/`` (so ODL vs dpctl and the per-backend means appear once both ran there).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from experiments import impulse_analysis as ia
from experiments import markdown as md
from experiments import plots
from experiments.impulse_train import Train, run_train
from experiments.runner import Options, Raw, Rep, Say, every_raw
from experiments.stats import mean_band
from services.reroute.topology import Topology, load_topology

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = {
    "dpctl": "two-site-dpctl.yaml",
    "dpctl+10": "two-site-dpctl.yaml",
    "dpctl+100": "two-site-dpctl.yaml",
    "odl": "two-site-odl.yaml",
    "ovs": "two-site-longhaul.yaml",
    "p4runtime": "two-site-p4.yaml",
}
CONFIGS: dict[str, tuple[tuple[str, int], ...]] = {  # backend -> (degradation, extra flows)
    "dpctl": (("path", 0), ("rtt", 0)),
    # seed 000 Figure 11: configuration A with 10 / 100 extra flows on each border switch,
    # written through the hp_dpctl driver, moved with the measured one at every failover
    "dpctl+10": (("path", 10),),
    "dpctl+100": (("path", 100),),
    "odl": (("path", 0), ("rtt", 0)),
    "ovs": (("path", 0), ("rtt", 0)),
    "p4runtime": (("path", 0), ("rtt", 0)),
}
SEED_CONFIG = {
    ("dpctl", "path", 0): "A",
    ("dpctl+10", "path", 10): "A, Fig. 11",
    ("dpctl+100", "path", 100): "A, Fig. 11",
    ("odl", "path", 0): "C",
    ("odl", "rtt", 0): "D",
}
EXTRA_FLOWS = ("dpctl-path", "dpctl+10-path", "dpctl+100-path")  # Figure 11's comparison
DEGRADATIONS = ("path", "rtt")
RELATIVE_COLORS = {"path": "tab:green", "rtt": "tab:olive"}
FULL_N, QUICK_N = 10, 3
QUICK_T = 4.0
FULL_T = {"odl": 15.0}  # its failover call takes ~5.5 s (bench/README), the reset as long
DEFAULT_FULL_T = 10.0
COLORS = {
    "ovs": "tab:blue",
    "dpctl": "tab:red",
    "dpctl+10": "tab:orange",
    "dpctl+100": "tab:brown",
    "odl": "tab:green",
    "p4runtime": "tab:purple",
}


def config_name(backend: str, degradation: str, extra: int) -> str:
    """``dpctl-path``; with extra flows the backend names them already (``dpctl+10-path``)."""
    named = extra == 0 or backend.endswith(f"+{extra}")
    return f"{backend}-{degradation}" + ("" if named else f"-x{extra}")


class ImpulseResponse:
    name = "impulse-response"
    title = "trains of degradations, response means with bootstrap bands; seed 000 IV-V"
    backends: tuple[str, ...] = ("ovs", "dpctl", "dpctl+10", "dpctl+100", "odl", "p4runtime")

    def plan(self, opts: Options) -> list[Rep]:
        runs = opts.runs or 1
        n = QUICK_N if opts.quick else FULL_N
        period = QUICK_T if opts.quick else FULL_T.get(opts.backend, DEFAULT_FULL_T)
        return [
            Rep(
                key=f"{config_name(opts.backend, deg, extra)}-{i:02d}",
                params={"degradation": deg, "extra_flows": extra, "n": n, "period_s": period},
            )
            for deg, extra in CONFIGS[opts.backend]
            for i in range(1, runs + 1)
        ]

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Topology]:
        return _topology(opts.backend, say)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        p = rep.params
        train = Train(
            degradation=str(p["degradation"]),
            n=int(p["n"]),
            period_s=float(p["period_s"]),
            extra_flows=int(p["extra_flows"]),
        )
        say(f"{rep.key}: {train.n} x {train.degradation} every {train.period_s:g} s")
        return run_train(session, train, rep.key)

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        trains = every_raw(out) | dict(raws)
        configs = by_config(trains)
        responses = {c: [i for r in rs for i in ia.impulses(r)] for c, rs in configs.items()}
        parts = [_intro(configs), _table(configs, responses)]
        parts.append(md.image(_plot_single(responses, out), "single responses (Figure 8)"))
        parts.append(md.image(_plot_means(responses, out), "response means (Figure 9)"))
        parts.append(_relative(responses, out))
        parts.append(_extra_flows(responses, out))
        return "\n".join(parts)


@contextmanager
def _topology(backend: str, say: Say) -> Iterator[Topology]:
    topo = load_topology(ROOT / "topologies" / TOPOLOGIES[backend])
    say(f"topology {topo.name}: a fabric per train")
    yield topo


def by_config(trains: Mapping[str, Raw]) -> dict[str, list[Raw]]:
    """Trains grouped by configuration (backend, degradation, extra flows), in CONFIGS order."""
    found: dict[str, list[Raw]] = {}
    for backend, configs in CONFIGS.items():
        for deg, extra in configs:
            name = config_name(backend, deg, extra)
            rs = [r for k, r in sorted(trains.items()) if k.rsplit("-", 1)[0] == name]
            if rs:
                found[name] = rs
    return found


def _intro(configs: Mapping[str, Sequence[Raw]]) -> str:
    periods = sorted({r["period_s"] for rs in configs.values() for r in rs})
    return (
        "Each train: iperf3 TCP h1 -> h2 sampled every 100 ms, a degradation every T s"
        f" (T = {', '.join(f'{p:g}' for p in periods)} s), both sites' `reroute monitor rtt`"
        " (50 Hz, 3 samples over 10 ms) failing over to standby through their own `reroute"
        " serve`. *path*: the flows diverted onto the delay line at 15 ms each way; *rtt*:"
        " the delay line (the current connection, at 0 ms) raised to 15 ms each way, reset"
        " (and the flows moved back onto it) once both sites failed over. r(t) = R(t)/B ="
        " 1 - T(t)/B, B the median throughput in the second before the degradations;"
        " recovery: from the degradation to the first of 3 samples averaging above 90 % of B,"
        " after the first one below it. *trigger*: the first site's monitor fired, *both"
        " failed over*: the later site's failover call returned (ms after the degradation,"
        " impulses where both did); *spurious*: triggers (either site) not within 2 s of a"
        " degradation; *injection errors*: degradations the network failed to inject (its"
        " move refused; the impulse then measures nothing).\n"
    )


def _table(configs: Mapping[str, Sequence[Raw]], responses: Mapping[str, list[ia.Impulse]]) -> str:
    header = ["configuration", "seed 000", "trains", "impulses", "T (s)", "B (Mbit/s)"]
    header += ["recovery (s) mean [CI]", "median / p95", "of the mean (s)", "not recovered"]
    header += ["trigger (ms)", "both failed over (ms)", "spurious triggers", "injection errors"]
    rows = []
    for name, rs in configs.items():
        imps = responses[name]
        rec = [i.recovery_s for i in imps if i.recovery_s is not None]
        cells = md.stat_cells(rec, 2)
        mean_rec = _mean_recovery(imps)
        trig = md.values([{"v": i.trigger_s} for i in imps], lambda d: d["v"])
        done = md.values([{"v": i.failover_s} for i in imps], lambda d: d["v"])
        first = rs[0]
        seed = SEED_CONFIG.get((_backend(name), first["degradation"], first["extra_flows"]), "-")
        rows.append(
            [
                name,
                seed,
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
            ]
        )
    return "## Recovery per configuration\n\n" + md.table(header, rows)


def _backend(config: str) -> str:
    return config.split("-", 1)[0]


def _ms(vals: Sequence[float]) -> str:
    return md.NONE if not vals else f"{1000 * sum(vals) / len(vals):.0f}"


def _mean_recovery(imps: Sequence[ia.Impulse]) -> float | None:
    if not imps:
        return None
    n = ia.common_length(imps)
    mean, _, _ = mean_band([i.r[:n] for i in imps], resamples=10)
    return ia.recovery_s(imps[0].times[:n], mean)


def _plot_single(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    names = list(responses)
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig = plots.figure(rows, cols, size=(4.2 * cols, 2.8 * rows))
    for ax, name in zip(plots.axes(fig), names, strict=False):
        for imp in responses[name]:
            ax.plot(imp.times, imp.r, lw=0.7, alpha=0.6, color=COLORS[_backend(name)])
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.set_title(f"{name} ({len(responses[name])} impulses)", fontsize=9)
        ax.set_xlabel("s after the degradation")
        ax.set_ylabel("R/B")
        ax.set_ylim(-0.5, 1.1)
    return plots.save(fig, out / "impulse_single.png")


def _plot_means(
    responses: Mapping[str, list[ia.Impulse]], out: Path, *, only: Sequence[str] = ()
) -> str:
    names = list(only or responses)
    degs = sorted({n.split("-")[1] for n in names})
    fig = plots.figure(1, len(degs), size=(6 * len(degs), 3.8))
    styles = ["-", "--", ":", "-."]
    for ax, deg in zip(plots.axes(fig), degs, strict=True):
        for j, name in enumerate(n for n in names if n.split("-")[1] == deg):
            imps = responses[name]
            n = ia.common_length(imps)
            mean, low, high = mean_band([i.r[:n] for i in imps])
            times = imps[0].times[:n]
            color = COLORS[_backend(name)]
            ls = styles[j % len(styles)] if only else "-"
            ax.plot(times, mean, color=color, ls=ls, lw=1.3, label=f"{name} (n={len(imps)})")
            ax.fill_between(times, low, high, color=color, alpha=0.2)
        ax.axvline(0, color="k", ls="--", lw=0.8)
        ax.axhline(1 - ia.RECOVERED, color="gray", ls=":", lw=0.8)
        ax.set_title(f"response means, {deg} degradation (95 % bootstrap band)", fontsize=9)
        ax.set_xlabel("s after the degradation")
        ax.set_ylabel("mean R/B")
        ax.legend(fontsize=7)
    file = "impulse_extra_flows.png" if only else "impulse_means.png"
    return plots.save(fig, out / file)


def _relative(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    head = "## ODL against dpctl: relative delays (Figure 10b)\n\n"
    pairs = {  # degradation -> every (ODL, dpctl) pair's difference in recovery time
        deg: ia.relative_delays(slow, fast)
        for deg, slow, fast in (
            (d, responses.get(f"odl-{d}"), responses.get(f"dpctl-{d}")) for d in DEGRADATIONS
        )
        if slow and fast
    }
    if not pairs:
        return head + "Needs trains of both odl and dpctl (one degradation) in this `raw/`.\n"
    if not any(pairs.values()):
        return head + "No recovered impulses to compare.\n"
    fig = plots.figure(1, 1, size=(6, 3.5))
    ax = plots.axes(fig)[0]
    lines = []
    for deg, delays in pairs.items():
        if not delays:
            continue
        label = f"{deg} ({SEED_CONFIG[('odl', deg, 0)]} vs dpctl {deg})"
        ax.hist(delays, bins=20, alpha=0.6, color=RELATIVE_COLORS[deg], label=label)
        cells = md.stat_cells(delays, 2)
        lines.append(
            f"- {label}: over {len(delays)} pairs, mean {cells[0]} s, median / p95 {cells[1]} s"
        )
    ax.set_xlabel("recovery time ODL - dpctl (s), every pair of impulses")
    ax.set_ylabel("pairs")
    ax.legend(fontsize=7)
    file = plots.save(fig, out / "impulse_relative_delays.png")
    return (
        head
        + "\n".join(lines)
        + "\n\n(seed 000: 2-3 s in the majority of cases)\n\n"
        + md.image(file, "relative delays ODL vs dpctl")
    )


def _extra_flows(responses: Mapping[str, list[ia.Impulse]], out: Path) -> str:
    head = "## dpctl with 10 and 100 extra flows (Figure 11)\n\n"
    have = [n for n in EXTRA_FLOWS if responses.get(n)]
    if len(have) < 2:
        return head + "Needs trains of dpctl and dpctl+10 or dpctl+100 in this `raw/`.\n"
    return head + md.image(_plot_means(responses, out, only=have), "dpctl, extra flows")
