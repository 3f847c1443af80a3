"""The host tool that speaks OpenFlow 1.0 to the switch: command lines and what failures mean.

- ``Ofctl``: ``ovs-ofctl -O OpenFlow10 -F OpenFlow10``. It waits for the switch (a barrier
  after every flow-mod), stops at the first error and prints it (``OFPT_ERROR ...:
  OFPFMFC_TABLE_FULL``). ``-F OpenFlow10`` keeps OVS's extensions (NXM) off the wire, as
  an HP switch would reject them. A whole batch is one ``add-flows`` run (``add`` and
  ``delete_strict`` lines on stdin), parsed completely before anything is sent. Ports and
  the datapath id come from ``show`` (the FEATURES_REPLY), which OpenFlow 1.0 defines.
- ``Dpctl``: the OpenFlow 1.0 reference ``dpctl`` (not in Debian; ``fabric.peers`` builds
  it from the reference tarball, and the tests run it). It sends and hangs up without
  waiting, so its exit code proves nothing: ``waits`` is False and the driver polls the
  read-back. Consecutive adds go in one ``add-flows`` (file ``/dev/stdin``, read a line at
  a time into 1024 bytes), each delete is one ``--strict del-flows``; port state comes
  from ``show``, one line a port. It reads ``cookie=`` with ``atoi`` and prints cookies
  in decimal: the cookies pass folded (``cookies``), both ways.

Both tools read a table through ``unfolded``: the entries dpctl wrote hold folded cookies
on the switch whichever tool reads them later (ovs-ofctl prints them in hexadecimal, dpctl
in decimal), so a table reads the same, ours and other writers', whichever tool the
driver has (a fabric first driven with dpctl, then with ovs-ofctl, keeps its rules ours).

``classify`` turns a run's exit status and stderr into the driver error it means, or None.
Which program is which: ``drivers.hp_dpctl.which``.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Protocol

from drivers.base import FlowRule
from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
)
from drivers.hp_dpctl import cookies, flowtext
from drivers.hp_dpctl.flowtext import flow_spec

_UNREACHABLE = re.compile(
    r"Connection refused|failed to connect|connection dropped|No route to host|"
    r"Network is unreachable|Connection reset|Broken pipe|End of file|Name or service",
    re.IGNORECASE,
)
_COOKIE = re.compile(r"\bcookie=(0x[0-9a-fA-F]+|\d+)\b")
LINE_MAX = 1024  # dpctl's add-flows reads each line into char line[1024]
_ERROR_CODE = re.compile(r"OFPT_ERROR[^:]*:\s*([A-Z][A-Z0-9_]+)")
_ANY_CODE = re.compile(r"\b((?:OFP|NX)(?!T_|ST_)[A-Z]*_[A-Z0-9_]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    argv: tuple[str, ...]
    stdin: str | None = None

    def __str__(self) -> str:
        return " ".join(self.argv)


class Tool(Protocol):
    @property
    def path(self) -> str:
        """The program."""
        ...

    @property
    def waits(self) -> bool:
        """True when an exit status of 0 means the switch accepted every message."""
        ...

    def batch(self, target: str, lines: Sequence[str]) -> list[Command]:
        """The commands applying flow-text ``lines`` on ``target``."""

    def dump(self, target: str) -> Command:
        """The command dumping ``target``'s flow table."""

    def ports(self, target: str) -> Command:
        """The command listing ``target``'s ports."""

    def cookie_text(self, cookie: int) -> str:
        """``cookie`` as the tool must be given it in a flow."""

    def table(self, text: str) -> str:
        """``dump-flows`` output with every cookie as the driver wrote it."""

    def cannot_carry(self, rule: FlowRule) -> str | None:
        """Why the tool cannot write ``rule`` (None: it can)."""


