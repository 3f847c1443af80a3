"""The driver contract: narrow typed interfaces per concern, capabilities as data, a registry.

Value types shared by the engine and every driver:

- ``FlowMatch`` / ``FlowRule`` / ``FlowChange``: what a packet switch is asked to do,
  independent of the wire protocol (OpenFlow 1.0/1.3, REST northbounds, P4Runtime).
- ``Capabilities``: what a driver can do, declared up front and read by the planner and
  executor (nothing is discovered by ``NotImplementedError``).

Interfaces (``typing.Protocol``, asynchronous):

- ``FlowProgrammer``: apply a batch of flow changes (atomically when ``atomic_batch``), read
  the table back.
- ``PortMonitor``: link state of ports (optical power where the device has it).
- ``CrossConnectSwitch``: optical cross-connects (add / remove / list).

Errors are the ``DriverError`` subtree of ``services.reroute.errors`` (re-exported here);
a driver translates its device's errors at its boundary and chains them with ``from``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from types import TracebackType
from typing import NamedTuple, Protocol, Self, TypeVar, runtime_checkable

from services.reroute.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
    UnknownDriver,
)

__all__ = [
    "Capabilities",
    "CrossConnectSwitch",
    "DeviceRejected",
    "DeviceTimeout",
    "DeviceUnreachable",
    "DriverError",
    "FlowChange",
    "FlowMatch",
    "FlowOp",
    "FlowProgrammer",
    "FlowRule",
    "Output",
    "PopVlan",
    "PortMonitor",
    "PortState",
    "Prefix",
    "ProtocolError",
    "PushVlan",
    "Session",
    "UnknownDriver",
    "lookup",
    "register",
    "registered",
]

ETH_IPV4 = 0x0800


class Prefix(NamedTuple):
    """An IPv4 prefix as two ints. Build it with ``parse``; ``Prefix(addr, plen)`` does not check.

    Matches are hashed and compared millions of times when thousands of flows move; a tuple
    of ints does that in C, ``IPv4Network`` in Python (it was most of the planner's time).
    """

    addr: int
    plen: int = 32

    @classmethod
    def parse(cls, text: str | IPv4Network) -> Prefix:
        """``10.0.0.2``, ``10.0.0.0/24`` or a network; host bits set is a ValueError."""
        net = text if isinstance(text, IPv4Network) else IPv4Network(text.strip())
        return cls(int(net.network_address), net.prefixlen)

    @property
    def mask(self) -> int:
        return (0xFFFFFFFF << (32 - self.plen)) & 0xFFFFFFFF

    @property
    def network(self) -> IPv4Network:
        return IPv4Network((self.addr, self.plen))

    def contains(self, addr: IPv4Address | int) -> bool:
        return int(addr) & self.mask == self.addr

    def __str__(self) -> str:
        a = self.addr
        return f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}/{self.plen}"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class FlowMatch:
    """Match fields; ``None`` is a wildcard. IPv4 fields are prefixes (a /32 for a host)."""

    in_port: int | None = None
    eth_type: int | None = None
    vlan_vid: int | None = None  # 802.1Q VLAN id (1..4094); None = any, tagged or not
    ipv4_src: Prefix | None = None
    ipv4_dst: Prefix | None = None
    ip_proto: int | None = None
    l4_src: int | None = None  # TCP/UDP source port (needs ip_proto 6 or 17)
    l4_dst: int | None = None

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k in self.__slots__ if (v := getattr(self, k)) is not None]
        return ",".join(parts) or "any"


@dataclass(frozen=True, slots=True, order=True)
class Output:
    port: int

    def __str__(self) -> str:
        return f"output:{self.port}"


@dataclass(frozen=True, slots=True, order=True)
class PushVlan:
    vid: int

    def __str__(self) -> str:
        return f"push_vlan:{self.vid}"


@dataclass(frozen=True, slots=True, order=True)
class PopVlan:
    def __str__(self) -> str:
        return "pop_vlan"


Action = Output | PushVlan | PopVlan


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class FlowRule:
    """One table entry. Identity on the device is (table, priority, match)."""

    match: FlowMatch
    priority: int
    actions: tuple[Action, ...]
    cookie: int = 0
    table: int = 0

    @property
    def key(self) -> tuple[int, int, FlowMatch]:
        return (self.table, self.priority, self.match)

    def __str__(self) -> str:
        acts = ",".join(str(a) for a in self.actions) or "drop"
        return f"prio={self.priority},{self.match} -> {acts}"


class FlowOp(StrEnum):
    ADD = "add"  # add, or replace the actions of the entry with the same key
    DELETE = "delete"  # strict delete of the entry with the same key


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowChange:
    op: FlowOp
    rule: FlowRule


class PortState(StrEnum):
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a driver can do; read by the planner and executor, never probed at run time."""

    atomic_batch: bool  # a batch is applied all-or-nothing (OVS bundles, one P4Runtime Write)
    read_back: bool  # the table can be read back to verify
    max_batch: int  # largest batch in one request (0 = no limit)
    port_state: bool  # link state can be read
    optical_power: bool = False
    typical_latency_ms: float = 1.0
    notes: str = ""


@runtime_checkable
class FlowProgrammer(Protocol):
    name: str
    capabilities: Capabilities

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch; atomically if ``capabilities.atomic_batch``. Raises DriverError."""
        ...

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The table's entries (those whose cookie matches under the mask, when given)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class PortMonitor(Protocol):
    name: str
    capabilities: Capabilities

    async def port_states(self) -> dict[int, PortState]:
        """Link state by port number."""
        ...


@runtime_checkable
class CrossConnectSwitch(Protocol):
    name: str
    capabilities: Capabilities

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Add ingress->egress connections, keeping all others."""
        ...

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        """Remove the connections of these ingress ports, keeping all others."""
        ...

    async def connections(self) -> dict[int, int]:
        """Current connections, ingress -> egress."""
        ...


class Session(ABC):
    """A driver's session with its device: ``open`` / ``close``, or ``async with driver:``."""

    @abstractmethod
    async def open(self) -> None:
        """Connect (and check the device answers); the driver is usable afterwards."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection; harmless when not open."""

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# --------------------------------------------------------------------------------------
# registry


@dataclass(slots=True)
class _Registry:
    kinds: dict[str, Callable[..., object]] = field(default_factory=dict)


_REGISTRY = _Registry()
_F = TypeVar("_F", bound=Callable[..., object])


def register(kind: str) -> Callable[[_F], _F]:
    """Class/factory decorator: make a driver available under ``kind``."""

    def deco(factory: _F) -> _F:
        if kind in _REGISTRY.kinds and _REGISTRY.kinds[kind] is not factory:
            raise ValueError(f"driver kind {kind!r} registered twice")
        _REGISTRY.kinds[kind] = factory
        return factory

    return deco


def registered() -> list[str]:
    return sorted(_REGISTRY.kinds)


def lookup(kind: str) -> Callable[..., object]:
    try:
        return _REGISTRY.kinds[kind]
    except KeyError:
        known = ", ".join(registered()) or "none"
        raise UnknownDriver(kind, f"no driver for kind {kind!r}; known kinds: {known}") from None
