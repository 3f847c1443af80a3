"""The full run in parts (``reroute experiment full --part K/N``), all from one pinned commit.

``experiments/full-plan.yaml`` names the commit every part runs from, the most a part may
take by the dry run's estimates (``max_part_s``) and how many parts that makes. The plan
(``configs/full.yaml``) is cut into parts in its own order, by the repetitions' estimates
(:func:`partition`): a part closes when the next repetition would take it past
``max_part_s``, so an entry may continue in the next part (its repetitions keep their keys:
the union is the entry's run). Nothing depends on what is already done, so every session
computes the same parts from the same commit.

A part runs in a clean worktree of the pinned commit, writes into a directory outside it
(``--out``, default ``/var/tmp/reroute-full/<commit>/part-K-of-N``) and skips the
repetitions already committed under ``experiments/results-full/`` of the main checkout
(``--main``). ``--collect DIR`` then copies a finished part into that checkout (raw files,
the audit sample's pcaps, env.json and full.json merged), after checking every file came
from the pinned commit, and says how to commit it. Everything is checked before anything is
written: a wrong commit, a modified tree, an unpinned plan or an incomplete part is refused
with what is wrong and what to do.

A **re-run** is another such run of some entries, from a later commit, with its own pin file
(``experiments/full-plan-NAME.yaml``: ``plan:`` names its plan, ``results:`` its directory):
``--pin-file`` selects it for ``--pin``, ``--part``, ``--collect`` and ``--dry-run``. Each
run stays one commit; :func:`published` takes an entry from the latest re-run that has all of
its repetitions committed, from ``results-full`` otherwise.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments import audit, full
from experiments.config import read
from experiments.runner import Progress, duration, raw_exists, read_env, read_raw, write_json
from fabric import state as fabric_state
from services.reroute.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PLAN_FILE = Path("experiments/full-plan.yaml")  # in the main checkout
RESULTS = Path("experiments/results-full")  # in the main checkout
RERUNS = "experiments/full-plan-*.yaml"  # re-runs' pin files, in the main checkout
DEFAULT_PLAN = "configs/full.yaml"  # a pin's plan: relative to experiments/ of the tree
PLACEHOLDER = "PLACEHOLDER"
STAGING = Path("/var/tmp/reroute-full")
PART_FILE = "part.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """What ``full-plan.yaml`` says: the commit (None until pinned), the parts it makes."""

    path: Path
    commit: str | None
    parts: int | None
    max_part_s: float
    seed: int
    plan: str = DEFAULT_PLAN  # the run's plan, relative to experiments/ of the tree
    results: Path = RESULTS  # where its parts are committed, relative to the main checkout

    def plan_file(self, root: Path = ROOT) -> Path:
        return root / "experiments" / self.plan


def _relative(path: Path, key: str, value: object) -> str:
    """``value`` as a relative path with no ``..`` (ConfigError naming the file otherwise)."""
    text = str(value)
    if not text or Path(text).is_absolute() or ".." in Path(text).parts:
        raise ConfigError(f"{path}: {key}: {text!r} must be a relative path inside the checkout")
    return text


def load_pin(path: Path) -> Pin:
    if not path.is_file():
        raise ConfigError(f"{path}: no such pin file")
    doc = read(path)
    unknown = set(doc) - {"commit", "parts", "max_part_s", "seed", "plan", "results"}
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    commit = str(doc.get("commit") or PLACEHOLDER)
    if commit != PLACEHOLDER and not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ConfigError(f"{path}: commit: {commit!r} is not a full 40-hex commit id")
    results = _relative(path, "results", doc.get("results", RESULTS))
    if not re.fullmatch(rf"{re.escape(str(RESULTS))}(-[a-z0-9][a-z0-9-]*)?", results):
        raise ConfigError(f"{path}: results: {results!r} is not {RESULTS} or {RESULTS}-NAME")
    parts = doc.get("parts")
    return Pin(
        path=path,
        commit=None if commit == PLACEHOLDER else commit,
        parts=int(parts) if parts else None,
        max_part_s=float(doc.get("max_part_s", 6000)),
        seed=int(doc.get("seed", 0)),
        plan=_relative(path, "plan", doc.get("plan", DEFAULT_PLAN)),
        results=Path(results),
    )


def load_run(path: Path, root: Path = ROOT) -> tuple[Pin, list[full.Entry]]:
    """A run's pin and its plan (read from the tree at ``root``)."""
    pin = load_pin(path)
    return pin, full.load_plan(pin.plan_file(root))


