"""The EMULATOR's dataplane: its Open vSwitch bridge, programmed with ``ovs-ofctl``.

The emulator plays a P4Runtime switch and is tested against ``drivers.p4runtime``; it uses
none of the drivers' code (not the OVS driver's OpenFlow codec either), only the OVS tools:

- ``apply``: one ``ovs-ofctl --bundle add-flows TARGET -`` per batch, a line per change
  (``add ...`` or ``delete_strict ...``), so a batch is one atomic bundle: all or nothing.
  A refusal is ``BridgeRefused`` with the OpenFlow error's name (``OFPFMFC_TABLE_FULL``).
- ``read``: ``ovs-ofctl dump-flows`` parsed back into ``Flow``s (a warm start).
- ``clear``: ``ovs-ofctl del-flows``.

A ``Flow`` has only what the reroute program's flows use: the match fields of ``FIELDS``
(IPv4 addresses as prefixes) and the actions push_vlan (a VID), pop_vlan and output.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections.abc import Sequence
from typing import NamedTuple, Protocol

log = logging.getLogger("reroute.emulators.p4rt")
FIELDS = ("in_port", "dl_vlan", "dl_type", "nw_src", "nw_dst", "nw_proto", "tp_src", "tp_dst")
PREFIXED = ("nw_src", "nw_dst")  # value/mask; every other field is matched whole
SHORTHANDS = {"ip": (0x0800, None), "icmp": (0x0800, 1), "tcp": (0x0800, 6), "udp": (0x0800, 17)}
DEFAULT_PRIORITY = 0x8000  # what ovs-ofctl leaves out of a dump
VID_PRESENT = 0x1000
WHOLE = -1  # the mask of a field matched whole
ERROR_NAME = re.compile(r"\b(OFP(?!T_)[A-Z]+_[A-Z_]+|ONF[A-Z]+_[A-Z_]+)\b")


class BridgeError(Exception):
    """``ovs-ofctl`` failed without the bridge refusing anything (no bridge, say)."""


class BridgeRefused(BridgeError):
    """The bridge refused a batch (nothing of it applied); ``code`` names the error."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class Flow(NamedTuple):  # tuples: thousands are made per Write
    """One flow: ``match`` is (field, value, mask) in ``FIELDS`` order (mask ``WHOLE`` but
    for ``PREFIXED``); ``actions`` ("push_vlan", vid), ("pop_vlan", 0), ("output", port)
    in order, none to drop."""

    priority: int
    cookie: int
    match: tuple[tuple[str, int, int], ...]
    actions: tuple[tuple[str, int], ...]

    @property
    def key(self) -> tuple[int, tuple[tuple[str, int, int], ...]]:
        """What the bridge tells flows apart by: another flow with it replaces this one."""
        return self.priority, self.match


class Change(NamedTuple):
    """Add (or replace) a flow, or delete the one with its key."""

    flow: Flow
    delete: bool = False


class FlowTable(Protocol):
    """What the emulator's table needs of a bridge (``Bridge``, or a test's in memory)."""

    async def apply(self, changes: Sequence[Change]) -> None: ...

    async def read(self) -> list[Flow]: ...

    async def clear(self) -> None: ...


