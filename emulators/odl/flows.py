"""The EMULATOR's flow model: what a flow of ODL's inventory model can say here.

Independent of ``drivers.base.FlowRule`` on purpose: the emulator accepts what ODL accepts
(e.g. a ``push-vlan-action`` without a ``set-field``, TCP and UDP ports as separate
fields) and the driver is tested against it, not against a copy of its own mapping.

IPv4 prefixes are kept as normalised ``a.b.c.d/n`` text; ports as OpenFlow 1.3 numbers
(reserved ports such as CONTROLLER by their numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from ipaddress import IPv4Network

DEFAULT_PRIORITY = 0x8000
RESERVED_PORTS = {
    "IN_PORT": 0xFFFFFFF8,
    "INPORT": 0xFFFFFFF8,
    "TABLE": 0xFFFFFFF9,
    "NORMAL": 0xFFFFFFFA,
    "FLOOD": 0xFFFFFFFB,
    "ALL": 0xFFFFFFFC,
    "CONTROLLER": 0xFFFFFFFD,
    "LOCAL": 0xFFFFFFFE,
    "ANY": 0xFFFFFFFF,
}
PORT_NAMES = {0xFFFFFFF8: "INPORT", **{v: k for k, v in RESERVED_PORTS.items() if k != "INPORT"}}
MAX_PORT = 0xFFFFFF00


class FlowError(ValueError):
    """A body ODL would refuse: answered 400 with ``tag`` (RESTCONF ``error-tag``)."""

    def __init__(self, message: str, tag: str = "malformed-message") -> None:
        self.tag = tag
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class Match:
    """Match fields; None is a wildcard."""

    in_port: int | None = None
    eth_src: str | None = None  # MAC address, lower-case colon form
    eth_dst: str | None = None
    eth_type: int | None = None
    vlan_id: int | None = None
    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    ip_proto: int | None = None
    tcp_src: int | None = None
    tcp_dst: int | None = None
    udp_src: int | None = None
    udp_dst: int | None = None


class ActionKind(StrEnum):
    OUTPUT = "output"  # arg: port number
    PUSH_VLAN = "push-vlan"  # arg: ethertype (0x8100)
    SET_VLAN_ID = "set-vlan-id"  # arg: VLAN id
    POP_VLAN = "pop-vlan"


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    kind: ActionKind
    arg: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Flow:
    """One flow of a node's table; ``id`` is the config datastore key ('' when unknown)."""

    id: str
    table: int
    priority: int = DEFAULT_PRIORITY
    cookie: int = 0
    match: Match = Match()
    actions: tuple[Action, ...] = ()
    idle_timeout: int = 0
    hard_timeout: int = 0
    name: str = ""

    @property
    def key(self) -> tuple[int, int, Match]:
        """What identifies the entry on the switch (OpenFlow strict match)."""
        return (self.table, self.priority, self.match)


@dataclass(frozen=True, slots=True, kw_only=True)
class Counters:
    packets: int = 0
    bytes: int = 0
    seconds: int = 0
    nanoseconds: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Port:
    number: int
    name: str
    hw_addr: str
    link_down: bool
    admin_down: bool


# --------------------------------------------------------------------------------------
# value checks shared by the body codecs


def prefix(text: object, what: str, *, need_length: bool = True) -> str:
    """``10.0.0.0/24`` normalised (host bits cleared, as the switch would)."""
    if not isinstance(text, str) or (need_length and "/" not in text):
        raise FlowError(f"{what}: expected an IPv4 prefix a.b.c.d/n, got {text!r}")
    try:
        return str(IPv4Network(text.strip(), strict=False))
    except ValueError as exc:
        raise FlowError(f"{what}: {exc}") from exc


def number(value: object, what: str, low: int, high: int) -> int:
    """An integer in ``low..high``; numeric strings are accepted (uint64 JSON encoding)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FlowError(f"{what}: expected an integer {low}..{high}, got {value!r}")
    return value


def port_number(text: object, what: str) -> int:
    """``2``, ``openflow:1:2``, ``CONTROLLER``... as an OpenFlow port number."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise FlowError(f"{what}: expected a node connector, got {text!r}")
    last = text.rsplit(":", 1)[-1].strip()
    if last.upper() in RESERVED_PORTS:
        return RESERVED_PORTS[last.upper()]
    return number(last, what, 1, MAX_PORT)


def port_text(port: int) -> str:
    """A port number as ODL writes it (reserved ports by name)."""
    return PORT_NAMES.get(port, str(port))