def pinned(pin: Pin) -> str:
    """The pinned commit; ConfigError saying how to pin when it is the placeholder."""
    if pin.commit is None:
        raise ConfigError(
            f"{pin.path}: commit is still the {PLACEHOLDER}: once section 1 has landed, run"
            " `reroute experiment full --pin` in a clean checkout of main at that commit and"
            " commit the file"
        )
    return pin.commit


def write_pin(pin: Pin, commit: str, parts: int) -> None:
    """Set ``commit:`` and ``parts:`` in the plan file, its comments kept (atomically)."""
    text = pin.path.read_text()
    for key, value in (("commit", commit), ("parts", str(parts))):
        pattern = re.compile(rf"^{key}:[ \t]*[^#\n]*?(?P<note>[ \t]*#.*)?$", re.MULTILINE)
        found = list(pattern.finditer(text))
        if len(found) != 1:
            raise ConfigError(f"{pin.path}: expected one `{key}:` line, found {len(found)}")
        m = found[0]
        text = f"{text[: m.start()]}{key}: {value}{m['note'] or ''}{text[m.end() :]}"
    tmp = pin.path.with_name(f".{pin.path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, pin.path)


def git_state(root: Path) -> tuple[str | None, list[str]]:
    """(HEAD's full id, the tracked files modified) of the checkout at ``root``."""
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    status = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return head or None, [line[3:] for line in status.splitlines() if line.strip()]


def same_commit(described: object, sha: str) -> bool:
    """Whether a raw file's ``git`` (``git describe --always --dirty``) is commit ``sha``,
    clean."""
    text = str(described or "")
    if not text or text.endswith("-dirty"):
        return False
    short = text.rsplit("-g", 1)[-1] if re.search(r"-\d+-g[0-9a-f]+$", text) else text
    return bool(re.fullmatch(r"[0-9a-f]{4,40}", short)) and sha.startswith(short)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    """A part's share of a plan entry: the repetitions ``keys`` (in the plan's order)."""

    index: int  # the entry's position in the plan (0-based)
    planned: full.Planned
    keys: tuple[str, ...]
    estimate_s: float  # its repetitions and a session

    @property
    def out(self) -> str:
        return self.planned.entry.out


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    number: int
    units: tuple[Unit, ...]

    @property
    def estimate_s(self) -> float:
        return sum(u.estimate_s for u in self.units)


def partition(planned: Sequence[full.Planned], max_s: float) -> list[Part]:
    """The plan cut into parts of at most ``max_s`` by the estimates (a session per entry
    in a part, ``full.SESSION_S``, counted), in the plan's order; ConfigError if one
    repetition alone is longer."""
    parts: list[list[Unit]] = [[]]
    used = 0.0
    for index, p in enumerate(planned):
        keys: list[str] = []
        spent = 0.0
        for rep, seconds in zip(p.reps, p.seconds, strict=True):
            if seconds + full.SESSION_S > max_s:
                raise ConfigError(
                    f"{p.entry.out} ({p.backend}): repetition {rep.key} alone is estimated"
                    f" {duration(seconds)}, more than a part ({duration(max_s)}): shorten it"
                    " (impulse trains: max_n)"
                )
            cost = seconds + (0.0 if keys else full.SESSION_S)
            if used + cost > max_s:
                if keys:
                    parts[-1].append(_unit(index, p, keys, spent))
                parts.append([])
                keys, spent, used, cost = [], 0.0, 0.0, seconds + full.SESSION_S
            keys.append(rep.key)
            spent += seconds
            used += cost
        if keys:
            parts[-1].append(_unit(index, p, keys, spent))
    return [Part(number=i, units=tuple(us)) for i, us in enumerate(parts, start=1) if us]


def _unit(index: int, p: full.Planned, keys: list[str], spent: float) -> Unit:
    return Unit(index=index, planned=p, keys=tuple(keys), estimate_s=spent + full.SESSION_S)


def committed(results: Path, unit: Unit) -> list[str]:
    """The unit's repetitions that have a raw file under ``results`` (committed)."""
    return [k for k in unit.keys if raw_exists(results / unit.out, k)]


def parse_part(text: str) -> tuple[int, int] | None:
    """``K/N`` as (K, N); ``next`` as None (the first part not committed)."""
    if text == "next":
        return None
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ConfigError(f"--part {text}: expected K/N with 1 <= K <= N (e.g. 2/6), or next")
    return int(m[1]), int(m[2])


def plan_parts(plan: Sequence[full.Entry], pin: Pin, *, sets: Sequence[str] = ()) -> list[Part]:
    """The parts of the whole plan at the seeds' scale (never quick: what is published)."""
    planned = full._planned(plan, Path("/nonexistent"), quick=False, sets=sets, seed=pin.seed)
    return partition(planned, pin.max_part_s)


def show(
    parts: Sequence[Part],
    results: Path,
    only: Sequence[full.Entry] | None = None,
    *,
    of: int | None = None,
) -> None:
    """Each part's estimate, contents and what of it is committed under ``results`` (``of``:
    how many parts the plan makes, when ``parts`` is one of them)."""
    if of is None:
        total = sum(p.estimate_s for p in parts)
        print(
            f"{len(parts)} parts of at most {duration(max(p.estimate_s for p in parts))} each"
            f" (total {duration(total)} by the estimates); committed: under {results}"
        )
    for part in parts:
        units = [u for u in part.units if only is None or u.planned.entry in only]
        if not units:
            continue
        done = sum(len(committed(results, u)) for u in units)
        size = sum(len(u.keys) for u in units)
        state = "committed" if done == size else f"{done}/{size} repetitions committed"
        print(f"part {part.number}/{of or len(parts)}: about {duration(part.estimate_s)}, {state}")
        for u in units:
            p = u.planned
            first, last = u.keys[0], u.keys[-1]
            span = first if first == last else f"{first} .. {last}"
            print(
                f"  {p.entry.experiment} ({p.backend}) -> {u.out}: {len(u.keys)} of"
                f" {len(p.reps)} repetitions ({span}), {duration(u.estimate_s)}"
            )


def drifted(pin: Pin, parts: Sequence[Part]) -> str | None:
    """Why this code's parts are not the pinned plan's (None: they may be)."""
    if pin.parts is None or pin.parts == len(parts):
        return None
    return (
        f"{pin.path} says the plan makes {pin.parts} parts, this code makes {len(parts)}: the"
        " plan or the estimates changed since the pin; the parts run from the pinned commit"
    )


def choose(
    parts: Sequence[Part],
    wanted: tuple[int, int] | None,
    results: Path,
    only: Sequence[full.Entry] | None = None,
) -> Part:
    """Part K of N (N must be the plan's count), or the first one with something of
    ``only`` (default: anything) not committed."""
    if wanted is None:
        for part in parts:
            if any(
                len(committed(results, u)) < len(u.keys)
                for u in part.units
                if only is None or u.planned.entry in only
            ):
                return part
        raise ConfigError(f"every part of the plan is committed under {results}: nothing to run")
    k, n = wanted
    if n != len(parts):
        raise ConfigError(
            f"--part {k}/{n}: the plan makes {len(parts)} parts, not {n}"
            f" (`reroute experiment full --dry-run` lists them)"
        )
    return parts[k - 1]


def check_tree(commit: str, root: Path = ROOT) -> None:
    """ConfigError unless the checkout at ``root`` is ``commit``, unmodified."""
    head, modified = git_state(root)
    if head != commit:
        raise ConfigError(
            f"this tree ({root}) is at {head}, the plan pins {commit}: run the part in a clean"
            f" worktree of the pinned commit (git -C MAIN worktree add --detach DIR {commit[:12]})"
        )
    if modified:
        listed = ", ".join(modified[:5]) + (" ..." if len(modified) > 5 else "")
        raise ConfigError(
            f"this tree ({root}) is at the pinned commit but modified ({listed}): a part runs"
            " from a clean worktree of the pinned commit"
        )


BUSY_LOAD = 1.0  # 1-minute load average above which a part says the machine is not idle


def fabrics_up() -> list[str]:
    """The fabrics up on this machine (their state directories)."""
    return fabric_state.running()


def check_idle() -> None:
    """ConfigError if a fabric is up (another run or test is using the machine); a warning
    when the load says something else is running."""
    up = fabrics_up()
    if up:
        raise ConfigError(
            f"fabric(s) {', '.join(up)} are up: a part runs on an otherwise idle machine"
            " (wait for them to finish; `reroute fabric down NAME` only if they are yours)"
        )
    load = os.getloadavg()[0]
    if load > BUSY_LOAD:
        print(
            f"warning: load average {load:.1f}: something else is running; a part's numbers"
            " are meant from an idle machine (the reports give the load of each repetition)",
            flush=True,
        )


def check_imports(root: Path = ROOT) -> None:
    """ConfigError unless this process runs the code of the tree at ``root`` (not, through
    the venv's editable install, another checkout's); the processes it starts get ``root``
    first on their PYTHONPATH too."""
    for name in ("services", "drivers", "fabric", "experiments"):
        where = Path(str(importlib.import_module(name).__file__)).resolve()
        if not where.is_relative_to(root.resolve()):
            raise ConfigError(
                f"this process imports {name} from {where.parent}, not from {root}: run it"
                f" with PYTHONPATH={root} (experiments/README.md, the full run in parts)"
            )
    rest = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), *([rest] if rest else [])])


