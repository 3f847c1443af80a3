"""The real third-party peers the drivers are tested against, found and built once, cached
outside any checkout (so CI's clean checkout reuses them).

- ``dpctl()``: the OpenFlow 1.0 reference ``dpctl`` (seeds 000/001's "dpctl method"),
  built by the peers' ``build-dpctl.sh`` from their tarball: needs gcc, make and tar.
- ``ryu_manager()``: Ryu 4.34 with ``ryu.app.ofctl_rest`` in a virtual environment of its
  own, built by ``ryu-venv.sh`` with the peers' known-good freeze as pip constraints: needs
  a Python 3.9 (Ryu 4.34 runs on nothing newer) and the Python package registry.

The peers' sources (``../shared/peers`` of the project) are looked for in
``$REROUTE_PEERS``, then ``../shared/peers`` from the repository root, then
``/work/shared/peers``. Builds go to ``$REROUTE_CACHE``, else ``$XDG_CACHE_HOME/reroute``,
else ``~/.cache/reroute``, in a directory named by a hash of what the build is made from
(the tarball; the venv script, the freeze and the Python), so a new tarball is a new build.
A build runs under a file lock (two test runs never build one twice) into a temporary
place, made visible only once complete.

Each returns the tool's path, or raises ``PeerMissing`` (a prerequisite is absent: its
message names what and where it looked; tests skip with it) or ``PeerBuildError`` (the
prerequisites are there but the build failed: a real failure). ``python -m fabric.peers``
builds both and says where they are (``make setup`` runs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from fabric.errors import FabricError

log = logging.getLogger("reroute.fabric.peers")
ROOT = Path(__file__).resolve().parents[1]
FALLBACK = Path("/work/shared/peers")
TARBALL = "openflow-1.0-reference.tar.gz"
RYU_FREEZE = "ryu-4.34-py39-freeze.txt"
BUILD_TIMEOUT_S = 900.0


class PeerMissing(FabricError):
    """A peer cannot be had on this machine (its message says what is missing, and where
    it was looked for)."""


class PeerBuildError(FabricError):
    """A peer's prerequisites are there, but building it failed."""


# --------------------------------------------------------------------------------------
# where things are


def candidates() -> list[tuple[str, Path]]:
    """Where the peers' sources may be, in order, each with how it was found."""
    found = []
    if env := os.environ.get("REROUTE_PEERS"):
        found.append(("$REROUTE_PEERS", Path(env)))
    found.append(("../shared/peers from the repository root", ROOT.parent / "shared" / "peers"))
    found.append(("the default", FALLBACK))
    return found


def source_dir() -> Path:
    """The directory of the peers' sources (PeerMissing naming every place looked at)."""
    for _, path in candidates():
        if (path / "build-dpctl.sh").is_file():
            return path
    looked = "; ".join(f"{how}: {path}" for how, path in candidates())
    raise PeerMissing(f"no third-party peers directory (looked at {looked})")


def cache_dir() -> Path:
    """Where built peers are kept (not in the checkout)."""
    if env := os.environ.get("REROUTE_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reroute"


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------
# the reference dpctl


def dpctl() -> Path:
    """The reference ``dpctl``, built on first use (PeerMissing / PeerBuildError)."""
    src = source_dir()
    tarball = src / TARBALL
    if not tarball.is_file():
        raise PeerMissing(f"no {TARBALL} in {src}")
    key = _digest(tarball.read_bytes(), (src / "build-dpctl.sh").read_bytes())
    out = cache_dir() / f"dpctl-{key}"
    tool = out / "dpctl"
    if tool.is_file():
        return tool
    _require_programs(("gcc", "make", "tar"), "to build the reference dpctl")
    with _locked(out), _staging(out) as tmp:
        if not tool.is_file():  # built by another process while we waited
            _build(["bash", str(src / "build-dpctl.sh"), str(tmp)], "the reference dpctl")
    return tool


# --------------------------------------------------------------------------------------
# Ryu 4.34


def python39() -> Path:
    """A Python 3.9 for Ryu's venv: ``$PY39``, pyenv's 3.9.x, or ``python3.9`` on PATH."""
    places = [os.environ.get("PY39", "")]
    places += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.9.*/bin/python3.9")))
    places += sorted(glob.glob("/root/.pyenv/versions/3.9.*/bin/python3.9"))
    places.append(shutil.which("python3.9") or "")
    for place in places:
        if place and os.access(place, os.X_OK):
            return Path(place)
    raise PeerMissing(
        "no Python 3.9 for Ryu 4.34 (looked at $PY39, ~/.pyenv/versions/3.9.*, "
        "/root/.pyenv/versions/3.9.*, python3.9 on PATH; Debian bookworm has none: "
        "install one with pyenv, or set PY39)"
    )


def ryu_manager() -> Path:
    """``ryu-manager`` of the Ryu 4.34 venv, built on first use (PeerMissing /
    PeerBuildError)."""
    src = source_dir()
    script, freeze = src / "ryu-venv.sh", src / RYU_FREEZE
    for needed in (script, freeze):
        if not needed.is_file():
            raise PeerMissing(f"no {needed.name} in {src}")
    py = python39()
    key = _digest(script.read_bytes(), freeze.read_bytes(), str(py.resolve()).encode())
    venv = cache_dir() / f"ryu-4.34-{key}"
    tool, done = venv / "bin" / "ryu-manager", venv / ".complete"
    if done.is_file():
        return tool
    with _locked(venv):
        if not done.is_file():
            shutil.rmtree(venv, ignore_errors=True)  # a build cut short: start again
            env = {"PY39": str(py), "PIP_CONSTRAINT": str(freeze)}
            _build(["bash", str(script), str(venv)], "Ryu 4.34's venv", env)
            done.touch()
    return tool


# --------------------------------------------------------------------------------------
# building


def _require_programs(programs: Sequence[str], why: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        raise PeerMissing(f"{' and '.join(missing)} not on PATH ({why})")


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _staging(final: Path) -> Iterator[Path]:
    """A temporary directory beside ``final``, renamed to it when the block succeeds."""
    tmp = final.with_name(f".{final.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if not final.exists() and any(tmp.iterdir()):
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    log.warning("building %s (once; cached in %s)", what, cache_dir())
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerBuildError(f"building {what} took over {BUILD_TIMEOUT_S:.0f} s") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise PeerBuildError(f"building {what} failed ({proc.returncode}): {tail}")


# --------------------------------------------------------------------------------------
# python -m fabric.peers


def main() -> int:
    """Build every peer (cached); print where each is, or why it cannot be had. Exit 1
    only when a build failed (a missing prerequisite is reported, not fatal)."""
    logging.basicConfig(level=logging.INFO, format="peers: %(message)s")
    status = 0
    for name, find in (("dpctl (OpenFlow 1.0 reference)", dpctl), ("Ryu 4.34", ryu_manager)):
        try:
            print(f"peers: {name}: {find()}")
        except PeerMissing as exc:
            print(f"peers: {name}: not available: {exc}")
        except PeerBuildError as exc:
            print(f"peers: {name}: BUILD FAILED: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
