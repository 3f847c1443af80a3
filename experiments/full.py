"""``reroute experiment full`` (``make experiments-full``): every experiment at the seeds'
sample sizes, one after the other, resumable, with progress and the total time.

The plan (``experiments/configs/full.yaml``) lists entries: an experiment, its backend, the
directory under ``--out`` it writes, and the parameters that give it the seed's sample
sizes (``set``). Each entry is an ordinary ``reroute experiment run`` into its directory, so
running the plan again runs only what is missing. ``--quick`` runs every entry at its quick
scale instead (a smoke run; with ``--set runs=1`` the smallest). The numbers to publish
must come from one clean commit: the plan refuses a modified tree, and a directory that
holds runs of another commit, unless ``--allow-dirty``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments import catalog
from experiments.config import DIR, read
from experiments.envinfo import git_head
from experiments.runner import (
    Experiment,
    Options,
    Progress,
    Raw,
    Rep,
    Say,
    Skipped,
    Written,
    duration,
    every_raw,
    options,
    raw_exists,
    run,
)
from services.reroute.errors import ConfigError

PLAN = DIR / "full.yaml"
SESSION_S = 15.0  # a fabric up and down
# seconds a repetition spends beyond its own stream (capture analysis, the reroute back,
# process starts), measured on the 2-core machine of experiments/README.md
OVERHEAD_S = {  # a repetition's wall_s beyond its own traffic, measured in quick runs here
    "ost-vs-mbb": 2.5,  # 2.0-2.2 s at load ~1.5, ~3.5 s at load 3 (the reroute back included)
    "rto-sweep": 2.5,
    "bandwidth-steering": 2.0,
    "lock-sweep": 2.5,
    "switching-delay": 1.5,
    "data-rate-sweep": 2.5,
    "mptcp": 0.5,
    "mptcp-bdp": 0.5,
    "impulse-response": 8.0,  # a fabric per train: 3.6 s median, ODL's up to 16 s
    "odl-poll-sweep": 10.0,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One experiment run of the plan."""

    experiment: str
    out: str
    backend: str | None = None
    set: Mapping[str, Any] = field(default_factory=dict)


def load_plan(path: Path | None = None) -> list[Entry]:
    """The entries of a plan file; ConfigError naming the file and entry at fault."""
    path = path or PLAN
    doc = read(path)
    entries = doc.get("entries")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected `entries:`, a list of experiment runs")
    plan = []
    for i, e in enumerate(entries, start=1):
        if not isinstance(e, dict) or set(e) - {"experiment", "out", "backend", "set"}:
            raise ConfigError(f"{path}: entry {i}: keys are experiment, out, backend, set")
        if e.get("experiment") not in catalog.EXPERIMENTS:
            known = ", ".join(catalog.EXPERIMENTS)
            raise ConfigError(f"{path}: entry {i}: no experiment {e.get('experiment')!r} ({known})")
        plan.append(
            Entry(
                experiment=e["experiment"],
                out=str(e.get("out") or e["experiment"]),
                backend=e.get("backend"),
                set=dict(e.get("set") or {}),
            )
        )
    return plan


def _sets(entry: Entry, quick: bool, extra: Sequence[str]) -> list[str]:
    """``--set`` items of an entry (JSON values, which YAML reads) and the plan's own."""
    own = [] if quick else [f"{k}={json.dumps(v)}" for k, v in entry.set.items()]
    return [*own, *extra]


def rep_seconds(name: str, params: Mapping[str, Any], cfg: Mapping[str, Any]) -> float:
    """A repetition's expected wall time: its traffic's length and the overhead measured."""
    over = OVERHEAD_S.get(name, 5.0)
    if "period_s" in params and "n" in params:
        return 3 + float(params["n"]) * float(params["period_s"]) + 1 + over
    if "stream_s" in params:
        return float(params["stream_s"]) + over
    if "tcp_s" in params:
        return float(params["tcp_s"]) + over
    if name == "switching-delay":
        return float(cfg.get("probe_s", 2)) + over
    return float(cfg.get("tcp_s", 7)) + over


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    entry: Entry
    reps: list[Rep]
    done: int
    estimate_s: float  # of the repetitions still to run
    seconds: tuple[float, ...] = ()  # each repetition's estimate, in the order of ``reps``
    backend: str = ""  # the entry's backend, or its experiment's default


