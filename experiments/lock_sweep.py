"""``lock-sweep``: how much of ost-vs-mbb's result the emulator's lock model decides.

BBM's unavailability is the dark circuit (switching + transceiver lock) stretched by TCP's
retransmission backoff; the lock time is not measured here but drawn by the Polatis
EMULATOR from seed 003 Table 4.3. This sweep fixes the lock time (``:EMUL:LOCK``) at each
value of ``lock_ms`` and runs the ost-vs-mbb repetition (BBM and MBB, the same traffic and
captures) at each: BBM's unavailability should follow the lock time, MBB's should not.
The unavailability is seed 003's: the longest gap in the TCP data at the sender's capture;
the gap at the receiver's capture is shown beside it. Parameters:
``experiments/configs/lock-sweep.yaml``.
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

STRATEGIES = ("bbm", "mbb")
SEED_LOCK_MEAN = 605.0


class LockSweepConfig(ostbench.BenchConfig):
    lock_ms: list[float] = Field([100, 300, 530, 800, 1200], min_length=1)
    strategies: list[str] = Field(["bbm", "mbb"], min_length=1, description="bbm and/or mbb")


class LockSweep:
    name = "lock-sweep"
    title = "sensitivity: BBM and MBB unavailability against a fixed emulated lock time"
    backends: tuple[str, ...] = ("ovs",)
    config_model: type[Config] = LockSweepConfig

    def plan(self, opts: Options) -> list[Rep]:
        cfg = typed(opts.config, LockSweepConfig)
        return [
            Rep(key=f"lock{lock:05.0f}-{s}-{i:02d}", params={"strategy": s, "lock_ms": lock})
            for i in range(1, cfg.runs + 1)
            for lock in cfg.lock_ms
            for s in cfg.strategies
        ]

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        return _bench(say, seed, typed(opts.config, LockSweepConfig))

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        b, cfg = session
        ostbench.set_lock(b, float(rep.params["lock_ms"]))
        doc = ostbench.measure(b, str(rep.params["strategy"]), cfg, say)
        return doc | {"lock_ms": float(rep.params["lock_ms"])}

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        locks = sorted({float(r["lock_ms"]) for r in raws.values()})
        by = {
            (lock, s): [r for r in raws.values() if r["lock_ms"] == lock and r["strategy"] == s]
            for lock in locks
            for s in STRATEGIES
        }
        body = "\n".join(
            [
                "The ost-vs-mbb repetition (vm2 -> vm3, TCP + the UDP probe + captures, ost1"
                " reconfigured long -> short) with the emulator's lock time fixed at each"
                " value instead of drawn from seed 003 Table 4.3 (mean 605 ms). The"
                " unavailability is seed 003's, the longest gap in the TCP data at the"
                " sender's capture; the receiver's gap is beside it. *slope*: the"
                " least-squares slope of the unavailability against the lock time.\n",
                _table(by, locks),
                md.image(_plot(by, locks, out), "unavailability against the lock time"),
            ]
        )
        return Written(conclusions=conclusions(by, locks), body=body)

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """None: a sensitivity study of the emulator's lock model; seed 003 never fixed the
        lock time."""
        return []


@contextmanager
def _bench(say: Say, seed: int, cfg: LockSweepConfig) -> Iterator[tuple[Any, LockSweepConfig]]:
    with ostbench.bench(say, seed=seed, congestion=cfg.congestion, line_mbps=cfg.line_mbps) as b:
        yield b, cfg


def _gap(r: Raw) -> Any:
    """Seed 003's unavailability: the longest gap at the sender's capture (None without)."""
    return (r.get("capture") or {}).get("sender_gap_ms")


def _receiver_gap(r: Raw) -> Any:
    return (r.get("capture") or {}).get("longest_gap_ms")


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x (None with fewer than two distinct x)."""
    xs = [p[0] for p in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(p[1] for p in points)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _points(by: Mapping[tuple[float, str], Sequence[Raw]], s: str) -> list[tuple[float, float]]:
    return [(lock, g) for (lock, st), runs in by.items() if st == s for g in md.values(runs, _gap)]


def _table(by: Mapping[tuple[float, str], Sequence[Raw]], locks: Sequence[float]) -> str:
    header = ["lock (ms)"]
    for s in STRATEGIES:
        header += [
            f"{s.upper()} TCP unavailability, sender (ms) [capture]",
            f"{s.upper()} gap at the receiver (ms)",
            f"{s.upper()} retrans. (%)",
        ]
    rows = []
    for lock in locks:
        row = [f"{lock:.0f}"]
        for s in STRATEGIES:
            runs = by[(lock, s)]
            row.append(md.mean_ci(md.values(runs, _gap), 0))
            row.append(md.mean_ci(md.values(runs, _receiver_gap), 0))
            cap = [r.get("capture") or {} for r in runs]
            row.append(md.stat_cells(md.values(cap, lambda c: c.get("retransmitted_pct")), 2)[0])
        rows.append(row)
    slopes = [
        f"{s.upper()}: {v:.2f}" for s in STRATEGIES if (v := slope(_points(by, s))) is not None
    ]
    rows.append(["slope (ms per ms of lock, sender)", *(c for s in slopes for c in (s, "", ""))])
    few = md.fewest(*by.values())
    return md.table(header, rows, title="Unavailability against the lock time", few=few)


def conclusions(by: Mapping[tuple[float, str], Sequence[Raw]], locks: Sequence[float]) -> str:
    """Two sentences: BBM follows the lock model, MBB does not."""
    b, m = slope(_points(by, "bbm")), slope(_points(by, "mbb"))
    mbb = [g for _, g in _points(by, "mbb")]
    if b is None:
        return "Needs BBM runs at two lock times or more to conclude."
    first = (
        f"BBM's unavailability grows by {b:.2f} ms per ms of lock time ({locks[0]:.0f} to"
        f" {locks[-1]:.0f} ms), so ost-vs-mbb's BBM number is decided by the emulator's lock"
        " model (seed 003 Table 4.3, mean 605 ms) and TCP's backoff on top of it, not by the"
        " reroute engine."
    )
    if not mbb:
        return first + " No MBB runs were made here to set beside it."
    return (
        f"{first} MBB's stays between {min(mbb):.1f} and {max(mbb):.1f} ms"
        + (f" (slope {m:.3f})" if m is not None else "")
        + ": its result does not depend on the lock model."
    )


def _plot(by: Mapping[tuple[float, str], Sequence[Raw]], locks: Sequence[float], out: Path) -> str:
    fig = plots.figure(title="sensitivity of the unavailability to the emulated lock time")
    (ax,) = plots.axes(fig)
    for s in STRATEGIES:
        pts = _points(by, s)
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=14,
            color=plots.COLORS[s],
            label=plots.SEED_NAMES[s],
        )
    ax.plot([0, max(locks)], [0, max(locks)], color="gray", ls=":", lw=1, label="y = lock")
    ax.axvline(SEED_LOCK_MEAN, color="k", ls="--", lw=0.8, label="seed 003 mean lock 605 ms")
    ax.set_xlabel("fixed lock time of the emulator (ms)")
    ax.set_ylabel("longest gap in the TCP data at the sender (ms, capture)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return plots.save(fig, out / "lock_sensitivity.png")
