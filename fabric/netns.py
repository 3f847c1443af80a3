"""Network namespaces: create, list, empty (kill what runs inside) and delete; enter one
from inside this process (``enter``, ``socket_in``: Python 3.11 has no ``os.setns``, so
libc's ``setns(2)`` is called through ctypes)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import threading
import time
from pathlib import Path

from fabric.run import run
from services.reroute.errors import FabricError

NETNS_DIR = Path("/run/netns")


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def listing(prefix: str = "") -> list[str]:
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def add(name: str) -> None:
    run(["ip", "netns", "add", name])
    run(["ip", "link", "set", "lo", "up"], ns=name)
    for knob in ("all", "default"):
        run(["sysctl", "-qw", f"net.ipv6.conf.{knob}.disable_ipv6=1"], ns=name)


def pids(name: str) -> list[int]:
    out = run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def kill_all(name: str, grace: float = 2.0) -> None:
    """Stop every process inside a namespace: TERM, then KILL what is left after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        victims = pids(name)
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and pids(name):
            time.sleep(0.05)


def delete(name: str) -> None:
    if exists(name):
        kill_all(name)
        run(["ip", "netns", "del", name], check=False)


CLONE_NEWNET = 0x40000000


def enter(name: str) -> None:
    """Move the calling thread into network namespace ``name``: sockets opened before stay
    in theirs, sockets and threads made after belong to ``name``. FabricError if it fails."""
    try:
        fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise FabricError(f"network namespace {name!r} does not exist ({exc.strerror})") from exc
    try:
        _setns(fd, name)
    finally:
        os.close(fd)


def socket_in(name: str, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket that lives in network namespace ``name`` (the calling thread enters it,
    opens the socket, and comes back)."""
    own_path = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"
    own = os.open(own_path, os.O_RDONLY)
    try:
        enter(name)
        try:
            return socket.socket(family, kind, proto)
        finally:
            _setns(own, "the original namespace")
    finally:
        os.close(own)


def _setns(fd: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise FabricError(f"cannot enter network namespace {name!r}: {os.strerror(err)}")