class Bridge:
    """The bridge at ``target`` (``unix:/path/br.mgmt``), over OpenFlow 1.3."""

    def __init__(self, target: str, *, ofctl: str = "ovs-ofctl") -> None:
        self.target = target
        self.ofctl = ofctl

    async def apply(self, changes: Sequence[Change]) -> None:
        """The changes in order, as one atomic bundle (BridgeRefused: none applied)."""
        if changes:
            lines = "".join(f"{_command(c)}\n" for c in changes)
            await self._run("--bundle", "add-flows", self.target, "-", stdin=lines)

    async def read(self) -> list[Flow]:
        """The bridge's flows; one ``Flow`` cannot say is logged and left out."""
        out = await self._run("--no-stats", "--no-names", "dump-flows", self.target)
        flows = []
        for line in out.splitlines():
            try:
                flows.append(parse(line))
            except ValueError as exc:
                log.warning("a flow of the bridge the emulator cannot read (%s): %s", exc, line)
        return flows

    async def clear(self) -> None:
        """No flows on the bridge."""
        await self._run("del-flows", self.target)

    async def _run(self, *args: str, stdin: str | None = None) -> str:
        proc = await asyncio.create_subprocess_exec(
            self.ofctl,
            "-O",
            "OpenFlow13",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate(None if stdin is None else stdin.encode())
        if proc.returncode == 0:
            return out.decode()
        message = err.decode(errors="replace").strip() or f"{self.ofctl} failed"
        names = [n for n in ERROR_NAME.findall(message) if "BFC_" not in n]  # not the bundle's
        if names:
            raise BridgeRefused(message, code=names[0])
        raise BridgeError(message)


def text(flow: Flow) -> str:
    """``flow`` as ovs-ofctl writes it (without the command)."""
    fields = [f"priority={flow.priority}", f"cookie={flow.cookie:#x}"]
    fields += [_field(name, v, mask) for name, v, mask in flow.match]
    return f"{','.join(fields)} actions={_actions(flow.actions)}"


def _command(change: Change) -> str:
    if not change.delete:
        return f"add {text(change.flow)}"
    flow = change.flow
    fields = [f"priority={flow.priority}", *(_field(n, v, m) for n, v, m in flow.match)]
    return f"delete_strict {','.join(fields)}"


def _field(name: str, v: int, mask: int) -> str:
    if name in PREFIXED:
        net = ipaddress.IPv4Network((v, mask.bit_count()))
        return f"{name}={net.with_prefixlen}"
    return f"{name}={v:#06x}" if name == "dl_type" else f"{name}={v}"


def _actions(actions: tuple[tuple[str, int], ...]) -> str:
    words = []
    for name, arg in actions:
        if name == "push_vlan":
            words += ["push_vlan:0x8100", f"set_field:{arg | VID_PRESENT}->vlan_vid"]
        else:
            words.append(name if name == "pop_vlan" else f"{name}:{arg}")
    return ",".join(words) or "drop"


def parse(line: str) -> Flow:
    """One line of ``dump-flows --no-stats --no-names`` (ValueError: not a ``Flow``)."""
    head, sep, acts = line.strip().partition(" actions=")
    if not sep:
        raise ValueError("no actions")
    found: dict[str, tuple[int, int]] = {}
    priority, cookie = DEFAULT_PRIORITY, 0
    for word in head.replace(", ", ",").split(","):
        name, _, v = word.partition("=")
        if name == "priority":
            priority = int(v)
        elif name == "cookie":
            cookie = int(v, 0)
        elif name in SHORTHANDS and not v:
            eth_type, proto = SHORTHANDS[name]
            found["dl_type"] = (eth_type, WHOLE)
            if proto is not None:
                found["nw_proto"] = (proto, WHOLE)
        elif name in FIELDS and v:
            found[name] = _value(name, v)
        elif name != "table" or v != "0":
            raise ValueError(f"unexpected {word!r}")
    match = tuple((n, *found[n]) for n in FIELDS if n in found)
    return Flow(priority=priority, cookie=cookie, match=match, actions=_parse_actions(acts))


def _value(name: str, v: str) -> tuple[int, int]:
    if name in PREFIXED:
        net = ipaddress.IPv4Network(v)
        return int(net.network_address), int(net.netmask)
    return int(v, 0), WHOLE


def _parse_actions(text: str) -> tuple[tuple[str, int], ...]:
    actions: list[tuple[str, int]] = []
    for word in [] if text == "drop" else text.split(","):
        name, _, arg = word.partition(":")
        if name == "output" and arg.isdigit():
            actions.append(("output", int(arg)))
        elif word == "pop_vlan" or word == "strip_vlan":
            actions.append(("pop_vlan", 0))
        elif word == "push_vlan:0x8100":
            continue  # its VID follows
        elif name == "set_field" and arg.endswith("->vlan_vid"):
            actions.append(("push_vlan", int(arg.removesuffix("->vlan_vid"), 0) & 0xFFF))
        else:
            raise ValueError(f"unexpected action {word!r}")
    return tuple(actions)