def backend_of(entry: Entry) -> str:
    """The backend an entry runs on: its own, or its experiment's first (default)."""
    return entry.backend or catalog.get(entry.experiment).backends[0]


def select(plan: Sequence[Entry], only: Sequence[str]) -> list[Entry]:
    """The entries ``--only`` names: each word an experiment, an entry's ``out``, a backend
    (``dpctl``: every entry on it, an entry without one counting as its experiment's
    default), or ``NAME:BACKEND``; ConfigError for a word that names nothing."""
    words = {}
    for word in only:
        name, _, backend = word.partition(":")
        hit = [
            e
            for e in plan
            if (
                (name in (e.experiment, e.out) and backend in ("", backend_of(e)))
                or (not backend and name == backend_of(e))
            )
        ]
        if not hit:
            known = sorted({e.experiment for e in plan} | {backend_of(e) for e in plan})
            raise ConfigError(
                f"--only {word}: no entry of the plan is that experiment, out, backend or"
                f" NAME:BACKEND (known: {', '.join(known)})"
            )
        words[word] = hit
    return [e for e in plan if any(e in hit for hit in words.values())]


def _planned(
    plan: Sequence[Entry], out: Path, *, quick: bool, sets: Sequence[str], seed: int
) -> list[Planned]:
    found = []
    for e in plan:
        exp = catalog.get(e.experiment)
        opts = options(
            exp, backend=e.backend, quick=quick, seed=seed, config=None, sets=_sets(e, quick, sets)
        )
        reps = exp.plan(opts)
        cfg = opts.config.model_dump()
        seconds = tuple(rep_seconds(e.experiment, r.params, cfg) for r in reps)
        todo = [not raw_exists(out / e.out, r.key) for r in reps]
        estimate = sum(s for s, t in zip(seconds, todo, strict=True) if t)
        found.append(
            Planned(
                entry=e,
                reps=reps,
                done=todo.count(False),
                estimate_s=estimate + (SESSION_S if any(todo) else 0.0),
                seconds=seconds,
                backend=opts.backend,
            )
        )
    return found


def _check_commit(out: Path, allow_dirty: bool) -> str | None:
    head = git_head()
    if allow_dirty:
        return head
    if head is None or head.endswith("-dirty"):
        raise ConfigError(
            f"the tree is modified ({head}): results to publish come from one clean commit;"
            " commit first, or --allow-dirty for a run that will not be published"
        )
    made = {str(r.get("git")) for d in sorted(out.glob("*/")) for r in every_raw(d).values()}
    other = made - {head, "None"}
    if other:
        raise ConfigError(
            f"{out} holds runs of commit(s) {', '.join(sorted(other))}, the tree is at {head}:"
            " check that commit out to finish them, or use another --out"
        )
    return head


def run_all(
    plan: Sequence[Entry],
    out: Path,
    *,
    quick: bool,
    sets: Sequence[str],
    seed: int,
    dry_run: bool,
    allow_dirty: bool,
    progress: Callable[[int, int], AbstractContextManager[Progress]],
) -> int:
    """Run (or with ``dry_run`` only show) the plan into ``out``; the exit code."""
    planned = _planned(plan, out, quick=quick, sets=sets, seed=seed)
    total = sum(p.estimate_s for p in planned)
    _show(planned, total)
    if dry_run:
        return 0
    head = _check_commit(out, allow_dirty or quick)
    work = [(p, {r.key for r in p.reps}) for p in planned]
    return run_units(
        work, out, quick=quick, sets=sets, seed=seed, head=head, progress=progress, what="plan"
    )


