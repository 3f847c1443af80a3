"""Markdown pieces of the experiments' reports. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from experiments.stats import Summary, summarize

NONE = "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table: the first column left-aligned, the others right-aligned."""
    align = [":--"] + ["--:"] * (len(header) - 1)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def image(file: str, alt: str) -> str:
    """A Markdown image line."""
    return f"![{alt}]({file})\n"


def values(
    raws: Sequence[Mapping[str, Any]], get: Callable[[Mapping[str, Any]], Any]
) -> list[float]:
    """``get`` of every raw document, the ones where it is None left out."""
    found = (get(r) for r in raws)
    return [float(v) for v in found if v is not None]


def stat_cells(vals: Sequence[float], digits: int = 1) -> list[str]:
    """``mean [CI]``, ``median / p95``, ``std``, ``n`` (dashes when there is nothing)."""
    if not vals:
        return [NONE, NONE, NONE, "0"]
    s: Summary = summarize(vals)
    f = f"{{:.{digits}f}}"
    return [s.cell(digits), f"{f.format(s.median)} / {f.format(s.p95)}", f.format(s.std), str(s.n)]
