"""``reroute experiment seeds``: the seeds' numbers beside ours, every experiment in one table.

An experiment that reproduces numbers of a seed lists them (:class:`Seeded`): the seed's
value and n as the seed states them (its table, figure or section; "n not stated" where it
does not), ours for the same metric from the raw documents by the functions its report uses,
with our n and, from 5 runs on, the report's interval; a note where our measurement or
setting differs from the seed's. :func:`collect` reads entry directories (each what
``experiment run`` writes, e.g. the full run's ``experiments/results-full/NAME``), each
checked to be one experiment's before any row is made; :func:`render` makes one Markdown
document: the table, then the entries not yet run and those none of whose numbers is a
seed's. Pure but for reading the raw files.

With ``--readme FILE`` the same table, and after it each entry's conclusions as its
``report.md`` says them (:func:`readme_section`), replace what stands between the markers
:data:`BEGIN` and :data:`END` in FILE (experiments/README.md's results of the full run):
every number there then comes from raw data through the reports. A report older than its
raw data (it names another count of repetitions) or a file without exactly one pair of
markers is refused before anything is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from experiments import catalog
from experiments import markdown as md
from experiments.full import Entry as PlanEntry
from experiments.runner import Experiment, Raw, SeedRow, every_raw, read_env
from services.reroute.errors import ConfigError

HEADER = ("entry", "metric", "seed", "seed's value", "seed's n", "ours", "our n", "note")
BEGIN = "<!-- results-full: begin; written by `reroute experiment seeds --readme` -->"
END = "<!-- results-full: end -->"


@runtime_checkable
class Seeded(Protocol):
    """An experiment that sets seed numbers beside its own."""

    def seed_rows(self, raws: Mapping[str, Raw]) -> list[SeedRow]:
        """The rows for the raw documents of one entry directory (by key)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One entry directory's part of the table."""

    directory: Path
    experiment: str
    title: str
    repetitions: int  # raw documents found (0: not yet run)
    rows: tuple[SeedRow, ...]
    commits: tuple[str, ...] = ()  # the raw documents' (git describe)


def experiment_of(
    directory: Path,
    raws: Mapping[str, Raw],
    plan: Sequence[PlanEntry] = (),
    *,
    missing_ok: bool = False,
) -> Experiment:
    """The experiment whose results ``directory`` (its raw documents ``raws``) holds: the
    one they and ``env.json`` name, else the plan entry or experiment the directory's name
    is; ConfigError if none. With ``missing_ok`` a plan entry's directory may not exist yet
    (not yet run)."""
    if not directory.is_dir() and not (missing_ok and directory.name in {e.out for e in plan}):
        raise ConfigError(f"{directory}: no such directory")
    named = {str(r["experiment"]) for r in raws.values() if r.get("experiment")}
    named |= {str(s["experiment"]) for s in read_env(directory) if s.get("experiment")}
    if not named:
        named = {e.experiment for e in plan if e.out == directory.name}
    if not named and directory.name in catalog.EXPERIMENTS:
        named = {directory.name}
    if len(named) > 1:
        listed = ", ".join(sorted(named))
        raise ConfigError(f"{directory}: holds runs of several experiments ({listed})")
    if not named:
        raise ConfigError(
            f"{directory}: not an experiment's results (no raw data or env.json naming one,"
            " and its name is no entry of the full plan)"
        )
    name = named.pop()
    if name not in catalog.EXPERIMENTS:
        raise ConfigError(f"{directory}: made by {name!r}, which is no experiment here")
    return catalog.EXPERIMENTS[name]


def _raws(directory: Path) -> dict[str, Raw]:
    return every_raw(directory) if (directory / "raw").is_dir() else {}


def collect(
    directories: Sequence[Path], plan: Sequence[PlanEntry] = (), *, missing_ok: bool = False
) -> list[Entry]:
    """Every directory's rows; each directory is checked before any row is made
    (ConfigError: nothing to write)."""
    found = []
    for directory in directories:
        raws = _raws(directory)
        found.append((directory, raws, experiment_of(directory, raws, plan, missing_ok=missing_ok)))
    entries = []
    for directory, raws, exp in found:
        rows = exp.seed_rows(raws) if raws and isinstance(exp, Seeded) else []
        entries.append(
            Entry(
                directory=directory,
                experiment=exp.name,
                title=exp.title,
                repetitions=len(raws),
                rows=tuple(rows),
                commits=tuple(dict.fromkeys(str(r["git"]) for r in raws.values() if r.get("git"))),
            )
        )
    return entries


