"""Which host tool drives the switch: a program is used only once it has said what it is.

Two programs are called ``dpctl``: the OpenFlow 1.0 reference's (Stanford/Nicira; seeds
000/001), whose syntax the driver speaks, and CPqD ofsoftswitch13's (OpenFlow 1.3,
``dpctl SWITCH flow-mod cmd=add,...``), which Mininet installs; other packages ship a
``dpctl`` of their own too. So ``tool: auto`` never takes a program for its name:

- ``ovs-ofctl`` by its ``--version``: ``ovs-ofctl (Open vSwitch) X.Y.Z`` (its ``--help``
  lists the reference dpctl's commands too);
- the reference ``dpctl`` by its ``--help``: ``usage: dpctl [OPTIONS] COMMAND [ARG...]``
  (ofsoftswitch13's puts ``SWITCH`` before ``COMMAND``) and ``add-flows SWITCH FILE``,
  ``del-flows SWITCH``.

``find_tool`` returns the tool of the kind asked (``auto``: the reference dpctl when one
is on PATH, else ovs-ofctl), or ``ConfigError`` naming each program it looked at and what
it is; nothing is sent to the switch before that.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess

from drivers.errors import ConfigError
from drivers.hp_dpctl.tool import Dpctl, Ofctl, Tool

log = logging.getLogger("reroute.drivers.hp_dpctl")

DPCTL_HELP = (
    "usage: dpctl [OPTIONS] COMMAND [ARG...]",
    "add-flows SWITCH FILE",
    "del-flows SWITCH",
)
OFCTL_VERSION = "ovs-ofctl (Open vSwitch)"
PROBE_S = 5.0
KINDS = ("dpctl", "ovs-ofctl")


def identify(path: str) -> tuple[str | None, str]:
    """(``dpctl`` | ``ovs-ofctl`` | None, what the program said or why it could not)."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError as exc:
        return None, f"cannot be run ({exc.strerror})"
    return _identify(path, stamp)


@functools.lru_cache(maxsize=16)
def _identify(path: str, stamp: int) -> tuple[str | None, str]:
    """``identify``, once per program and modification time."""
    said = _ask(path, "--version") + _ask(path, "--help")
    if OFCTL_VERSION in said:  # before dpctl's: ovs-ofctl's help lists the same commands
        return "ovs-ofctl", said.strip().splitlines()[0]
    if all(marker in said for marker in DPCTL_HELP):
        return "dpctl", "the OpenFlow 1.0 reference dpctl"
    first = next((line.strip() for line in said.splitlines() if line.strip()), "nothing")
    return None, f"not a tool this driver speaks (it says: {first[:120]!r})"


def _ask(path: str, option: str) -> str:
    try:
        proc = subprocess.run(
            [path, option], capture_output=True, text=True, timeout=PROBE_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"[{option}: {exc}]\n"
    return proc.stdout + proc.stderr


def find_tool(timeout: float, path: str | None = None, *, kind: str = "auto") -> Tool:
    """The tool of ``kind`` (``dpctl``, ``ovs-ofctl`` or ``auto``) at ``path`` (default:
    found on PATH), recognised as such; ConfigError otherwise."""
    if kind not in (*KINDS, "auto"):
        raise ConfigError(f"tool {kind!r}: expected auto, dpctl or ovs-ofctl")
    looked: list[str] = []
    for candidate, wanted in _candidates(path, kind):
        if candidate is None:
            looked.append(f"no {wanted} on PATH")
            continue
        found, said = identify(candidate)
        if found is not None and kind in ("auto", found):
            return _tool(found, candidate, timeout)
        looked.append(f"{candidate}: {said}" + (f", not {kind}" if found else ""))
        if found is None and kind == "auto" and path is None:
            log.warning("%s is %s: not used", candidate, said)
    raise ConfigError(f"tool {kind}: nothing this driver can drive ({'; '.join(looked)})")


def _candidates(path: str | None, kind: str) -> list[tuple[str | None, str]]:
    if path is not None:
        return [(path, kind)]
    wanted = KINDS if kind == "auto" else (kind,)
    return [(shutil.which(name), name) for name in wanted]


def _tool(kind: str, path: str, timeout: float) -> Tool:
    if kind == "dpctl":
        return Dpctl(path=path, timeout=timeout)
    return Ofctl(path=path, timeout=timeout)
