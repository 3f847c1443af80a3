"""``env.json``: what machine and software an experiment ran on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGES = ("reroute", "matplotlib", "rich")
TOOLS = {
    "ovs-vswitchd": ["ovs-vswitchd", "--version"],
    "iperf3": ["iperf3", "--version"],
    "iproute2": ["ip", "-V"],
}


def environment() -> dict[str, Any]:
    """Versions, cores, load average, kernel, and when."""
    return {
        "utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "packages": {name: _package(name) for name in PACKAGES},
        "tools": {name: _tool(cmd) for name, cmd in TOOLS.items()},
        "mptcp_enabled": _sysctl("net/mptcp/enabled"),
        "git": git_head(),
    }


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _tool(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    first = (proc.stdout or proc.stderr).strip().splitlines()
    return first[0] if first else None


def _sysctl(name: str) -> str | None:
    try:
        with open(f"/proc/sys/{name}") as f:
            return f.read().strip()
    except OSError:
        return None


def git_head() -> str | None:
    """``git describe --always --dirty`` of the checkout the experiments run from."""
    proc = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    return proc.stdout.strip() or None
