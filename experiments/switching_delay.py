"""``switching-delay``: seed 003 section 4.1.4 (Figures 4.4-4.5, Tables 4.4-4.5), the packet
switches' layer-3 switching delay, per backend.

On seed 003's testbed driven by ``--backend``, a UDP stream vm2 -> vm3 (the
sequence-numbered probe, kernel receive timestamps at vm3: the seed's receiver-side capture)
and, 0.8 s into it, the flows are moved between two electrical paths by flow-table updates
only (``long`` <-> ``temporary``: no optical switching, as the seed's Table 4.4), alternately
one way and back. *bbm* updates the flows as the seed did (old rules removed, then the new
path written and the ingress shifted); *mbb* writes the new path first. The switching delay
is the probe's longest gap: how long packets were not delivered while the tables changed.
Parameters: ``experiments/configs/switching-delay.yaml``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from pydantic import Field

from experiments import backends as bk
from experiments import markdown as md
from experiments import measuring, ostbench, plots
from experiments.config import Config, typed
from experiments.demo_report import UdpNumbers
from experiments.runner import Options, Raw, Rep, Say, SeedRow, Written
from experiments.stats import percentile
from services.reroute.model.intent import Intent

ROOT = Path(__file__).resolve().parents[1]
SEED_TABLE_4_5 = {
    "mean": 17.5,
    "std": 10.5,
    "min": 10.6,
    "p25": 11.0,
    "p50": 12.7,
    "p75": 21.9,
    "max": 78.0,
}
PATHS = (measuring.LONG, measuring.TEMPORARY)


class SwitchingConfig(Config):
    strategies: list[str] = Field(["bbm", "mbb"], min_length=1, description="bbm and/or mbb")
    probe_pps: int = Field(5000, ge=100, description="UDP probe, packets/s (0.2 ms apart)")
    probe_s: float = Field(2.0, gt=0.5, description="UDP probe duration")
    baseline_s: float = Field(0.8, gt=0.1, description="the move, this long into the probe")


class SwitchingDelay:
    name = "switching-delay"
    title = "layer-3 switching delay of the packet switches per backend; seed 003 4.1.4"
    backends: tuple[str, ...] = bk.ost_backends()
    config_model: type[Config] = SwitchingConfig

    def plan(self, opts: Options) -> list[Rep]:
        """``runs`` moves per strategy, alternately long -> temporary and back."""
        cfg = typed(opts.config, SwitchingConfig)
        reps = []
        for i in range(1, cfg.runs + 1):
            for s in cfg.strategies:
                frm, to = PATHS if i % 2 else PATHS[::-1]
                reps.append(
                    Rep(
                        key=f"{opts.backend}-{s}-{i:02d}",
                        params={"strategy": s, "from": frm, "to": to},
                    )
                )
        return reps

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        """The testbed driven by ``--backend``."""
        return _bench(opts.backend, typed(opts.config, SwitchingConfig), say, seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One move under the probe; the flows left on the new path (the next move's start)."""
        p = rep.params
        return measure(session, str(p["strategy"]), str(p["from"]), str(p["to"]))

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        groups = by_group(raws)
        body = "\n".join(
            [
                "vm2 -> vm3: the UDP probe (5000 pkt/s, one packet every 0.2 ms); 0.8 s into"
                " it the flows move between the electrical paths long and temporary (both ways"
                " alternately), by flow-table updates of br1-br4 only. *switching delay*: the"
                " probe's longest gap at vm3, which includes the 0.2 ms between packets;"
                " *lost*: probe packets never delivered. Seed 003 measured its Pica8 switches"
                " (through Ryu) the same way with a UDP transfer and a capture at the receiver"
                " (50 runs, Table 4.5).\n",
                _table(groups),
                md.image(_boxplot(groups, out), "seed 003 Figure 4.5"),
            ]
        )
        return Written(conclusions=conclusions(groups), body=body)

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """Seed 003 Table 4.5's mean and median beside ours, per backend, for the flow
        update the seed made (bbm: old rules out, then the new path; MBB is not the seed's)."""
        rows = []
        for (backend, s), runs in by_group(raws).items():
            vals = md.values(runs, lambda r: r["switching_ms"])
            if s != "bbm" or not vals:
                continue
            ryu = " (seed 003's controller)" if backend == "ryu" else ""
            note = (
                f"backend {backend}{ryu}; both the longest gap of a UDP stream at the receiver;"
                " the seed's Pica8 switches, ours the userspace OVS"
            )
            for stat, ours in (
                ("mean", md.stat_cells(vals, 1)[0]),
                ("p50", f"{_stats(vals)['p50']:.1f}"),
            ):
                rows.append(
                    SeedRow(
                        metric=f"L3 switching delay by a flow update, {stat} (ms)",
                        source="003 4.1.4, Table 4.5",
                        seed=f"{SEED_TABLE_4_5[stat]:.1f}",
                        seed_n="50",
                        ours=ours,
                        ours_n=str(len(vals)),
                        note=note,
                    )
                )
        return rows