def _check_results(units: Sequence[Unit], results: Path, commit: str) -> None:
    for u in units:
        for key in committed(results, u):
            raw = read_raw(_raw_file(results / u.out, key))
            if not same_commit(raw.get("git"), commit):
                raise ConfigError(
                    f"{results / u.out}: {key} was made by commit {raw.get('git')}, not the"
                    f" pinned {commit[:12]}: results of one full run come from one commit"
                )


def _raw_file(out: Path, key: str) -> Path:
    return next(p for s in (".json.gz", ".json") if (p := out / "raw" / f"{key}{s}").exists())


def run_part(
    plan: Sequence[full.Entry],
    *,
    part_arg: str,
    main: Path,
    out: Path | None,
    only: Sequence[full.Entry] | None,
    dry_run: bool,
    allow_dirty: bool,
    progress: Callable[[int, int], AbstractContextManager[Progress]],
    pin_file: Path = PLAN_FILE,
) -> int:
    """``reroute experiment full --part K/N``: show (``dry_run``) or run one part of the run
    ``pin_file`` (in ``main``) pins."""
    pin = load_pin(main / pin_file)
    results = main / pin.results
    parts = plan_parts(plan, pin)
    drift = drifted(pin, parts)
    if drift and not dry_run:
        raise ConfigError(drift)
    if drift:
        print(f"warning: {drift}")
    part = choose(parts, parse_part(part_arg), results, only)
    label = f"part {part.number}/{len(parts)}"
    units = [u for u in part.units if only is None or u.planned.entry in only]
    if not units:
        raise ConfigError(f"{label} has nothing that --only selects")
    if dry_run:
        show([part], results, only, of=len(parts))
        source = pin.commit or f"{pin.path} (not pinned yet)"
        print(f"committed: under {results}; the part runs from {source}")
        return 0
    commit = pinned(pin)
    if not allow_dirty:
        check_tree(commit)
        check_imports()
    check_idle()
    _check_results(units, results, commit)
    out = out or STAGING / commit[:12] / f"part-{part.number}-of-{len(parts)}"
    if not allow_dirty and out.resolve().is_relative_to(ROOT):
        raise ConfigError(f"--out {out} is inside the tree ({ROOT}): a part writes outside it")
    if not allow_dirty and (out / PART_FILE).exists():
        mine = json.loads((out / PART_FILE).read_text())
        if mine.get("commit") != commit or mine.get("part") != f"{part.number}/{len(parts)}":
            raise ConfigError(
                f"{out} holds part {mine.get('part')} of commit {mine.get('commit')}: use"
                " another --out"
            )
    head = full._check_commit(out, allow_dirty)
    work = []
    for u in units:
        left = set(u.keys) - set(committed(results, u))
        if left:
            work.append((u.planned, left))
    skipped = sum(len(u.keys) for u in units) - sum(len(k) for _, k in work)
    print(
        f"{label} (about {duration(part.estimate_s)}) from {commit[:12]} into {out};"
        f" {skipped} repetitions already committed under {results} are skipped"
    )
    if not work:
        print(f"{label}: everything is committed, nothing to run")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "part": f"{part.number}/{len(parts)}",
        "run": str(pin_file),
        "commit": commit,
        "git": head,
        "max_part_s": pin.max_part_s,
        "estimate_s": round(part.estimate_s),
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "units": [
            {
                "out": u.out,
                "experiment": u.planned.entry.experiment,
                "backend": u.planned.backend,
                "keys": list(u.keys),
            }
            for u in units
        ],
    }
    write_json(out / PART_FILE, doc)
    code = full.run_units(
        work,
        out,
        quick=False,
        sets=[],
        seed=pin.seed,
        head=head,
        progress=progress,
        what=label,
        log_extra={"part": doc["part"], "commit": commit},
    )
    if code == 0:
        which = "" if pin_file == PLAN_FILE else f" --pin-file {pin_file}"
        print(
            f"next: in the main checkout, `reroute experiment full{which} --collect {out}`,"
            " then commit what it copied (experiments/README.md, the full run in parts)"
        )
    return code