def _commits(entries: Sequence[Entry]) -> str:
    """Which commits made the raw data, said as the reports' headers say it."""
    commits = list(dict.fromkeys(c for e in entries for c in e.commits))
    if not commits:
        return ""
    dirty = " (**from a modified tree**)" if any(c.endswith("-dirty") for c in commits) else ""
    plural = "s" if len(commits) > 1 else ""
    return f" The raw data are of commit{plural} {', '.join(commits)}{dirty}."


def render(entries: Sequence[Entry], *, command: str, heading: str = "#") -> str:
    """The Markdown document: how to read it, the table, what has no row and why; its title
    a ``heading`` (``#``: a document of its own)."""
    rows = [
        [e.directory.name, r.metric, r.source, r.seed, r.seed_n, r.ours, r.ours_n, r.note]
        for e in entries
        for r in e.rows
    ]
    parts = [
        f"{heading} The seeds' numbers beside ours\n",
        f"Made by `{command}` from each entry's `raw/` alone. *seed*: where the seed states the"
        " number (seed 000: Rao 2016; 002: Németh et al.; 003: Orozco Cifuentes 2022; the"
        " project README's References), its value and n as it states them."
        " *ours*: the same metric computed by the entry's report (`report.md` beside its raw"
        " data): mean [bootstrap 95 % CI] of n runs, the values instead below 5; a difference"
        " of two samples as `d [two-sample 95 % CI]`. Where our measurement or setting is not"
        " the seed's, the note says how." + _commits(entries) + "\n",
        md.table(HEADER, rows) if rows else "No entry has a number to set beside a seed's yet.\n",
    ]
    waiting = [e for e in entries if not e.repetitions]
    if waiting:
        listed = ", ".join(f"`{e.directory.name}` ({e.experiment})" for e in waiting)
        parts.append(f"**Not yet run** (no raw data): {listed}.\n")
    silent = [e for e in entries if e.repetitions and not e.rows]
    for e in silent:
        parts.append(
            f"**`{e.directory.name}`** ({e.repetitions} repetitions): none of its numbers is one"
            f" a seed states ({e.experiment}: {e.title}).\n"
        )
    return "\n".join(parts)


def conclusions(entry: Entry) -> str:
    """The conclusions of the entry's ``report.md``, checked to be the report of the raw data
    as they are (ConfigError: no report, or one of another count of repetitions)."""
    report = entry.directory / "report.md"
    again = f"run `reroute experiment report {entry.directory}`"
    if not report.is_file():
        raise ConfigError(f"{entry.directory}: no report.md ({again} first)")
    text = report.read_text()
    said = f"{entry.repetitions} repetitions in `raw/`"
    head = "**Conclusions.** "
    if not re.search(rf"(?<![0-9]){re.escape(said)}", text):  # not 15 for 5
        raise ConfigError(
            f"{report}: not the report of the {entry.repetitions} repetitions now in raw/"
            f" ({again} again)"
        )
    start = text.find(head)
    if start < 0:
        raise ConfigError(f"{report}: no **Conclusions.** paragraph ({again} again)")
    start += len(head)
    ends = [i for mark in ("\n\nMade by ", f"\n\n{said}") if (i := text.find(mark, start)) >= 0]
    return text[start : min(ends, default=len(text))].strip()


def readme_section(entries: Sequence[Entry], *, command: str, readme: Path) -> str:
    """What goes between the markers: the table, then each entry's conclusions with a link
    to its report (relative to ``readme``'s directory)."""
    parts = [BEGIN, "", render(entries, command=command, heading="###")]
    for e in entries:
        if not e.repetitions:
            continue
        link = Path(os.path.relpath(e.directory / "report.md", readme.parent)).as_posix()
        parts.append(
            f"### {e.directory.name}: {e.title}\n\n{conclusions(e)}\n\n"
            f"From {e.repetitions} repetitions: [report]({link}).\n"
        )
    parts.append(END)
    return "\n".join(parts) + "\n"


def splice(text: str, section: str, *, name: str) -> str:
    """``text`` with what stands from :data:`BEGIN` to :data:`END` (both included) replaced
    by ``section`` (ConfigError unless each marker is there once, in that order)."""
    begin, end = text.count(BEGIN), text.count(END)
    if begin != 1 or end != 1 or text.index(BEGIN) > text.index(END):
        raise ConfigError(
            f"{name}: needs one line {BEGIN!r} and, after it, one line {END!r}"
            f" (found {begin} and {end}) to know where the results go"
        )
    head, rest = text.split(BEGIN)
    tail = rest.split(END, 1)[1].removeprefix("\n")
    return head + section + tail
