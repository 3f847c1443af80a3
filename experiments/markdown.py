"""Markdown pieces of the experiments' reports, and the CSV copy of every table. Pure but
for :func:`write_csv`.

A report's tables are collected while it is written (:func:`collecting`): each titled
table is also written as ``tables/<slug>.csv``. A table whose statistics rest on fewer than
``FEW`` runs says so in words under it.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.stats import MIN_CI_N, Summary, difference_ci, summarize

NONE = "-"
FEW = 10  # below this many runs a table warns that its intervals are rough


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


_TABLES: ContextVar[list[Table] | None] = ContextVar("report_tables", default=None)


@contextmanager
def collecting() -> Iterator[list[Table]]:
    """Collect every titled table written inside (for :func:`write_csv`)."""
    found: list[Table] = []
    token = _TABLES.set(found)
    try:
        yield found
    finally:
        _TABLES.reset(token)


def slug(title: str) -> str:
    """A file name for ``title``: lower case, words joined by dashes."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "table"


def write_csv(tables: Sequence[Table], into: Path) -> list[Path]:
    """Each table as ``into/<slug>.csv`` (numbered when two share a title)."""
    into.mkdir(parents=True, exist_ok=True)
    for old in into.glob("*.csv"):
        old.unlink()
    written = []
    for i, t in enumerate(tables, start=1):
        path = into / f"{i:02d}-{slug(t.title)}.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(t.header)
            w.writerows(t.rows)
        written.append(path)
    return written


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    level: int = 2,
    few: int | None = None,
) -> str:
    """A Markdown table (first column left-aligned, the others right-aligned), under
    ``## title`` when given (then also collected as CSV). ``few``: the smallest n behind
    the table's statistics; below ``FEW`` a sentence under the table says so."""
    align = [":--"] + ["--:"] * (len(header) - 1)
    lines = [header, align, *rows]
    text = "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"
    if few is not None and 0 < few < FEW:
        text += (
            f"\n*n < {FEW}: some cells rest on {few} run(s) only; their intervals are rough"
            " and a difference between them is an indication, not a finding"
            + (
                f"; below {MIN_CI_N} runs a cell gives the values, no interval.*\n"
                if few < MIN_CI_N
                else ".*\n"
            )
        )
    if title is None:
        return text
    found = _TABLES.get()
    if found is not None:
        found.append(Table(title=title, header=tuple(header), rows=tuple(map(tuple, rows))))
    return f"{'#' * level} {title}\n\n{text}"


def image(file: str, alt: str) -> str:
    """A Markdown image line."""
    return f"![{alt}]({file})\n"


def values(
    raws: Sequence[Mapping[str, Any]], get: Callable[[Mapping[str, Any]], Any]
) -> list[float]:
    """``get`` of every raw document, the ones where it is None (or missing) left out."""
    found = []
    for r in raws:
        try:
            v = get(r)
        except (KeyError, TypeError):
            v = None
        if v is not None:
            found.append(float(v))
    return found


def stat_cells(vals: Sequence[float], digits: int = 1) -> list[str]:
    """``mean [CI]``, ``median / p95``, ``std``, ``n`` (dashes when there is nothing)."""
    if not vals:
        return [NONE, NONE, NONE, "0"]
    s: Summary = summarize(vals)
    f = f"{{:.{digits}f}}"
    return [s.cell(digits), f"{f.format(s.median)} / {f.format(s.p95)}", f.format(s.std), str(s.n)]


def mean_ci(vals: Sequence[float], digits: int = 1) -> str:
    """``mean [CI] (n = k)``, or a dash."""
    if not vals:
        return NONE
    return f"{summarize(vals).cell(digits)} (n = {len(vals)})"


def difference_cell(a: Sequence[float], b: Sequence[float], digits: int = 2, unit: str = "") -> str:
    """mean(a) - mean(b) ``[two-sample 95 % CI]`` (each side resampled on its own, every
    value counted once), or without an interval when a side has fewer than ``MIN_CI_N``;
    ``unit`` after the difference."""
    d, low, high = difference_ci(a, b)
    f = f"{{:+.{digits}f}}"
    head = f"{f.format(d)}{' ' + unit if unit else ''}"
    if low is None or high is None:
        return f"{head} (n = {len(a)} / {len(b)}: no interval)"
    return f"{head} [{f.format(low)}, {f.format(high)}]"


def fewest(*groups: Sequence[Any]) -> int:
    """The smallest non-zero size of ``groups`` (0 if all are empty)."""
    sizes = [len(g) for g in groups if len(g)]
    return min(sizes, default=0)