def run_units(
    work: Sequence[tuple[Planned, set[str]]],
    out: Path,
    *,
    quick: bool,
    sets: Sequence[str],
    seed: int,
    head: str | None,
    progress: Callable[[int, int], AbstractContextManager[Progress]],
    what: str,
    log_extra: Mapping[str, Any] | None = None,
) -> int:
    """Run the repetitions ``keys`` of each planned entry (those without a raw file in
    ``out`` yet) into ``out/ENTRY``, each entry an ordinary ``experiment run`` of that
    subset; a line every ``BEAT_S`` while a repetition runs says how far it and ``what``
    (the plan, a part) are. The exit code (130: interrupted, the same command resumes)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log: list[dict[str, Any]] = []
    left_s = [
        sum(s for r, s in zip(p.reps, p.seconds, strict=True) if r.key in keys and
            not raw_exists(out / p.entry.out, r.key)) + SESSION_S
        for p, keys in work
    ]  # fmt: skip
    for i, (p, keys) in enumerate(work, start=1):
        e = p.entry
        exp = Subset(catalog.get(e.experiment), frozenset(keys))
        opts = options(
            exp, backend=e.backend, quick=quick, seed=seed, config=None, sets=_sets(e, quick, sets)
        )
        mine = [r for r in p.reps if r.key in keys]
        done = sum(raw_exists(out / e.out, r.key) for r in mine)
        print(
            f"== [{i}/{len(work)}] {e.experiment} ({opts.backend}) -> {out / e.out}:"
            f" {done}/{len(mine)} done, about {duration(sum(left_s[i - 1 :]))} left in the"
            f" {what}",
            flush=True,
        )
        argv = [
            "reroute",
            "experiment",
            "run",
            e.experiment,
            "--backend",
            opts.backend,
            *(["--quick"] if quick else []),
            *(a for s in _sets(e, quick, sets) for a in ("--set", s)),
            "--seed",
            str(seed),
            "--out",
            str(out / e.out),
        ]
        each = {
            r.key: s
            for r, s in zip(p.reps, p.seconds, strict=True)
            if r.key in keys and not raw_exists(out / e.out, r.key)
        }
        beat = beating(progress, each, what=what, left_s=sum(left_s[i:]), started=started)
        t0 = time.monotonic()
        try:
            outcome = run(exp, opts, out / e.out, beat, argv=argv)
        except Skipped as exc:
            print(f"   skipped: {exc}", flush=True)
            log.append({"entry": e.out, "experiment": e.experiment, "skipped": str(exc)})
            continue
        log.append(
            {
                "entry": e.out,
                "experiment": e.experiment,
                "backend": opts.backend,
                "ran": outcome.ran,
                "kept": outcome.kept,
                "planned": outcome.planned,
                "wall_s": round(time.monotonic() - t0, 1),
            }
        )
        if outcome.interrupted:
            print(
                f"interrupted after {duration(time.monotonic() - started)}: the same command"
                " runs the rest",
                flush=True,
            )
            _write_log(out, head, log, time.monotonic() - started, quick, log_extra)
            return 130
    wall = time.monotonic() - started
    _write_log(out, head, log, wall, quick, log_extra)
    estimated = sum(left_s)
    print(f"{what} done in {duration(wall)} (estimated {duration(estimated)}); reports under {out}")
    return 0


class Subset:
    """An experiment that plans only the repetitions ``keys`` of its plan (a part's share of
    an entry); everything else is the experiment's own."""

    def __init__(self, exp: Experiment, keys: frozenset[str]) -> None:
        self.exp, self.keys = exp, keys
        self.name, self.title, self.backends = exp.name, exp.title, exp.backends
        self.config_model = exp.config_model

    def plan(self, opts: Options) -> list[Rep]:
        return [r for r in self.exp.plan(opts) if r.key in self.keys]

    def session(self, opts: Options, say: Say, *, seed: int) -> AbstractContextManager[Any]:
        return self.exp.session(opts, say, seed=seed)

    def run(self, session: Any, rep: Rep, say: Say) -> dict[str, Any]:
        return self.exp.run(session, rep, say)

    def report(self, raws: Mapping[str, Raw], out: Path) -> Written:
        """The experiment's report of what is here; a part may hold a share of an entry its
        report was not written for, and the published report is rendered from every part's
        raw files, so a failure here is said in the report instead of stopping the part."""
        try:
            return self.exp.report(raws, out)
        except Exception as exc:  # any report bug: the raw files are what counts
            return Written(
                conclusions=f"No report of this share of the entry ({type(exc).__name__}:"
                f" {exc}); `reroute experiment report` renders it from all its raw files.",
                body="",
            )


