"""The EMULATOR's dataplane: its Open vSwitch bridge.

The emulator plays a P4Runtime switch and is tested against ``drivers.p4runtime``; it uses
none of the drivers' code (not the OVS driver's OpenFlow codec either):

- ``apply``: the Write's flow changes as one ONF bundle on an OpenFlow connection kept
  open (``openflow``: os-ken's encoder), all or nothing; a refusal is ``BridgeRefused``
  with the OpenFlow error's name (``OFPFMFC_TABLE_FULL``);
- ``read``: ``ovs-ofctl dump-flows`` parsed back into ``Flow``s (a warm start);
- ``clear``: ``ovs-ofctl del-flows``.

A ``Flow`` (``flow``) has only what the reroute program's flows use: the match fields of
``FIELDS`` (IPv4 addresses as prefixes) and the actions push_vlan (a VID), pop_vlan and
output.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
from collections.abc import Sequence

from emulators.p4rt.flow import (
    DEFAULT_PRIORITY,
    FIELDS,
    PREFIXED,
    SHORTHANDS,
    VID_PRESENT,
    WHOLE,
    BridgeError,
    BridgeRefused,
    Change,
    Flow,
)
from emulators.p4rt.openflow import Channel

log = logging.getLogger("reroute.emulators.p4rt")
ERROR_NAME = re.compile(r"\b(OFP(?!T_)[A-Z]+_[A-Z_]+|ONF[A-Z]+_[A-Z_]+)\b")


class Bridge:
    """The bridge at ``target`` (``unix:/path/br.mgmt``), over OpenFlow 1.3."""

    def __init__(self, target: str, *, ofctl: str = "ovs-ofctl") -> None:
        self.target = target
        self.ofctl = ofctl
        self.channel = Channel(target)

    async def apply(self, changes: Sequence[Change]) -> None:
        """The changes in order, as one atomic bundle (BridgeRefused: none applied)."""
        if changes:
            await self.channel.apply(changes)

    async def close(self) -> None:
        """Close the OpenFlow connection."""
        await self.channel.close()

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
    """``flow`` as ovs-ofctl writes it (what ``parse`` reads back; for logs and tests)."""
    fields = [f"priority={flow.priority}", f"cookie={flow.cookie:#x}"]
    fields += [_field(name, v, mask) for name, v, mask in flow.match]
    return f"{','.join(fields)} actions={_actions(flow.actions)}"


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