def pin_here(plan: Sequence[full.Entry], root: Path = ROOT, pin_file: Path = PLAN_FILE) -> int:
    """``reroute experiment full --pin``: pin this clean checkout's HEAD in ``pin_file``."""
    head, modified = git_state(root)
    if head is None:
        raise ConfigError(f"{root}: not a git checkout")
    if modified:
        raise ConfigError(
            f"{root} is modified ({', '.join(modified[:5])}): pin a clean commit (the parts run"
            " from it)"
        )
    pin = load_pin(root / pin_file)
    parts = plan_parts(plan, pin)
    write_pin(pin, head, len(parts))
    print(
        f"{pin.path}: commit {head}, {len(parts)} parts of at most {duration(pin.max_part_s)}."
        f" Commit it: git add {pin_file} && git commit -m 'Pin the run of {pin_file.name} to"
        f" {head[:12]}'"
    )
    return 0


def collect(staging: Path, main: Path, pin_file: Path = PLAN_FILE) -> int:
    """``reroute experiment full --collect DIR``: copy a finished part of the run
    ``pin_file`` pins into ``main``'s results, after checking all of it; prints how to
    commit it."""
    pin = load_pin(main / pin_file)
    commit = pinned(pin)
    results = main / pin.results
    if not (staging / PART_FILE).exists():
        raise ConfigError(f"{staging}: no {PART_FILE} (not the output of `full --part`)")
    doc = json.loads((staging / PART_FILE).read_text())
    run = str(doc.get("run", PLAN_FILE))  # parts made before re-runs: the full run's
    if run != str(pin_file):
        raise ConfigError(
            f"{staging} is a part of the run {run} pins, not of {pin_file}: collect it with"
            f" --pin-file {run}"
        )
    if doc.get("commit") != commit:
        raise ConfigError(
            f"{staging} is part {doc.get('part')} of commit {doc.get('commit')}, the plan pins"
            f" {commit}: it cannot be committed with this run"
        )
    pending = subprocess.run(
        ["git", "-C", str(main), "status", "--porcelain", "--", str(pin.results)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if pending:
        raise ConfigError(
            f"{results} has uncommitted changes (git -C {main} status {pin.results}): commit the"
            " previous part, or discard them, before collecting another"
        )
    copies, problems = _copies(staging, results, doc, commit, pin.results)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ConfigError(
            f"{staging}: part {doc.get('part')} cannot be collected, nothing was copied: "
            + "; ".join(problems[:5])
            + more
        )
    for src, dst in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    outs = sorted({u["out"] for u in doc["units"]})
    for name in outs:
        _merge_env(staging / name, results / name)
    _merge_log(staging, results)
    print(
        f"part {doc['part']} collected into {results}: {len(copies)} files; commit it before"
        f" the next part:\n  git -C {main} add {pin.results} && git -C {main} commit -m"
        f" 'Full run ({pin_file.name}): part {doc['part']} from {commit[:12]}'"
    )
    return 0


def _copies(
    staging: Path, results: Path, doc: Mapping[str, Any], commit: str, named: Path
) -> tuple[list[tuple[Path, Path]], list[str]]:
    copies: list[tuple[Path, Path]] = []
    problems: list[str] = []
    for u in doc["units"]:
        src_dir, dst_dir = staging / u["out"], results / u["out"]
        for s in read_env(src_dir):
            if s.get("options", {}).get("quick"):
                problems.append(f"{u['out']}: a --quick session ran there (not publishable)")
                break
            if not same_commit(s.get("git"), commit):
                problems.append(f"{u['out']}: a session of commit {s.get('git')} ran there")
                break
        older = {
            str(s.get("git")) for s in read_env(dst_dir) if not same_commit(s.get("git"), commit)
        }
        if older:
            problems.append(
                f"{dst_dir} holds another run (sessions of {', '.join(sorted(older))}): move"
                f" it out of {named} first, one run's results are not mixed with another's"
            )
        audited = audit.committed(u["keys"])
        for key in u["keys"]:
            there = raw_exists(dst_dir, key)
            if not raw_exists(src_dir, key):
                if not there:
                    problems.append(f"{u['out']}/{key} was not run (run the part again)")
                continue
            src = _raw_file(src_dir, key)
            raw = read_raw(src)
            if not same_commit(raw.get("git"), commit):
                problems.append(f"{u['out']}/{key} was made by {raw.get('git')}")
                continue
            dst = dst_dir / "raw" / src.name
            if dst.exists():
                if dst.read_bytes() != src.read_bytes():
                    problems.append(f"{dst} is committed with other content")
                continue
            copies.append((src, dst))
            for pcap in sorted((src_dir / "pcaps").glob(f"{key}-*")) if key in audited else ():
                if not (dst_dir / "pcaps" / pcap.name).exists():
                    copies.append((pcap, dst_dir / "pcaps" / pcap.name))
    return copies, problems


def _merge_env(src: Path, dst: Path) -> None:
    mine, theirs = read_env(dst), read_env(src)
    new = [s for s in theirs if s not in mine]
    if new:
        write_json(dst / "env.json", {"sessions": [*mine, *new]})


def _merge_log(src: Path, dst: Path) -> None:
    def runs(path: Path) -> list[Any]:
        return list(json.loads(path.read_text()).get("runs", [])) if path.exists() else []

    mine, theirs = runs(dst / "full.json"), runs(src / "full.json")
    new = [r for r in theirs if r not in mine]
    if new:
        write_json(dst / "full.json", {"runs": [*mine, *new]})


def published(main: Path = ROOT) -> tuple[list[Path], list[str]]:
    """Each directory of the full run, in its plan's order: ``results-full``'s, or a
    re-run's (``experiments/full-plan-*.yaml``) where the re-run has every repetition of that
    entry committed; and a line for each entry taken from a re-run. ConfigError if a re-run
    names an entry the full plan lacks, or two re-runs name the same entry."""
    pin, plan = load_run(main / PLAN_FILE)  # the plans: this tree's
    outs = list(dict.fromkeys(e.out for e in plan))
    chosen = {out: main / pin.results / out for out in outs}
    claimed: dict[str, Path] = {}
    said = []
    for path in sorted(main.glob(RERUNS)):
        again, replan = load_run(path)
        cut = plan_parts(replan, again)
        for out in dict.fromkeys(e.out for e in replan):
            if out not in chosen:
                raise ConfigError(f"{path}: {out} is no entry of the full plan ({PLAN_FILE})")
            if out in claimed:
                raise ConfigError(f"{out} is re-run by both {claimed[out]} and {path}: one only")
            claimed[out] = path
            units = [u for part in cut for u in part.units if u.out == out]
            results = main / again.results
            done = sum(len(committed(results, u)) for u in units)
            size = sum(len(u.keys) for u in units)
            if done == size:
                chosen[out] = results / out
                said.append(f"{out}: the re-run of {path.name} ({size} repetitions)")
            else:
                said.append(
                    f"{out}: {PLAN_FILE.name}'s run ({path.name} has {done} of {size} committed)"
                )
    return [chosen[o] for o in outs], said