@contextmanager
def _bench(backend: str, cfg: SwitchingConfig, say: Say, seed: int) -> Iterator[Any]:
    topology = ROOT / "topologies" / str(bk.get(backend).ost)
    with ostbench.bench(say, seed=seed, topology=topology) as b:
        yield b, cfg, {"at": measuring.LONG}  # where the flows are


def _intent(b: ostbench.Bench, strategy: str, to: str) -> Intent:
    move = ostbench.intent(b, strategy, to=to)
    if move is None:
        raise ValueError(f"strategy {strategy!r} moves nothing")
    return move


def measure(session: Any, strategy: str, frm: str, to: str) -> dict[str, Any]:
    """One move from ``frm`` to ``to`` under the probe; the raw document."""
    b, cfg, where = session
    if where["at"] != frm:  # a resumed run starts where the last session left the flows
        measuring.reroute(b.topo, b.inv, _intent(b, "mbb", frm))
        where["at"] = frm
    path = b.topo.paths[frm]
    move = _intent(b, strategy, to)
    drops = measuring.fabric_drops(b.fab)
    with measuring.Traffic(b.fab, path, rate=cfg.probe_pps, tcp_mbps=0, probe_s=cfg.probe_s) as t:
        time.sleep(cfg.baseline_s)
        done = measuring.reroute(b.topo, b.inv, move)
        where["at"] = to
        probe = t.probe_report()
    udp = UdpNumbers.from_probe(probe, request_ns=done.requested_ns)
    gap = probe.get("longest_gap") or {}
    in_gap = int(gap.get("first_seq_after", 1)) - int(gap.get("last_seq_before", 0)) - 1
    return {
        "strategy": strategy,
        "moved": [frm, to],
        "udp": _udp(udp),
        "switching_ms": udp.longest_gap_ms,
        "lost_in_gap": max(0, in_gap),
        "dropped_ms": udp.lost * 1000 / cfg.probe_pps,
        "delay_max_ms": (probe.get("delay") or {}).get("max_ms"),
        "reroute_ms": done.total_ms,
        "milestones": done.milestones(),
        "fabric_drops": measuring.fabric_drops(b.fab) - drops,
    }


def _udp(udp: UdpNumbers) -> dict[str, Any]:
    return {
        "sent": udp.sent,
        "lost": udp.lost,
        "reordered": udp.reordered,
        "longest_gap_ms": udp.longest_gap_ms,
        "gap_at_ms": udp.gap_at_ms,
        "loss_pct": udp.loss_pct,
    }


def by_group(raws: Mapping[str, Raw]) -> dict[tuple[str, str], list[Raw]]:
    """Runs by (backend, strategy), in the backends table's order."""
    found: dict[tuple[str, str], list[Raw]] = {}
    for backend in bk.ost_backends():
        for s in ("bbm", "mbb"):
            rs = [r for r in raws.values() if r.get("backend") == backend and r["strategy"] == s]
            if rs:
                found[(backend, s)] = rs
    return found


