"""Helper daemons of a fabric (device emulators, delay lines): start, wait ready, stop.

Each daemon runs in its own process group, with ``<rundir>/<name>.pid`` written as soon
as it is spawned (so ``down`` can always find it) and a ready file it writes itself once
it serves (its bound port). ``stop_all`` ends every daemon with a pid file in a run dir.

The daemon's side of that protocol is here too: ``listen_address`` (its ``--listen``
argument), ``write_ready`` and ``stop_requested`` (SIGTERM / SIGINT as an asyncio event).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fabric.errors import FabricError
from fabric.ovs import _terminate, alive

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


def spawn(rundir: Path, name: str, module: str, args: list[str], timeout: float = 10.0) -> Spawned:
    """``start``, keeping the process (tests stop it themselves and check how it exits)."""
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
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-800:]
            _terminate(proc.pid)
            raise FabricError(f"{name} ({module}) did not start: {tail.strip() or 'no output'}")
        time.sleep(0.01)
    return Spawned(process=proc, ready=ready.read_text().strip(), log=log_path)


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


def listen_address(text: str) -> tuple[str, int]:
    """argparse type: ``127.0.0.1:5025`` -> ``("127.0.0.1", 5025)``; port 0 = any free one."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def write_ready(path: Path, text: str) -> None:
    """Write the ready file atomically: the parent never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def stop_requested() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (call inside the daemon's running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _is_ours(pid: int) -> bool:
    """The pid is still a Python daemon of ours (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.startswith(b"fabric.") for arg in cmdline) and os.path.basename(
        cmdline[0]
    ).startswith(b"python")
