"""The experiment runner: repetitions, raw JSON per repetition, resumable, report at the end.

An :class:`Experiment` plans its repetitions (:class:`Rep`, each with a key that names its raw
file), opens one session (a fabric, brought down on the way out whatever happens), runs one
repetition at a time and writes its report from the raw documents. The runner keeps an
output directory::

    OUT/env.json          the machine and software of every session that ran here
    OUT/raw/<key>.json    one repetition (written atomically once it is complete)
    OUT/report.md         tables, statistics, the seeds' numbers, plots
    OUT/*.png

Running again with the same ``OUT`` runs only the repetitions whose raw file is missing, so
an interrupted run (Ctrl-C, SIGTERM, a crash) loses at most the repetition it was in.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, Protocol

from experiments.envinfo import environment

Say = Callable[[str], None]
Raw = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What ``reroute experiment run`` was asked for; ``runs`` None means the experiment's
    default (full or quick)."""

    runs: int | None = None
    quick: bool = False
    seed: int = 0
    backend: str = "ovs"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rep:
    """One repetition: ``key`` names its raw file (``raw/<key>.json``), ``params`` says what
    to do (JSON-ready; stored in the raw file)."""

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)


class Experiment(Protocol):
    """What the runner needs of an experiment."""

    name: str
    title: str  # one line, with the seed and section it reproduces
    backends: tuple[str, ...]  # the --backend values it supports; the first is the default

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions to run for ``opts``."""

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        """Set up (e.g. a fabric) for repetitions; leaving tears it all down. ``seed`` varies
        with the repetitions already done, so a resumed run draws fresh random values."""
        ...

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One repetition's raw document."""
        ...

    def report(self, opts: Options, raws: Mapping[str, Raw], out: Path) -> str:
        """Markdown from the raw documents (by key); may write PNGs into ``out``."""
        ...


class Skipped(Exception):
    """The experiment cannot run here (e.g. a kernel feature is missing); says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    out: Path
    planned: int
    ran: int  # repetitions run in this invocation
    kept: int  # raw files present now, of the planned ones
    interrupted: bool
    report: Path | None


def default_out(name: str, root: Path) -> Path:
    """The default result directory of ``name``: results/NAME/TIMESTAMP."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return root / "results" / name / stamp


def raw_path(out: Path, key: str) -> Path:
    """The raw document of repetition ``key``."""
    return out / "raw" / f"{key}.json"


def every_raw(out: Path) -> dict[str, Raw]:
    """Every raw document in ``out/raw``, by key (runs of other plans into the same ``--out``
    too: another backend's, another configuration's)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "raw").glob("*.json"))}


def load_raws(out: Path, plan: Sequence[Rep]) -> dict[str, Raw]:
    """The raw documents present for ``plan``, by key, in plan order."""
    found = {}
    for rep in plan:
        path = raw_path(out, rep.key)
        if path.exists():
            found[rep.key] = json.loads(path.read_text())
    return found


def write_json(path: Path, doc: Any) -> None:
    """Atomically: a reader (or a resumed run) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def record_env(out: Path, opts: Options, argv: Sequence[str]) -> None:
    """Append this session's environment to ``env.json``."""
    path = out / "env.json"
    doc = json.loads(path.read_text()) if path.exists() else {"sessions": []}
    session = environment() | {"command": shlex.join(argv), "options": _opts(opts)}
    doc["sessions"].append(session)
    write_json(path, doc)


def _opts(opts: Options) -> dict[str, Any]:
    return {"runs": opts.runs, "quick": opts.quick, "seed": opts.seed, "backend": opts.backend}


class Progress(Protocol):
    def advance(self, key: str) -> None:
        """Repetition ``key`` is done."""

    def say(self, message: str) -> None:
        """A note for the user."""


def run(
    exp: Experiment,
    opts: Options,
    out: Path,
    progress: Callable[[int, int], AbstractContextManager[Progress]],
    *,
    argv: Sequence[str] = (),
) -> Outcome:
    """Run the missing repetitions of ``exp`` into ``out`` and write its report.

    SIGINT and SIGTERM stop it cleanly: the session is left (fabric down), finished
    repetitions are kept, and the outcome says ``interrupted`` (no report then)."""
    plan = exp.plan(opts)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    todo = [r for r in plan if not raw_path(out, r.key).exists()]
    ran, interrupted = 0, False
    if todo:
        record_env(out, opts, argv)
        try:
            with _signals(), progress(len(plan), len(plan) - len(todo)) as bar:
                done = len(plan) - len(todo)
                ran = _repetitions(exp, opts, out, todo, bar, seed=opts.seed * 1000 + done)
        except KeyboardInterrupt:
            interrupted = True
    raws = load_raws(out, plan)
    report = None
    if not interrupted:
        report = out / "report.md"
        body = exp.report(opts, raws, out)
        report.write_text(_header(exp, opts, out, len(raws), argv) + body)
    return Outcome(
        out=out,
        planned=len(plan),
        ran=ran,
        kept=len(raws),
        interrupted=interrupted,
        report=report,
    )


def _repetitions(
    exp: Experiment, opts: Options, out: Path, todo: list[Rep], bar: Progress, *, seed: int
) -> int:
    done = 0
    with exp.session(opts, bar.say, seed=seed) as session:
        for rep in todo:
            doc = exp.run(session, rep, bar.say)
            doc = {"key": rep.key, "params": dict(rep.params), **doc}
            write_json(raw_path(out, rep.key), doc)
            done += 1
            bar.advance(rep.key)
    return done


def _header(exp: Experiment, opts: Options, out: Path, kept: int, argv: Sequence[str]) -> str:
    command = shlex.join(argv) if argv else f"reroute experiment run {exp.name}"
    return (
        f"# {exp.name}: {exp.title}\n\n"
        f"Made by `{command}` ({_scale(opts)}, backend"
        f" {opts.backend}, seed {opts.seed}): {kept} repetitions in `raw/`, the machine in"
        " `env.json`. Statistics: mean [bootstrap 95 % CI of the mean], n = runs behind each.\n\n"
    )


def _scale(opts: Options) -> str:
    scale = "quick scale" if opts.quick else "full scale"
    return scale if opts.runs is None else f"{opts.runs} runs per case"


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


@contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C (the session's teardown runs), as before outside."""
    signums = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.signal(s, _interrupt) for s in signums}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
