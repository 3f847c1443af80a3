"""Network namespaces: create, list, empty (kill what runs inside) and delete. Entering one
from inside this process is ``services.reroute.netns`` (``enter``, ``socket_in``), re-exported."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from fabric.run import run
from services.reroute.netns import NETNS_DIR, enter, socket_in

__all__ = [
    "NETNS_DIR",
    "add",
    "delete",
    "enter",
    "exists",
    "kill_all",
    "listing",
    "pids",
    "socket_in",
]


def exists(name: str) -> bool:
    """The network namespace ``name`` exists."""
    return (NETNS_DIR / name).exists()


def listing(prefix: str = "") -> list[str]:
    """The network namespaces whose names start with ``prefix``."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(prefix))


def add(name: str) -> None:
    """Create namespace ``name`` with its loopback up."""
    run(["ip", "netns", "add", name])
    run(["ip", "link", "set", "lo", "up"], ns=name)
    for knob in ("all", "default"):
        run(["sysctl", "-qw", f"net.ipv6.conf.{knob}.disable_ipv6=1"], ns=name)


def pids(name: str) -> list[int]:
    """The processes running in namespace ``name``."""
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
    """Kill every process in namespace ``name`` and delete it, if it exists."""
    if exists(name):
        kill_all(name)
        run(["ip", "netns", "del", name], check=False)
