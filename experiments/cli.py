"""``reroute experiment list|run|report|audit|export|seeds|full``: the seeds' experiments,
repeated, with reports and plots.

``run NAME`` writes into ``--out`` (default ``results/NAME/<UTC timestamp>/``) one raw file
per repetition, ``env.json``, ``report.md``, ``tables/*.csv`` and PNG plots; the same
``--out`` again runs only the missing repetitions. Parameters come from
``experiments/configs/NAME.yaml``, ``--config FILE`` and ``--set KEY=VALUE``. A progress bar
with ETA shows on a terminal (rich), plain lines otherwise. Ctrl-C (or SIGTERM) stops
cleanly: the fabric comes down, finished repetitions stay, and the command says how to
resume. ``report DIR`` writes the report, tables and plots again from ``DIR/raw`` alone (no
root, no fabric); ``audit DIR`` recomputes the capture numbers of the repetitions that kept
their captures (``DIR/pcaps``, the first 3 of each arm) from the packets and lists any that
differ; ``export DIR --csv`` writes the raw numbers as CSV for a spreadsheet; ``seeds
[DIR ...]`` sets the seeds' numbers beside ours, every entry in one table (default: the full
run's, ``experiments/results-full/seeds.md``), and with ``--readme FILE`` puts that table and
each entry's report conclusions between FILE's markers; ``full`` runs every experiment at the seeds'
sample sizes (``make experiments-full``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.backends import BACKENDS
from services.reroute.errors import RerouteError

if TYPE_CHECKING:
    from rich.progress import Progress

    from experiments.runner import Experiment
    from experiments.runner import Progress as RunnerProgress

# Every `reroute` command (the probe's processes too) loads this module: the experiments
# (matplotlib, numpy) and rich are imported only when an experiment command runs.

ROOT = Path(__file__).resolve().parents[1]


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
    """The runner's progress when stdout is not a terminal: one line per repetition, with
    its time and an estimate of what is left."""

    def __init__(self, total: int, done: int) -> None:
        self.total, self.done, self.ran = total, done, 0
        self.t0 = self.last = time.monotonic()

    def advance(self, key: str) -> None:
        """One repetition done: print a line."""
        now = time.monotonic()
        self.done += 1
        self.ran += 1
        left = (now - self.t0) / self.ran * (self.total - self.done)
        from experiments.runner import duration

        print(
            f"[{self.done}/{self.total}] {key} done ({now - self.last:.1f} s;"
            f" about {duration(left)} left)",
            flush=True,
        )
        self.last = now

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
        print(
            f"{'':20}   backends: {', '.join(exp.backends)}; parameters:"
            f" experiments/configs/{name}.yaml"
        )
        quick, full = (_estimate(exp, quick=q) for q in (True, False))
        print(f"{'':20}   about {full} on its first backend ({quick} with --quick)")
    print(f"\n--quick: {QUICK}")
    return 0


QUICK = (
    "the short scale CI runs (few repetitions, short streams): it shows that an experiment "
    "works, its numbers are not the seeds' (reroute experiment full runs those)"
)


def _estimate(exp: Experiment, *, quick: bool) -> str:
    """How long ``run`` takes at the default or quick scale, from its repetitions' lengths
    (``full.rep_seconds``, the estimate ``full --dry-run`` prints)."""
    from experiments.full import rep_seconds
    from experiments.runner import duration, options

    opts = options(exp, backend=None, quick=quick, seed=0, config=None, sets=[])
    cfg = opts.config.model_dump()
    return duration(sum(rep_seconds(exp.name, r.params, cfg) for r in exp.plan(opts)))


def _experiment(name: str) -> Experiment:
    from experiments import catalog

    try:
        return catalog.get(name)
    except KeyError as exc:
        raise RerouteError(str(exc.args[0])) from None


def _run(args: argparse.Namespace) -> int:
    from experiments.runner import Skipped, default_out, duration, options
    from experiments.runner import run as run_experiment

    exp = _experiment(args.name)
    sets = [*args.set, *([f"runs={args.runs}"] if args.runs else [])]
    opts = options(
        exp, backend=args.backend, quick=args.quick, seed=args.seed, config=args.config, sets=sets
    )
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
            f" `reroute experiment run {exp.name} --out {out}` (same options) runs the rest",
            file=sys.stderr,
        )
        return 130
    done = f"{outcome.kept}/{outcome.planned} repetitions ({outcome.ran} run now)"
    print(f"{done} in {duration(outcome.wall_s)}; report: {outcome.report}")
    return 0


def _experiment_of(directory: Path, name: str | None) -> Experiment:
    """The experiment whose results ``directory`` holds (its raw files say, or env.json)."""
    from experiments.runner import every_raw, read_env

    if not (directory / "raw").is_dir():
        raise RerouteError(f"{directory}: no raw/ directory (not an experiment's results)")
    if name is None:
        found = {str(r.get("experiment")) for r in every_raw(directory).values()} - {"None"}
        found |= {str(s["experiment"]) for s in read_env(directory) if s.get("experiment")}
        if len(found) != 1:
            raise RerouteError(
                f"{directory}: cannot tell which experiment made it ({', '.join(found) or 'no'}"
                " name recorded); say it with --experiment NAME"
            )
        name = found.pop()
    return _experiment(name)


def _report(args: argparse.Namespace) -> int:
    from experiments.runner import every_raw, render

    t0 = time.monotonic()
    exp = _experiment_of(args.dir, args.experiment)
    if not every_raw(args.dir):
        raise RerouteError(f"{args.dir}/raw: no raw files to report on")
    report = render(exp, args.dir, args.out)
    print(f"report: {report} ({time.monotonic() - t0:.1f} s)")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from experiments.audit import missing, recheck
    from experiments.runner import every_raw

    if not (args.dir / "raw").is_dir():
        raise RerouteError(f"{args.dir}: no raw/ directory (not an experiment's results)")
    raws = every_raw(args.dir)
    elsewhere = sorted(k for k, raw in raws.items() if missing(args.dir, raw))
    if elsewhere:
        print(
            f"{len(elsewhere)} repetitions' captures are not under {args.dir}/pcaps (a full "
            f"run commits 3 per arm: the rest stay in each part's output), not audited: "
            + ", ".join(elsewhere)
        )
    found = recheck(args.dir, raws)
    if not found:
        print(f"{args.dir}: no repetition kept its captures (no pcaps/): nothing to audit")
        return 1
    for key, differ in found.items():
        print(f"{key}: " + ("agrees with its captures" if not differ else "; ".join(differ)))
    bad = sum(1 for d in found.values() if d)
    print(f"{len(found) - bad} of {len(found)} repetitions' capture numbers recomputed alike")
    return 1 if bad else 0


def _export(args: argparse.Namespace) -> int:
    from experiments.export import export_csv
    from experiments.runner import every_raw

    if not args.csv:
        raise RerouteError("export: say the format, --csv (the only one)")
    if not (args.dir / "raw").is_dir():
        raise RerouteError(f"{args.dir}: no raw/ directory (not an experiment's results)")
    files = export_csv(every_raw(args.dir), args.out or args.dir / "csv")
    for f in files:
        print(f)
    return 0


def _seeds(args: argparse.Namespace) -> int:
    from experiments import full, parts, seed_table

    plan = full.load_plan()
    dirs = args.dir
    if not dirs:  # the full run's entries, each from a complete re-run where there is one
        dirs, said = parts.published(ROOT)
        for line in said:
            print(f"seeds: {line}", file=sys.stderr)
    entries = seed_table.collect(dirs, plan, missing_ok=not args.dir)
    out = args.out or (dirs[0].parent if args.dir else ROOT / parts.RESULTS) / "seeds.md"
    given = [*map(str, args.dir), *(["--out", str(args.out)] if args.out else [])]
    given += ["--readme", str(args.readme)] if args.readme else []
    command = shlex.join(["reroute", "experiment", "seeds", *given])
    text = seed_table.render(entries, command=command)
    writes = [(out, text)]
    if args.readme:  # checked whole before either file is written
        if not args.readme.is_file():
            raise RerouteError(f"{args.readme}: no such file")
        section = seed_table.readme_section(entries, command=command, readme=args.readme)
        spliced = seed_table.splice(args.readme.read_text(), section, name=str(args.readme))
        writes.append((args.readme, spliced))
    for path, content in writes:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(content)
        tmp.replace(path)
    print(text)
    for path, _ in writes:
        print(f"written: {path}")
    return 0


def _full(args: argparse.Namespace) -> int:
    from experiments import full, parts

    pin_file = _pin_file(args.pin_file, args.main)
    if args.plan and args.pin_file:
        raise RerouteError("--pin-file names its run's plan (its plan:): no --plan with it")
    if args.part and (args.quick or args.set or args.plan):
        raise RerouteError("--part runs the pinned plan as it is: no --quick, --set or --plan")
    plan = full.load_plan(args.plan) if args.plan else parts.load_run(args.main / pin_file)[1]
    if args.pin:
        return parts.pin_here(plan, args.main, pin_file)
    if args.collect:
        return parts.collect(args.collect, args.main, pin_file)
    only = full.select(plan, args.only) if args.only else None
    if args.part:
        return parts.run_part(
            plan,
            part_arg=args.part,
            main=args.main,
            out=args.out,
            only=only,
            dry_run=args.dry_run,
            allow_dirty=args.allow_dirty,
            progress=_progress,
            pin_file=pin_file,
        )
    code = full.run_all(
        only if only is not None else plan,
        args.out or ROOT / "results" / "full",
        quick=args.quick,
        sets=args.set,
        seed=args.seed,
        dry_run=args.dry_run,
        allow_dirty=args.allow_dirty,
        progress=_progress,
    )
    if args.dry_run and not args.quick and not args.set and not args.plan:
        pin = parts.load_pin(args.main / pin_file)
        cut = parts.plan_parts(plan, pin)
        print()
        parts.show(cut, args.main / pin.results, only)
        drift = parts.drifted(pin, cut)
        source = pin.commit or "no commit yet (the plan is not pinned: --pin)"
        print(f"warning: {drift}" if drift else f"the parts run from {source}")
    return code


def _pin_file(given: Path | None, main: Path) -> Path:
    """``--pin-file`` relative to the main checkout (the default: the full run's)."""
    if given is None:
        from experiments.parts import PLAN_FILE

        return PLAN_FILE
    if not given.is_absolute():
        return given
    try:
        return given.resolve().relative_to(main.resolve())
    except ValueError:
        raise RerouteError(f"--pin-file {given}: not inside the main checkout {main}") from None


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``experiment list|run|report|audit|export|seeds|full`` to the ``reroute`` parser."""
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
    _config_arguments(run)
    run.add_argument(
        "--runs", type=_positive, metavar="N", help="repetitions per case (--set runs=N)"
    )
    run.add_argument("--out", type=Path, metavar="DIR", help="default results/NAME/<UTC time>/")
    run.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        help="how the packet switches are driven (default: the experiment's first)",
    )
    run.set_defaults(func=_run)

    report = verbs.add_parser(
        "report", help="write report.md, tables and plots again from DIR/raw (no root)"
    )
    report.add_argument("dir", type=Path, metavar="DIR", help="an experiment's results")
    report.add_argument("--out", type=Path, metavar="DIR2", help="write there (default: DIR)")
    report.add_argument("--experiment", metavar="NAME", help="when DIR does not record it")
    report.set_defaults(func=_report)

    audit = verbs.add_parser(
        "audit",
        help="recompute the capture numbers of the audit sample from DIR/pcaps (no root)",
    )
    audit.add_argument("dir", type=Path, metavar="DIR", help="an experiment's results")
    audit.set_defaults(func=_audit)

    export = verbs.add_parser("export", help="the raw numbers of DIR as CSV files")
    export.add_argument("dir", type=Path, metavar="DIR", help="an experiment's results")
    export.add_argument("--csv", action="store_true", help="CSV (one row per repetition)")
    export.add_argument("--out", type=Path, metavar="DIR2", help="default DIR/csv")
    export.set_defaults(func=_export)

    seeds = verbs.add_parser(
        "seeds",
        help="the seeds' numbers beside ours, every entry in one Markdown table (no root)",
        description="Read each entry directory's raw data (as `report` does) and write one"
        " Markdown table: the seed's number and n beside ours for the same metric, computed"
        " as the entry's report does; entries with no raw data are listed as not yet run."
        " Without DIR: every entry of the full plan under experiments/results-full/.",
    )
    seeds.add_argument(
        "dir", type=Path, nargs="*", metavar="DIR", help="entry directories (default: the plan's)"
    )
    seeds.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="default seeds.md beside the first DIR (experiments/results-full/seeds.md)",
    )
    seeds.add_argument(
        "--readme",
        type=Path,
        metavar="FILE",
        help="also put the table and each entry's conclusions (from its report.md, made by"
        " `report` from the same raw data) between FILE's results-full markers"
        " (experiments/README.md)",
    )
    seeds.set_defaults(func=_seeds)

    full = verbs.add_parser(
        "full",
        help="every experiment at the seeds' sample sizes (make experiments-full; root)",
        description="Run every experiment of the plan (experiments/configs/full.yaml) at the"
        " seeds' sample sizes into --out/NAME, resumable (run it again to continue), with"
        " its progress and total time. --dry-run prints the plan, its estimated time and its"
        " parts. The published run goes in parts, each from the commit"
        " experiments/full-plan.yaml pins: --part K/N in a clean worktree of that commit,"
        " then --collect in the main checkout (experiments/README.md: the full run in parts).",
    )
    full.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="default results/full; with --part /var/tmp/reroute-full/COMMIT/part-K-of-N"
        " (outside the tree)",
    )
    full.add_argument("--plan", type=Path, metavar="FILE", help="default configs/full.yaml")
    full.add_argument("--quick", action="store_true", help="every entry at quick scale (smoke)")
    full.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="applied to every entry (e.g. runs=1 for a smoke run)",
    )
    full.add_argument("--seed", type=int, default=0, help="seed of the emulators' draws")
    full.add_argument(
        "--only",
        nargs="+",
        metavar="WORD",
        help="only these entries: an experiment, an entry's out, a backend (e.g. dpctl: every"
        " entry on it) or NAME:BACKEND (impulse-response:odl)",
    )
    full.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and estimate, and each part's duration, contents and what of it"
        " is committed (with --part: that part only)",
    )
    full.add_argument(
        "--part",
        metavar="K/N",
        help="run part K of the N the pinned plan makes (or `next`: the first not committed)"
        " into --out, skipping what --main has committed; refused unless this tree is the"
        " pinned commit, unmodified",
    )
    full.add_argument(
        "--main",
        type=Path,
        default=ROOT,
        metavar="DIR",
        help="the main checkout: its experiments/full-plan.yaml pins the commit and its"
        " experiments/results-full/ holds the committed parts (default: this tree)",
    )
    full.add_argument(
        "--collect",
        type=Path,
        metavar="DIR",
        help="copy the finished part in DIR (a --part --out) into --main's"
        " experiments/results-full/, after checking every file is of the pinned commit;"
        " prints the git commands that commit it",
    )
    full.add_argument(
        "--pin",
        action="store_true",
        help="write this clean checkout's HEAD and its number of parts into"
        " experiments/full-plan.yaml (the lead, once section 1 has landed)",
    )
    full.add_argument(
        "--pin-file",
        type=Path,
        metavar="FILE",
        help="the run's pin file, relative to --main (default experiments/full-plan.yaml, the"
        " full run; experiments/full-plan-NAME.yaml: a re-run of some entries from a later"
        " commit, with its own plan and results directory); for --pin, --part, --collect and"
        " --dry-run",
    )
    full.add_argument(
        "--allow-dirty", action="store_true", help="run from a modified tree (not to publish)"
    )
    full.set_defaults(func=_full)


def _config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help=QUICK)
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="parameters over experiments/configs/NAME.yaml"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one parameter (dotted KEY, VALUE as YAML), e.g. --set runs=5; repeatable",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the emulators' random draws")
