"""The experiment runner: repetitions, a raw file per repetition, resumable, report from raw.

An :class:`Experiment` plans its repetitions (:class:`Rep`, each with a key that names its raw
file), opens one session (a fabric, brought down on the way out whatever happens), runs one
repetition at a time and writes its report from the raw documents alone. The runner keeps an
output directory::

    OUT/env.json              the machine and software of every session that ran here
    OUT/raw/<key>.json.gz     one repetition (gzip JSON, written atomically once complete):
                              its numbers, its traces, the configuration, commit and load
    OUT/pcaps/<key>-<host>.pcap.gz  the audit sample: the captures of the first 3
                              repetitions of each arm, headers only (experiments.audit)
    OUT/report.md             conclusions, tables, statistics, the seeds' numbers, plots
    OUT/tables/*.csv          every table of the report, as CSV
    OUT/*.png

Running again with the same ``OUT`` runs only the repetitions whose raw file is missing, so
an interrupted run (Ctrl-C, SIGTERM, a crash) loses at most the repetition it was in.
:func:`render` writes the report, tables and plots again from ``raw/`` (no root, no fabric).
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from experiments import audit
from experiments import markdown as md
from experiments.config import Config, as_doc, differences, resolve
from experiments.envinfo import environment, git_head
from fabric import signals
from services.reroute.errors import ConfigError, RerouteError

Say = Callable[[str], None]
Raw = Mapping[str, Any]
RAW_SUFFIXES = (".json.gz", ".json")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """What ``reroute experiment run`` was asked for: the resolved ``config`` (its ``runs``
    is the repetitions per case), the scale, the emulators' seed and the backend."""

    config: Config = field(default_factory=lambda: Config(runs=1))
    quick: bool = False
    seed: int = 0
    backend: str = "ovs"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rep:
    """One repetition: ``key`` names its raw file (``raw/<key>.json.gz``), ``params`` says
    what to do (JSON-ready; stored in the raw file)."""

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """A report: its conclusions (two sentences, they open it) and the rest (Markdown)."""

    conclusions: str
    body: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedRow:
    """A number a seed states beside ours for the same metric (``reroute experiment
    seeds``): where the seed states it (``source``, e.g. "003 Table 4.5"), its value and n
    as the seed gives them ("n not stated" where it does not), and ours from the raw
    documents by the functions the experiment's report uses, with its n. ``note`` says where
    our measurement or setting differs from the seed's."""

    metric: str
    source: str
    seed: str
    seed_n: str
    ours: str  # mean [95 % CI], the values below 5, or a difference [two-sample CI]
    ours_n: str
    note: str = ""


class Experiment(Protocol):
    """What the runner needs of an experiment."""

    name: str
    title: str  # one line, with the seed and section it reproduces
    backends: tuple[str, ...]  # the --backend values it supports; the first is the default
    config_model: type[Config]  # its parameters (experiments/configs/NAME.yaml)

    def plan(self, opts: Options) -> list[Rep]:
        """The repetitions to run for ``opts``."""

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        """Set up (e.g. a fabric) for repetitions; leaving tears it all down. ``seed`` varies
        with the repetitions already done, so a resumed run draws fresh random values."""
        ...

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        """One repetition's raw document."""
        ...

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        """The report from raw documents alone (by key, every one in the directory); may
        write PNGs into ``out``."""
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
    wall_s: float = 0.0


def options(
    exp: Experiment,
    *,
    backend: str | None,
    quick: bool,
    seed: int,
    config: Path | None,
    sets: Sequence[str],
) -> Options:
    """The options of a run: backend checked, configuration resolved (ConfigError if not)."""
    chosen = backend or exp.backends[0]
    if chosen not in exp.backends:
        raise RerouteError(f"{exp.name} runs on backend(s) {', '.join(exp.backends)}, not {chosen}")
    cfg = resolve(exp.name, exp.config_model, file=config, sets=sets, quick=quick)
    return Options(config=cfg, quick=quick, seed=seed, backend=chosen)


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 07 s``, ``2 h 05 min``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def default_out(name: str, root: Path) -> Path:
    """The default result directory of ``name``: results/NAME/TIMESTAMP."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return root / "results" / name / stamp


def raw_path(out: Path, key: str) -> Path:
    """Where repetition ``key``'s raw document is written."""
    return out / "raw" / f"{key}.json.gz"


