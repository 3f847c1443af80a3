"""Matplotlib (Agg backend: files only, no display) helpers shared by the experiments.

Every figure that reproduces one of a seed's figures says which in its title
(:func:`figure`'s ``seed``), e.g. "seed 003 Figure 4.15". Conventions: panels that compare
arms share their scales (``sharex``/``sharey``); quantities that cannot be negative get linear
axes from 0; where the seed gives quantiles or a box, it is drawn beside ours
(:func:`seed_box`, :func:`seed_quantiles`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {"bbm": "tab:red", "mbb": "tab:blue", "control": "tab:gray"}
SEED_NAMES = {"bbm": "BBM (seed 003: OST)", "mbb": "MBB"}


def figure(
    rows: int = 1,
    cols: int = 1,
    *,
    size: tuple[float, float] = (7, 4),
    seed: str | None = None,
    title: str = "",
    sharex: bool = False,
    sharey: bool = False,
) -> Figure:
    """A matplotlib figure of ``rows`` x ``cols`` axes; ``seed`` names the seed's figure it
    reproduces (``"003 Figure 4.15"``), shown in the title with ``title``; ``sharex`` /
    ``sharey``: one scale for every panel (arms compared side by side)."""
    fig = plt.figure(figsize=size, layout="constrained")
    fig.subplots(rows, cols, squeeze=False, sharex=sharex, sharey=sharey)
    heading = f"seed {seed} on the emulated fabric" if seed else ""
    if title or heading:
        fig.suptitle(": ".join(t for t in (heading, title) if t), fontsize=10)
    return fig


def grid(n: int, *, seed: str, title: str, head: float = 0.5, share: bool = False) -> Figure:
    """A figure of ``n`` small panels, three to a row (``head``: inches for the title), on
    one scale with ``share``; panels beyond ``n`` are removed."""
    cols = min(3, n) or 1
    rows = (n + cols - 1) // cols or 1
    fig = figure(
        rows,
        cols,
        size=(4.2 * cols, 2.8 * rows + head),
        seed=seed,
        title=title,
        sharex=share,
        sharey=share,
    )
    for ax in fig.axes[n:]:
        ax.remove()
    return fig


def axes(fig: Figure) -> list[Axes]:
    """The figure's axes."""
    return list(fig.axes)


def cdf(
    ax: Axes, values: Sequence[float], *, label: str, color: str | None = None, ls: str = "-"
) -> None:
    """The empirical CDF of ``values`` as a step line rising from 0 at the smallest value
    (so that a single run still shows), its points marked when they are few."""
    ordered = sorted(values)
    n = len(ordered)
    xs = [ordered[0], *ordered]
    ys = [0.0, *((i + 1) / n for i in range(n))]
    marker = "." if n < 20 else None
    ax.step(xs, ys, where="post", label=f"{label} (n={n})", color=color, ls=ls, marker=marker)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction of runs")
    ax.grid(True, alpha=0.3)


def strip(
    ax: Axes,
    groups: Mapping[str, Sequence[float]],
    *,
    colors: Mapping[str, str],
    seed: Mapping[str, float] | None = None,
) -> None:
    """Each group's values as a box with its points over it, side by side; ``seed`` marks
    the seed's mean of a group with a black bar."""
    names = [g for g, v in groups.items() if v]
    data = [list(groups[g]) for g in names]
    if not data:
        return
    ax.boxplot(data, showfliers=False, widths=0.5)
    for i, (name, vals) in enumerate(zip(names, data, strict=True), start=1):
        xs = [i + 0.18 * ((k % 7) - 3) / 3 for k in range(len(vals))]
        ax.scatter(xs, vals, s=10, alpha=0.6, color=colors.get(name, "tab:gray"))
        if seed and name in seed:
            ax.hlines(seed[name], i - 0.35, i + 0.35, color="k", lw=2)
    ax.set_xticks(range(1, len(names) + 1), names, fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def seed_box(
    ax: Axes, position: float, five: Mapping[str, float], *, label: str, mean: float | None = None
) -> None:
    """The seed's box at ``position`` from its five numbers (``min``, ``p25``, ``p50``,
    ``p75``, ``max``: whiskers at min and max, as a table of them allows), its mean as a
    black bar, in grey beside ours."""
    stats = {
        "whislo": five["min"],
        "q1": five["p25"],
        "med": five["p50"],
        "q3": five["p75"],
        "whishi": five["max"],
        "fliers": [],
        "label": label,
    }
    ticks = list(ax.get_xticks())
    names = [t.get_text() for t in ax.get_xticklabels()]
    ax.bxp([stats], positions=[position], widths=0.5, patch_artist=True, manage_ticks=False,
           boxprops={"facecolor": "0.85"})  # fmt: skip
    ax.set_xticks([*ticks, position], [*names, label], fontsize=8)
    if mean is not None:
        ax.hlines(mean, position - 0.35, position + 0.35, color="k", lw=2)


def seed_quantiles(
    ax: Axes, points: Sequence[tuple[float, float]], *, label: str, color: str = "k"
) -> None:
    """Quantiles the seed states, ``(value, fraction)``, on a CDF: "half below 20 ms" is
    ``(20, 0.5)``; each marks that the seed's curve passes at or left of the point."""
    ax.scatter([p[0] for p in points], [p[1] for p in points], marker="D", s=28,
               facecolors="none", edgecolors=color, zorder=5, label=label)  # fmt: skip


def save(fig: Figure, path: Path) -> str:
    """Write ``fig`` as PNG and close it; the file name (for a markdown link)."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
