"""Helper daemons of a fabric (device emulators, delay lines): start, wait ready, stop.

Each daemon runs in its own process group, with ``<rundir>/<name>.pid`` written as soon
as it is spawned (so ``down`` can always find it) and a ready file it writes itself once
it serves (its bound port). ``stop_all`` ends every daemon with a pid file in a run dir.

The daemon's side of that protocol is here too, one copy for every emulator's
``__main__``: ``daemon_options`` (``--ready-file``, ``--log-level``), ``listen_address``
(its ``--listen`` argument), ``run_daemon`` (logging, then its coroutine), ``listen_socket``,
``announce`` / ``write_ready`` (the ready file), ``stop_requested`` (SIGTERM / SIGINT as an
asyncio event) and ``exit_now`` (for daemons with threads that cannot be stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

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


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def daemon_options(p: argparse.ArgumentParser, ready: str) -> argparse.ArgumentParser:
    """Add the options every daemon takes: ``--ready-file`` (help text ``ready``) and
    ``--log-level``."""
    p.add_argument("--ready-file", type=Path, help=ready)
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    return p


def run_daemon(
    args: argparse.Namespace, serve: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]
) -> int:
    """Set up logging at ``args.log_level``, then run ``serve(args)`` to its exit code."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s: %(message)s")
    return asyncio.run(serve(args))


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (port 0: any free one)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def announce(ready_file: Path | None, text: str) -> None:
    """Tell the parent the daemon serves: ``text`` into its ready file, if it gave one."""
    if ready_file is not None:
        write_ready(ready_file, text)


def exit_now(code: int) -> NoReturn:
    """Flush logs and standard streams, then end the process at once (``os._exit``): for
    daemons with native threads that cannot be stopped (os-ken's listener)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


PEER_DAEMONS = (b"ryu-manager",)  # third-party peers run as fabric daemons (fabric.ryupeer)


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
