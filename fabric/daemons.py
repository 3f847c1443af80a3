"""Helper daemons of a fabric (device emulators, delay lines): start, wait ready, stop.

Each daemon runs in its own process group, with ``<rundir>/<name>.pid`` written as soon
as it is spawned (so ``down`` can always find it) and a ready file it writes itself once
it serves (its bound port). ``stop_all`` ends every daemon with a pid file in a run dir.
The daemon's side of that protocol is ``emulators.daemon``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fabric.errors import FabricError
from fabric.vswitch import _terminate, alive

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawned:
    process: subprocess.Popen[bytes]
    ready: str  # what the daemon wrote to its ready file
    log: Path


def start(rundir: Path, name: str, module: str, args: list[str], timeout: float = 10.0) -> str:
    """Run ``python -m module args --ready-file F``; return what it wrote to F (its port,
    or a JSON of ports)."""
    return spawn(rundir, name, module, args, timeout).ready


def start_all(
    rundir: Path, daemons: Sequence[tuple[str, str, list[str]]], timeout: float = 10.0
) -> list[str]:
    """``start`` for several daemons (name, module, args) at once: every one launched, then
    each waited for (their start-ups overlap, each within ``timeout`` of its launch); what
    each wrote to its ready file, in order. A daemon that does not start is stopped and
    raised; the others keep their pid files (``stop_all`` ends them)."""
    launched = [_launch(rundir, name, module, args) for name, module, args in daemons]
    return [_ready(one, timeout).ready for one in launched]


def spawn(rundir: Path, name: str, module: str, args: list[str], timeout: float = 10.0) -> Spawned:
    """``start``, keeping the process (tests stop it themselves and check how it exits)."""
    return _ready(_launch(rundir, name, module, args), timeout)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Launched:
    name: str
    module: str
    process: subprocess.Popen[bytes]
    ready: Path
    log: Path
    at: float  # time.monotonic() of the launch


def _launch(rundir: Path, name: str, module: str, args: list[str]) -> _Launched:
    rundir.mkdir(parents=True, exist_ok=True)
    ready, log_path = rundir / f"{name}.ready", rundir / f"{name}.log"
    ready.unlink(missing_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--ready-file", str(ready)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    (rundir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return _Launched(
        name=name, module=module, process=proc, ready=ready, log=log_path, at=time.monotonic()
    )


def _ready(one: _Launched, timeout: float) -> Spawned:
    """Until ``one`` has written its ready file (FabricError, the daemon stopped, if it
    exits first or takes longer than ``timeout`` from its launch)."""
    deadline = one.at + timeout
    while not one.ready.exists():
        if one.process.poll() is not None or time.monotonic() > deadline:
            tail = one.log.read_text(errors="replace")[-800:]
            _terminate(one.process.pid)
            said = tail.strip() or "no output"
            raise FabricError(f"{one.name} ({one.module}) did not start: {said}")
        time.sleep(0.01)
    return Spawned(process=one.process, ready=one.ready.read_text().strip(), log=one.log)


def sigterm(process: subprocess.Popen[bytes], wait_s: float = 10.0) -> int:
    """A ``spawn``ed daemon asked to stop (SIGTERM, if it still runs); its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return process.wait(wait_s)


def stop_all(rundir: Path) -> list[str]:
    """Stop every daemon with a pid file in ``rundir``; returns their names."""
    stopped = []
    for pidfile in sorted(rundir.glob("*.pid")) if rundir.is_dir() else []:
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if alive(pid) and _is_ours(pid):
            _terminate(pid)
            stopped.append(pidfile.stem)
        pidfile.unlink(missing_ok=True)
    return stopped


# third-party peers run as fabric daemons (fabric.kinds.ryu_rest.peer)
PEER_DAEMONS = (b"ryu-manager",)


def _is_ours(pid: int) -> bool:
    """The pid is still a Python daemon of ours, or a peer's (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if any(os.path.basename(arg) in PEER_DAEMONS for arg in cmdline):
        return True
    return any(arg.startswith((b"fabric.", b"emulators.")) for arg in cmdline) and os.path.basename(
        cmdline[0]
    ).startswith(b"python")