def raw_exists(out: Path, key: str) -> bool:
    """Whether repetition ``key`` is done in ``out`` (as .json.gz, or .json of older runs)."""
    return any((out / "raw" / f"{key}{s}").exists() for s in RAW_SUFFIXES)


def read_raw(path: Path) -> dict[str, Any]:
    """One raw document (gzip JSON or plain JSON)."""
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: not a raw document (a JSON object)")
    return doc


def _key(path: Path) -> str:
    return next(path.name.removesuffix(s) for s in RAW_SUFFIXES if path.name.endswith(s))


def every_raw(out: Path) -> dict[str, Raw]:
    """Every raw document in ``out/raw``, by key, sorted (runs of other plans into the same
    ``--out`` too: another backend's, another configuration's)."""
    found = (out / "raw").glob("*.json*")
    files = sorted(p for p in found if p.name.endswith(RAW_SUFFIXES) and not p.name.startswith("."))
    return {_key(p): read_raw(p) for p in files}


def write_raw(out: Path, key: str, doc: Any) -> None:
    """Atomically (gzip JSON): a reader (or a resumed run) never sees half a file."""
    path = raw_path(out, key)
    data = gzip.compress((json.dumps(doc) + "\n").encode(), mtime=0)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, doc: Any) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def read_env(out: Path) -> list[dict[str, Any]]:
    """The sessions ``env.json`` records (none if there is no such file)."""
    path = out / "env.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("sessions", []))


def record_env(exp: Experiment, out: Path, opts: Options, argv: Sequence[str]) -> None:
    """Append this session's environment, command and configuration to ``env.json``."""
    path = out / "env.json"
    doc = json.loads(path.read_text()) if path.exists() else {"sessions": []}
    session = environment() | {
        "experiment": exp.name,
        "command": shlex.join(argv),
        "options": {"quick": opts.quick, "seed": opts.seed, "backend": opts.backend},
        "config": as_doc(opts.config),
    }
    doc["sessions"].append(session)
    write_json(path, doc)


class Progress(Protocol):
    def advance(self, key: str) -> None:
        """Repetition ``key`` is done."""

    def say(self, message: str) -> None:
        """A note for the user."""


def check_resumable(exp: Experiment, out: Path, opts: Options) -> None:
    """ConfigError if ``out`` holds repetitions of another experiment, or of this backend
    made with another configuration (other than ``runs``): their numbers would be mixed."""
    mine = as_doc(opts.config)
    for key, raw in every_raw(out).items():
        if raw.get("experiment", exp.name) != exp.name:
            raise ConfigError(f"{out} holds {raw['experiment']} runs ({key}); use another --out")
        if raw.get("backend", opts.backend) != opts.backend or "config" not in raw:
            continue
        differ = differences([mine, raw["config"]])
        if differ:
            raise ConfigError(
                f"{out}: {key} was made with another configuration ({', '.join(differ)} differ);"
                " resume with the same configuration or choose another --out"
            )


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
    started = time.monotonic()
    plan = exp.plan(opts)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    check_resumable(exp, out, opts)
    todo = [r for r in plan if not raw_exists(out, r.key)]
    ran, interrupted = 0, False
    if todo:
        record_env(exp, out, opts, argv)
        try:
            with signals.unwinding(), progress(len(plan), len(plan) - len(todo)) as bar:
                done = len(plan) - len(todo)
                ran = _repetitions(exp, opts, out, todo, bar, seed=opts.seed * 1000 + done)
        except KeyboardInterrupt:
            interrupted = True
    kept = sum(raw_exists(out, r.key) for r in plan)
    report = None if interrupted else render(exp, out)
    return Outcome(
        out=out,
        planned=len(plan),
        ran=ran,
        kept=kept,
        interrupted=interrupted,
        report=report,
        wall_s=time.monotonic() - started,
    )