def _stats(vals: Sequence[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(vals),
        "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "min": min(vals),
        "p25": percentile(vals, 0.25),
        "p50": statistics.median(vals),
        "p75": percentile(vals, 0.75),
        "max": max(vals),
    }


def _table(groups: Mapping[tuple[str, str], Sequence[Raw]]) -> str:
    header = ["backend", "strategy", "n", *SEED_TABLE_4_5, "mean [95 % CI]"]
    header += ["packets lost, mean", "dropped for (ms) = lost / rate", "max one-way delay (ms)"]
    rows = []
    for (backend, s), runs in groups.items():
        vals = md.values(runs, lambda r: r["switching_ms"])
        if not vals:
            continue
        st = _stats(vals)
        lost = md.values(runs, lambda r: r["udp"]["lost"])
        rows.append(
            [
                backend,
                s.upper(),
                str(len(vals)),
                *(f"{st[k]:.1f}" for k in SEED_TABLE_4_5),
                md.stat_cells(vals, 1)[0],
                f"{statistics.fmean(lost):.0f}",
                md.stat_cells(md.values(runs, lambda r: r.get("dropped_ms")), 1)[0],
                md.stat_cells(md.values(runs, lambda r: r.get("delay_max_ms")), 1)[0],
            ]
        )
    rows.append(
        [
            "seed 003 (Pica8 via Ryu)",
            "update",
            "50",
            *(f"{v:.1f}" for v in SEED_TABLE_4_5.values()),
            md.NONE,
            md.NONE,
            md.NONE,
            md.NONE,
        ]
    )
    few = md.fewest(*groups.values())
    return md.table(header, rows, title="Switching delay (ms), seed 003 Table 4.5", few=few)


def conclusions(groups: Mapping[tuple[str, str], Sequence[Raw]]) -> str:
    """Two sentences: the flow update's outage per backend, and MBB's."""

    def mean(s: str, get: Any) -> dict[str, float]:
        return {b: statistics.fmean(v) for (b, st), rs in groups.items()
                if st == s and (v := md.values(rs, get))}  # fmt: skip

    gap = {s: mean(s, lambda r: r["switching_ms"]) for s in ("bbm", "mbb")}
    lost = {s: mean(s, lambda r: r["udp"]["lost"]) for s in ("bbm", "mbb")}
    if not gap["bbm"] and not gap["mbb"]:
        return "No runs to conclude from."
    first = (
        "Updating the flows as the seed did (old rules out, then the new path) stopped the"
        " stream for "
        + ", ".join(f"{m:.1f} ms on {b}" for b, m in gap["bbm"].items())
        + " on average (seed 003's Pica8 switches through Ryu: 17.5 ms)."
        if gap["bbm"]
        else "No plain flow updates were run."
    )
    second = (
        " Writing the new path before shifting (MBB) lost "
        + ", ".join(f"{lost['mbb'][b]:.1f} packets on {b}" for b in gap["mbb"])
        + " on average; its longest gap ("
        + ", ".join(f"{m:.1f} ms" for m in gap["mbb"].values())
        + (
            ") is the packets' delay through the busy userspace fabric, not an outage."
            if max(lost["mbb"].values(), default=0.0) < 1
            else "), packets the busy userspace fabric dropped by itself included."
        )
        if gap["mbb"]
        else ""
    )
    return first + second


def _boxplot(groups: Mapping[tuple[str, str], Sequence[Raw]], out: Path) -> str:
    fig = plots.figure(size=(8, 4), seed="003 Figure 4.5", title="L3 switching delay")
    (ax,) = plots.axes(fig)
    data = {
        f"{b}\n{s.upper()}": md.values(rs, lambda r: r["switching_ms"])
        for (b, s), rs in groups.items()
    }
    colors = {f"{b}\n{s.upper()}": bk.colour(b) for b, s in groups}
    plots.strip(ax, data, colors=colors)
    shown = len([v for v in data.values() if v])
    plots.seed_box(
        ax,
        shown + 1,
        SEED_TABLE_4_5,
        label="seed 003\nTable 4.5",
        mean=SEED_TABLE_4_5["mean"],
    )
    ax.set_xlim(0.4, shown + 1.6)
    ax.set_ylabel("longest gap of the UDP probe (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("ours per backend and strategy; grey: seed 003's box, bar: its mean", fontsize=8)
    return plots.save(fig, out / "fig4_5_switching_delay.png")
