"""``reroute experiment export DIR --csv``: an experiment's raw documents as CSV. Pure but
for the files it writes.

- ``repetitions.csv``: one row per repetition, every scalar of its raw document as a column
  (nested keys joined with dots: ``udp.longest_gap_ms``, ``capture.retransmitted_pct``);
- ``<list>.csv`` for every list of records in the documents (e.g. ``impulses.csv``: one row
  per impulse), with the repetition's key;
- ``series.csv``: every list of numbers (the traces the plots use) in long form: key, name,
  index, value.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

Scalar = str | int | float | bool | None


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """The scalars of ``doc`` (nested mappings flattened with dots); lists left out."""
    out: dict[str, Scalar] = {}
    for k, v in doc.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out |= flatten(v, f"{name}.")
        elif _scalar(v):
            out[name] = v
    return out


def record_lists(doc: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, list[Any]]]:
    """Every list of mappings in ``doc``, by dotted name."""
    for k, v in doc.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            yield from record_lists(v, f"{name}.")
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            yield name, v


def number_lists(doc: Any, prefix: str = "") -> Iterator[tuple[str, list[Any]]]:
    """Every list of numbers (or of lists of numbers) in ``doc``, by dotted name."""
    if isinstance(doc, Mapping):
        for k, v in doc.items():
            yield from number_lists(v, f"{prefix}{k}.")
    elif (
        isinstance(doc, list)
        and doc
        and all(_scalar(x) or isinstance(x, list) for x in doc)
        and any(isinstance(x, int | float | list) for x in doc)
    ):
        yield prefix.rstrip("."), doc


def _write(path: Path, rows: list[dict[str, Scalar]]) -> Path:
    columns = list(dict.fromkeys(c for r in rows for c in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    return path


def export_csv(raws: Mapping[str, Mapping[str, Any]], into: Path) -> list[Path]:
    """Write the CSV files of ``raws`` into ``into``; the files written."""
    into.mkdir(parents=True, exist_ok=True)
    written = [_write(into / "repetitions.csv", [flatten(r) for r in raws.values()])]
    lists: dict[str, list[dict[str, Scalar]]] = {}
    series: list[dict[str, Scalar]] = []
    for key, raw in raws.items():
        for name, records in record_lists(raw):
            lists.setdefault(name, []).extend(
                {"key": key, "index": i, **flatten(rec)} for i, rec in enumerate(records)
            )
        for name, values in number_lists(raw):
            for i, v in enumerate(values):
                cells = v if isinstance(v, list) else [v]
                row: dict[str, Scalar] = {"key": key, "name": name, "index": i}
                row |= {f"v{j}": c for j, c in enumerate(cells) if _scalar(c)}
                series.append(row)
    for name, rows in lists.items():
        written.append(_write(into / f"{name.replace('.', '_')}.csv", rows))
    if series:
        written.append(_write(into / "series.csv", series))
    return written
