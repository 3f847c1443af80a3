"""Entering a network namespace from inside this process: ``enter`` (the calling thread
moves) and ``socket_in`` (a socket that lives in another namespace). Python 3.11 has no
``os.setns``, so libc's ``setns(2)`` is called through ctypes.

Monitors open their probe sockets inside a host's namespace with it; the emulated fabric
(its delay line, its netlink calls) uses it too.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from pathlib import Path

from services.reroute.errors import HostError

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000


def enter(name: str) -> None:
    """Move the calling thread into network namespace ``name``: sockets opened before stay
    in theirs, sockets and threads made after belong to ``name``. HostError if it fails."""
    try:
        fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise HostError(f"network namespace {name!r} does not exist ({exc.strerror})") from exc
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
        raise HostError(f"cannot enter network namespace {name!r}: {os.strerror(err)}")