def timeout_option(seconds: float) -> str:
    """The tool's own alarm: whole seconds, one more than the driver's (which acts first);
    it only ends a tool the driver could not kill."""
    return f"--timeout={math.ceil(seconds) + 1}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Ofctl:
    path: str
    timeout: float

    @property
    def waits(self) -> bool:
        """``ovs-ofctl`` waits for the switch's replies itself."""
        return True

    def _base(self, *args: str) -> tuple[str, ...]:
        options = ("-O", "OpenFlow10", "-F", "OpenFlow10", timeout_option(self.timeout))
        return (self.path, *options, *args)

    def batch(self, target: str, lines: Sequence[str]) -> list[Command]:
        """One ``add-flows`` command reading ``lines`` from stdin."""
        stdin = "".join(f"{line}\n" for line in lines)
        return [Command(argv=self._base("add-flows", target, "-"), stdin=stdin)]

    def dump(self, target: str) -> Command:
        """The command dumping the flow table."""
        return Command(argv=self._base("--no-stats", "--no-names", "dump-flows", target))

    def ports(self, target: str) -> Command:
        """``show``: the FEATURES_REPLY (datapath id, and in OpenFlow 1.0 the ports). Not
        ``dump-ports-desc``: on 1.0 that is stats type 13, an Open vSwitch extension a
        real HP switch answers with BAD_STAT."""
        return Command(argv=self._base("--no-names", "show", target))

    def cookie_text(self, cookie: int) -> str:
        """ovs-ofctl carries 64-bit cookies: hexadecimal."""
        return f"{cookie:#x}"

    def table(self, text: str) -> str:
        """ovs-ofctl prints cookies in hexadecimal, those dpctl wrote folded: unfolded."""
        return unfolded(text)

    def cannot_carry(self, rule: FlowRule) -> str | None:
        """A cookie that would read back as another (one dpctl's folding could have made:
        ``unfolded``); every other rule OpenFlow 1.0 can say."""
        if cookies.unfold(rule.cookie) == rule.cookie or not 0 <= rule.cookie < cookies.U64:
            return None
        return (
            f"cookie {rule.cookie:#x} would read back as {cookies.unfold(rule.cookie):#x}: the "
            "driver reads a cookie below 2^31 (or within 2^31 of 2^64) as one the reference "
            "dpctl folded (bits 16..47 must be zero, or the cookie at least 2^31)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Dpctl:
    path: str
    timeout: float

    @property
    def waits(self) -> bool:
        """``dpctl`` does not wait for the switch's replies."""
        return False

    def _base(self, *args: str) -> tuple[str, ...]:
        return (self.path, timeout_option(self.timeout), *args)

    def batch(self, target: str, lines: Sequence[str]) -> list[Command]:
        """One command per run of adds or deletes in ``lines`` (dpctl takes one kind at a time)."""
        commands = []
        for is_add, group in groupby(lines, key=lambda line: line.startswith("add ")):
            specs = [flow_spec(line) for line in group]
            commands += [self._adds(target, specs)] if is_add else self._deletes(target, specs)
        return commands

    def _adds(self, target: str, specs: list[str]) -> Command:
        stdin = "".join(f"{s}\n" for s in specs)
        return Command(argv=self._base("add-flows", target, "/dev/stdin"), stdin=stdin)

    def _deletes(self, target: str, specs: list[str]) -> list[Command]:
        return [Command(argv=self._base("--strict", "del-flows", target, s)) for s in specs]

    def dump(self, target: str) -> Command:
        """The command dumping the flow table."""
        return Command(argv=self._base("dump-flows", target))

    def ports(self, target: str) -> Command:
        """The command showing the switch's ports."""
        return Command(argv=self._base("show", target))

    def cookie_text(self, cookie: int) -> str:
        """The decimal C int dpctl's ``atoi`` reads (``cookies.fold``)."""
        folded = cookies.fold(cookie)
        if folded is None:
            raise ValueError(cookies.why_not(cookie))
        return str(folded)

    def table(self, text: str) -> str:
        """dpctl prints cookies in decimal, as the switch holds them: unfolded, in hex."""
        return unfolded(text)

    def cannot_carry(self, rule: FlowRule) -> str | None:
        """A cookie dpctl cannot pass through ``atoi``; a line its 1024-byte buffer cuts."""
        if why := cookies.why_not(rule.cookie):
            return why
        if len(flowtext.add_line(rule)) >= LINE_MAX:
            return f"its add-flows line is {LINE_MAX} bytes or longer (dpctl reads 1023)"
        return None


def unfolded(text: str) -> str:
    """``dump-flows`` output (either tool's) with every cookie unfolded (``cookies.unfold``:
    a cookie dpctl can have written is read as the cookie it was folded from), in hex."""
    return _COOKIE.sub(lambda m: f"cookie={cookies.unfold(_number(m[1])):#x}", text)


def _number(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def classify(device: str, command: Command, returncode: int, stderr: str) -> DriverError | None:
    """The error a finished run means (None: it succeeded)."""
    if returncode == 0 and "OFPT_ERROR" not in stderr:
        return None
    detail = _last_lines(stderr) or f"exit status {returncode}"
    if returncode == -signal.SIGALRM:
        return DeviceTimeout(device, f"`{command.argv[0]}` gave up waiting: {detail}")
    if "version negotiation failed" in stderr:
        return ProtocolError(device, f"the switch does not speak OpenFlow 1.0: {detail}")
    if code := _code(stderr):
        return DeviceRejected(device, f"the switch refused a flow-mod: {detail}", code)
    if _UNREACHABLE.search(stderr):
        return DeviceUnreachable(device, detail)
    return DeviceRejected(device, f"`{command}` failed: {detail}", "BAD_REQUEST")


def _code(stderr: str) -> str:
    found = _ERROR_CODE.search(stderr) or _ANY_CODE.search(stderr)
    return found[1] if found else ""


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])
