"""Matplotlib (Agg backend: files only, no display) helpers shared by the experiments."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLORS = {"bbm": "tab:red", "mbb": "tab:blue", "control": "tab:gray"}


def figure(rows: int = 1, cols: int = 1, *, size: tuple[float, float] = (7, 4)) -> Figure:
    """A matplotlib figure of ``rows`` x ``cols`` axes."""
    fig = plt.figure(figsize=size, layout="constrained")
    fig.subplots(rows, cols, squeeze=False)
    return fig


def axes(fig: Figure) -> list[Axes]:
    """The figure's axes."""
    return list(fig.axes)


def cdf(
    ax: Axes, values: Sequence[float], *, label: str, color: str | None = None, ls: str = "-"
) -> None:
    """The empirical CDF of ``values`` as a step line."""
    ordered = sorted(values)
    n = len(ordered)
    ys = [(i + 1) / n for i in range(n)]
    ax.step(ordered, ys, where="post", label=f"{label} (n={n})", color=color, ls=ls)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction of runs")
    ax.grid(True, alpha=0.3)


def save(fig: Figure, path: Path) -> str:
    """Write ``fig`` as PNG and close it; the file name (for a markdown link)."""
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name
