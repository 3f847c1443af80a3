"""Shared by the experiments' unit tests: options as the command line makes them, a report
as one text."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments import catalog
from experiments.runner import Experiment, Options, every_raw, options


def opts(name: str, *sets: str, quick: bool = False, backend: str | None = None) -> Options:
    """The options ``reroute experiment run NAME [--quick] [--set ...]`` would make."""
    exp = catalog.get(name)
    return options(exp, backend=backend, quick=quick, seed=0, config=None, sets=list(sets))


def report_text(exp: Experiment, out: Path, raws: Mapping[str, Any] | None = None) -> str:
    """The report of ``raws`` (default: every raw file in ``out``): conclusions and body."""
    written = exp.report(every_raw(out) if raws is None else raws, out)
    return f"**Conclusions.** {written.conclusions}\n\n{written.body}"