BEAT_S = 60.0  # a progress line this often while a long repetition runs


class _Beat:
    """The runner's progress with a heartbeat: every ``BEAT_S`` a line saying how long the
    current repetition has run (of its estimate) and what is left of the part or plan."""

    def __init__(
        self, bar: Progress, each: Mapping[str, float], what: str, left_s: float, started: float
    ) -> None:
        self.bar, self.each, self.what = bar, each, what
        self.after_s, self.started = left_s, started
        self.todo = list(each)
        self.rep_started = time.monotonic()
        self.stop = threading.Event()

    def advance(self, key: str) -> None:
        self.bar.advance(key)
        if key in self.todo:
            self.todo.remove(key)
        self.rep_started = time.monotonic()

    def say(self, message: str) -> None:
        self.bar.say(message)

    def line(self) -> str:
        now = time.monotonic()
        current = self.todo[0] if self.todo else "-"
        expect = self.each.get(current, 0.0)
        left = max(expect - (now - self.rep_started), 0.0) + sum(
            self.each[k] for k in self.todo[1:]
        )
        return (
            f"{current}: {duration(now - self.rep_started)} of about {duration(expect)};"
            f" {duration(now - self.started)} into the {self.what}, about"
            f" {duration(left + self.after_s)} left in it"
        )

    def beat(self) -> None:
        while not self.stop.wait(BEAT_S):
            self.bar.say(self.line())


def beating(
    progress: Callable[[int, int], AbstractContextManager[Progress]],
    each: Mapping[str, float],
    *,
    what: str,
    left_s: float,
    started: float,
) -> Callable[[int, int], AbstractContextManager[Progress]]:
    """``progress`` with a heartbeat (:class:`_Beat`) over the repetitions ``each`` (their
    estimates; ``left_s`` is what comes after them)."""

    @contextmanager
    def make(total: int, done: int) -> Iterator[Progress]:
        with progress(total, done) as bar:
            beat = _Beat(bar, each, what, left_s, started)
            thread = threading.Thread(target=beat.beat, daemon=True)
            thread.start()
            try:
                yield beat
            finally:
                beat.stop.set()
                thread.join()

    return make


def _show(planned: Sequence[Planned], total: float) -> None:
    print("entry                        backend    repetitions  done  estimated")
    for p in planned:
        e = p.entry
        print(
            f"{e.out:28} {e.backend or '-':10} {len(p.reps):11} {p.done:5}"
            f"  {duration(p.estimate_s)}"
        )
    print(f"total estimated: {duration(total)} (from the repetitions' lengths and overheads)")


def _write_log(
    out: Path,
    head: str | None,
    log: list[Any],
    wall: float,
    quick: bool,
    extra: Mapping[str, Any] | None = None,
) -> None:
    path = out / "full.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    runs.append(
        {
            "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "git": head,
            "quick": quick,
            "wall_s": round(wall, 1),
            **(extra or {}),
            "entries": log,
        }
    )
    path.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
