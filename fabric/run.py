"""Running the system commands the fabric is made of (ip, ovs-*, ethtool), with clear errors."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from fabric.errors import FabricError

log = logging.getLogger("reroute.fabric")


def in_netns(ns: str | None, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` inside network namespace ``ns`` (if any)."""
    return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)


def run(
    argv: Sequence[str],
    *,
    ns: str | None = None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float = 30.0,
) -> str:
    """Run a command (in a namespace), return its stdout; raise FabricError when it fails."""
    cmd = in_netns(ns, argv)
    log.debug("run: %s", " ".join(cmd))
    try:
        proc = subprocess.run(
            cmd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env} if env else None,
            check=False,
        )
    except FileNotFoundError as exc:
        raise FabricError(f"{cmd[0]} is not installed (run `make setup`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise FabricError(f"`{' '.join(cmd)}` did not finish in {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip()
        raise FabricError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {err}")
    return proc.stdout


def require_root_and_tools(*tools: str) -> None:
    """Fail early, and clearly, when the fabric cannot be built on this machine."""
    if os.geteuid() != 0:
        raise FabricError("the fabric needs root (network namespaces, veths, OVS daemons)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise FabricError(f"missing {', '.join(missing)}: run `make setup` to install them")
