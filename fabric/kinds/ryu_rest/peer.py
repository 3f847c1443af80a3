"""Real Ryu 4.34 (``ryu-manager ryu.app.ofctl_rest``, from ``fabric.peers``) as a daemon of
a fabric or a test: the third-party controller the ``ryu_rest`` driver is tested against.

Both its listeners take any free port: ``--wsapi-port 0`` (its WSGI server logs the port
it bound: ``wsgi starting up on http://HOST:PORT``) and ``--ofp-tcp-listen-port 0``. With
both OpenFlow ports 0, Ryu's ``OpenFlowController`` falls back to 6653 *and* 6633
(``ryu/controller/controller.py``), so the SSL port is given as 1: without a key and
certificate Ryu opens no SSL listener, only the TCP one, on port 0. The OpenFlow port is
then read from the process's own listening sockets (``/proc/PID/fd`` and
``/proc/PID/net/tcp``).

Its pid file is ``<rundir>/<name>.pid`` like every fabric daemon's (written by us at once,
and by Ryu's ``--pid-file``, which also puts the run directory in its command line), so
``fabric down`` (``daemons.stop_all``) stops it; SIGTERM ends it (Ryu installs no handler).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from fabric import peers
from fabric.daemons import ROOT
from fabric.errors import FabricError
from fabric.vswitch import _terminate

APP = "ryu.app.ofctl_rest"
NAME = "Ryu 4.34 (ryu-manager ryu.app.ofctl_rest)"
_WSGI = re.compile(r"wsgi starting up on https?://[^:/\s]+:(\d+)")
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


@dataclass(frozen=True, slots=True, kw_only=True)
class RealRyu:
    process: subprocess.Popen[bytes]
    base_url: str  # ofctl_rest
    openflow_port: int
    log: Path

    def stop(self) -> int:
        """SIGTERM (SIGKILL after a grace period); the exit status."""
        _terminate(self.process.pid)
        return self.process.wait(5.0)


def start(rundir: Path, name: str, *, openflow_host: str, timeout: float = 20.0) -> RealRyu:
    """Start real Ryu with ofctl_rest: REST on 127.0.0.1, OpenFlow on ``openflow_host``,
    both on free ports; returns once both listen (FabricError naming its log otherwise;
    PeerMissing / PeerBuildError when Ryu cannot be had)."""
    manager = peers.ryu_manager()
    rundir.mkdir(parents=True, exist_ok=True)
    log_path = rundir / f"{name}.log"
    argv = [
        str(manager), "--wsapi-host", "127.0.0.1", "--wsapi-port", "0",
        "--ofp-listen-host", openflow_host, "--ofp-tcp-listen-port", "0",
        "--ofp-ssl-listen-port", "1", "--pid-file", str(rundir / f"{name}.pid"), APP,
    ]  # fmt: skip
    with log_path.open("ab") as log:
        since = log.tell()  # an earlier run's lines stay in the log: read only ours
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    (rundir / f"{name}.pid").write_text(f"{proc.pid}\n")
    try:
        rest, openflow = _wait_listening(proc, log_path, since, timeout)
    except BaseException:
        _terminate(proc.pid)
        raise
    return RealRyu(
        process=proc, base_url=f"http://127.0.0.1:{rest}", openflow_port=openflow, log=log_path
    )


def _wait_listening(
    proc: subprocess.Popen[bytes], log: Path, since: int, timeout: float
) -> tuple[int, int]:
    """(REST port, OpenFlow port) once Ryu listens on both (its log from byte ``since``)."""
    deadline = time.monotonic() + timeout
    while True:
        rest = _wsgi_port(log, since)
        others = [p for p in listening_ports(proc.pid) if p != rest]
        if rest is not None and others:
            return rest, others[0]
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-800:].strip() or "no output"
            why = f"exited {proc.returncode}" if proc.returncode is not None else "timed out"
            raise FabricError(f"{NAME} did not start ({why}; log {log}): {tail}")
        time.sleep(0.02)


def _wsgi_port(log: Path, since: int) -> int | None:
    with log.open("rb") as f:
        f.seek(since)
        found = _WSGI.search(f.read().decode(errors="replace"))
    return int(found[1]) if found else None


def listening_ports(pid: int) -> list[int]:
    """The TCP (IPv4) ports process ``pid`` listens on."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = _readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    ports = []
    for row in rows:
        cols = row.split()
        if cols[3] == _LISTEN and cols[9] in inodes:
            ports.append(int(cols[1].split(":")[1], 16))
    return ports


def _readlink(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:
        return ""
