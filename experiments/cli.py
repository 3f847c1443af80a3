"""``reroute experiment list|run``: the seeds' experiments, repeated, with reports and plots.

``run NAME`` writes into ``--out`` (default ``results/NAME/<UTC timestamp>/``) one raw JSON
per repetition, ``env.json``, ``report.md`` and PNG plots; the same ``--out`` again runs only
the missing repetitions. A progress bar with ETA shows on a terminal (rich), plain lines
otherwise. Ctrl-C (or SIGTERM) stops cleanly: the fabric comes down, finished repetitions
stay, and the command says how to resume.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.runner import Options, Skipped, default_out
from experiments.runner import Progress as RunnerProgress
from experiments.runner import run as run_experiment
from services.reroute.errors import RerouteError

if TYPE_CHECKING:
    from rich.progress import Progress

# Every `reroute` command (the probe's processes too) loads this module: the experiments
# (matplotlib) and rich are imported only when an experiment command runs.

ROOT = Path(__file__).resolve().parents[1]
# every experiment's --backend values (each says which it runs on; a test keeps this whole)
BACKENDS = ("ovs", "ryu", "dpctl", "dpctl+10", "dpctl+100", "odl", "p4runtime")


class _Bar:
    """The runner's progress on a terminal: a rich bar with ETA, messages above it."""

    def __init__(self, progress: Progress, total: int, done: int) -> None:
        self.progress = progress
        self.task = progress.add_task("repetitions", total=total, completed=done, key="")

    def advance(self, key: str) -> None:
        """One repetition done: advance the bar."""
        self.progress.update(self.task, advance=1, key=key)

    def say(self, message: str) -> None:
        """Print a note under the bar."""
        self.progress.console.print(f"  .. {message}", highlight=False, markup=False)


class _Lines:
    """The runner's progress when stdout is not a terminal: one line per repetition."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done = total, done

    def advance(self, key: str) -> None:
        """One repetition done: print a line."""
        self.done += 1
        print(f"[{self.done}/{self.total}] {key} done", flush=True)

    def say(self, message: str) -> None:
        """Print a note."""
        print(f"  .. {message}", flush=True)


@contextmanager
def _progress(total: int, done: int) -> Iterator[RunnerProgress]:
    if not sys.stdout.isatty():
        yield _Lines(total, done)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[key]}"),
    )
    with Progress(*columns, console=Console()) as progress:
        yield _Bar(progress, total, done)


def _list(args: argparse.Namespace) -> int:
    from experiments import catalog

    for name, exp in catalog.EXPERIMENTS.items():
        print(f"{name:20} {exp.title}")
    for name, what in catalog.PLANNED.items():
        print(f"{name:20} (not built yet) {what}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from experiments import catalog

    try:
        exp = catalog.get(args.name)
    except KeyError as exc:
        raise RerouteError(str(exc.args[0])) from None
    backend = args.backend or exp.backends[0]
    if backend not in exp.backends:
        raise RerouteError(
            f"{exp.name} runs on backend(s) {', '.join(exp.backends)}, not {backend}"
        )
    opts = Options(runs=args.runs, quick=args.quick, seed=args.seed, backend=backend)
    out = args.out or default_out(exp.name, ROOT)
    print(f"{exp.name}: {exp.title}\nresults in {out}", flush=True)
    try:
        outcome = run_experiment(exp, opts, out, _progress, argv=["reroute", *sys.argv[1:]])
    except Skipped as exc:  # the machine lacks what it needs: said, never faked
        print(f"skipped: {exc}", file=sys.stderr)
        return 0
    if outcome.interrupted:
        print(
            f"interrupted: {outcome.kept} of {outcome.planned} repetitions kept in {out};"
            f" `reroute experiment run {exp.name} --out {out}` runs the rest",
            file=sys.stderr,
        )
        return 130
    done = f"{outcome.kept}/{outcome.planned} repetitions ({outcome.ran} run now)"
    print(f"{done}; report: {outcome.report}")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``experiment list|run`` to the ``reroute`` parser."""
    exp = sub.add_parser(
        "experiment",
        help="the seeds' experiments, repeated, with statistics, reports and plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = exp.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("list", help="the experiments").set_defaults(func=_list)
    run = verbs.add_parser("run", help="run an experiment (needs root: it builds fabrics)")
    run.add_argument("name", metavar="NAME", help="see `reroute experiment list`")
    run.add_argument("--runs", type=_positive, metavar="N", help="repetitions per case")
    run.add_argument("--quick", action="store_true", help="the short scale (CI)")
    run.add_argument("--out", type=Path, metavar="DIR", help="default results/NAME/<UTC time>/")
    run.add_argument("--seed", type=int, default=0, help="seed of the emulators' random draws")
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        help="default: the experiment's first",
    )
    run.set_defaults(func=_run)