def _repetitions(
    exp: Experiment, opts: Options, out: Path, todo: list[Rep], bar: Progress, *, seed: int
) -> int:
    done = 0
    common = {
        "experiment": exp.name,
        "backend": opts.backend,
        "config": as_doc(opts.config),
        "seed": opts.seed,
        "git": git_head(),
    }
    with exp.session(opts, bar.say, seed=seed) as session:
        for rep in todo:
            began, t0 = datetime.now(UTC).isoformat(timespec="seconds"), time.monotonic()
            load_before = os.getloadavg()[0]
            with audit.keeping(out, rep.key):  # the first repetitions keep their captures
                doc = exp.run(session, rep, bar.say)
            meta = {
                "started_utc": began,
                "wall_s": round(time.monotonic() - t0, 2),
                "loadavg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            }
            write_raw(
                out, rep.key, {"key": rep.key, "params": dict(rep.params)} | common | meta | doc
            )
            done += 1
            bar.advance(rep.key)
    return done


def render(exp: Experiment, raw_dir: Path, out: Path | None = None) -> Path:
    """Write ``report.md``, ``tables/*.csv`` and the plots of ``exp`` from ``raw_dir/raw``
    (and ``raw_dir/env.json`` if present) into ``out`` (default ``raw_dir``); its path."""
    out = out or raw_dir
    out.mkdir(parents=True, exist_ok=True)
    raws = every_raw(raw_dir)
    with md.collecting() as tables:
        written = exp.report(raws, out)
    text = (
        f"# {exp.name}: {exp.title}\n\n"
        f"**Conclusions.** {written.conclusions}\n\n"
        + header(raws, read_env(raw_dir), exp.name)
        + written.body
    )
    report = out / "report.md"
    report.write_text(text)
    md.write_csv(tables, out / "tables")
    return report


def header(raws: Mapping[str, Raw], sessions: Sequence[Mapping[str, Any]], name: str) -> str:
    """Who made the numbers: commands, commits, repetitions, configuration, load."""
    lines = []
    commands = [s["command"] for s in sessions if s.get("command")]
    if commands:
        lines.append("Made by " + "; then ".join(f"`{c}`" for c in _unique(commands)) + ".")
    lines.append(
        f"{len(raws)} repetitions in `raw/` (one gzip JSON each: every number and trace of"
        f" the report), the machine of each session in `env.json`; regenerate with"
        f" `reroute experiment report DIR`."
    )
    gits = _unique(str(r["git"]) for r in raws.values() if r.get("git"))
    if gits:
        dirty = " (**from a modified tree**)" if any(g.endswith("-dirty") for g in gits) else ""
        lines.append(f"Commit{'s' if len(gits) > 1 else ''}: {', '.join(gits)}{dirty}.")
    configs = [r["config"] for r in raws.values() if "config" in r]
    differ = differences(configs)
    if differ:
        lines.append(f"The repetitions were made with different parameters: {', '.join(differ)}.")
    lines.append(load_sentence(raws, sessions))
    lines.append(
        "Statistics: mean [bootstrap 95 % CI of the mean], n = runs behind each; a table"
        " warns where n < 10, and below 5 gives the values instead of an interval."
    )
    return " ".join(line for line in lines if line) + "\n\n"


def load_sentence(raws: Mapping[str, Raw], sessions: Sequence[Mapping[str, Any]]) -> str:
    """The load average during the repetitions, with a warning when the machine was busy."""
    loads = [float(v) for r in raws.values() for v in r.get("loadavg", [])]
    cores = next((int(s["cores"]) for s in sessions if s.get("cores")), None) or os.cpu_count() or 1
    if not loads:
        return ""
    loads.sort()
    median, top = loads[len(loads) // 2], loads[-1]
    text = f"Load average (1 min) during the repetitions: median {median:.1f}, max {top:.1f}"
    if top > cores:
        return (
            f"{text} on {cores} cores: **the machine was busy** (more runnable tasks than"
            " cores), so the fabric's own drops and the spread are larger than on a quiet one."
        )
    return f"{text} on {cores} cores."


def _unique(items: Iterator[str] | Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))
