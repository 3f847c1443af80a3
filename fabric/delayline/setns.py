"""Moving the calling thread into a named network namespace (``ip netns`` style).

Sockets opened before the move stay in their namespace; sockets and threads created after it
belong to the new one. Python 3.11 has no ``os.setns``, so this calls libc's ``setns(2)``.
"""

from __future__ import annotations

import ctypes
import os

from fabric.netns import NETNS_DIR
from services.reroute.errors import FabricError

CLONE_NEWNET = 0x40000000


def enter_netns(name: str) -> None:
    """Join network namespace ``name`` (``/run/netns/NAME``); FabricError if that fails."""
    path = NETNS_DIR / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise FabricError(f"network namespace {name!r} does not exist ({exc.strerror})") from exc
    try:
        _setns(fd, name)
    finally:
        os.close(fd)


def _setns(fd: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise FabricError(f"cannot enter network namespace {name!r}: {os.strerror(err)}")
