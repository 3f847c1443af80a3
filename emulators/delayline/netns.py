"""Entering a network namespace from the delay line's process (its packet sockets live in
the long-haul node's namespace, its control endpoint on the parent's loopback). Python 3.11
has no ``os.setns``, so libc's ``setns(2)`` is called through ctypes."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from emulators.delayline.errors import DelayLineError

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000


def enter(name: str) -> None:
    """Move the calling thread into network namespace ``name`` (DelayLineError if not)."""
    try:
        fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise DelayLineError(f"no network namespace {name!r} ({exc.strerror})") from exc
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            why = os.strerror(ctypes.get_errno())
            raise DelayLineError(f"cannot enter network namespace {name!r}: {why}")
    finally:
        os.close(fd)
