"""The driver contract: narrow typed interfaces per concern, capabilities as data, a registry.

Value types shared by the engine and every driver:

- ``FlowMatch`` / ``FlowRule`` / ``FlowChange``: what a packet switch is asked to do,
  independent of the wire protocol (OpenFlow 1.0/1.3, REST northbounds, P4Runtime).
- ``Capabilities``: what a driver can do, declared up front and read by the planner and
  executor (nothing is discovered by ``NotImplementedError``).
- ``ForeignEntry`` / ``Survey``: a table as the planner sees it: our entries (by cookie)
  as ``FlowRule``s, every other writer's as ``ForeignEntry``s, read as far as the driver
  can, so a plan is refused when another writer's entry would shadow ours.

Interfaces (``typing.Protocol``, asynchronous):

- ``FlowProgrammer``: apply a batch of flow changes (atomically when ``atomic_batch``), read
  the table back (only the entries under a cookie filter, where the protocol can filter;
  an entry outside it that the driver cannot read is skipped, counted, never fatal), and
  ``survey`` it for the planner.
- ``PortMonitor``: link state of ports (optical power where the device has it).
- ``CrossConnectSwitch``: optical cross-connects (add / remove / list).

Errors are the ``DriverError`` subtree of ``drivers.errors`` (re-exported here); a driver
translates its device's errors at its boundary and chains them with ``from``.

The registry: every driver package registers its class under a kind name together with the
model of its inventory entries (``drivers.spec.DeviceSpec``); ``build(name, spec, expect)``
makes a driver from an inventory entry. The packages under ``drivers/`` are found by
scanning (``load_all``), so the registry is the one list of kinds.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self, TypeVar, runtime_checkable

from drivers.errors import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    DriverError,
    ProtocolError,
    UnknownDriver,
)
from drivers.spec import DeviceSpec, Expect

__all__ = [
    "Capabilities",
    "CrossConnectSwitch",
    "DeviceRejected",
    "DeviceSpec",
    "DeviceTimeout",
    "DeviceUnreachable",
    "Driver",
    "DriverError",
    "Expect",
    "FlowChange",
    "FlowMatch",
    "FlowOp",
    "FlowProgrammer",
    "FlowRule",
    "FlowVerifier",
    "ForeignEntry",
    "Identity",
    "Kind",
    "Output",
    "PopVlan",
    "PortEvents",
    "PortListener",
    "PortMonitor",
    "PortState",
    "Prefix",
    "ProtocolError",
    "PushVlan",
    "Session",
    "Survey",
    "UnknownDriver",
    "build",
    "kind",
    "kinds",
    "load_all",
    "lookup",
    "new_change",
    "new_match",
    "new_rule",
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
        """The prefix's netmask as an int."""
        return (0xFFFFFFFF << (32 - self.plen)) & 0xFFFFFFFF

    @property
    def network(self) -> IPv4Network:
        """The prefix as an ``IPv4Network``."""
        return IPv4Network((self.addr, self.plen))

    def contains(self, addr: IPv4Address | int) -> bool:
        """``addr`` lies in the prefix."""
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
        """The rule's identity on a device: (table, priority, match)."""
        return (self.table, self.priority, self.match)

    def __str__(self) -> str:
        acts = ",".join(str(a) for a in self.actions) or "drop"
        return f"prio={self.priority},{self.match} -> {acts}"


# Builders for the hot loops (a flow table decoder, the planner): the same frozen objects
# as the classes' own constructors, made without ``__init__``'s ``object.__setattr__`` per
# field (measured 100,000 x: ``FlowMatch`` 1.16 -> 0.46 us, ``FlowRule`` 0.8 -> ~0.4 us).
# Every field is given, positionally, in declaration order; ``tests/unit/drivers/
# test_builders.py`` holds them to the dataclasses' fields.
_new = object.__new__


def _setters(cls: type, names: str) -> tuple[Callable[[object, Any], None], ...]:
    """The slot descriptors' setters of ``names`` (a frozen class's own ``__setattr__`` refuses)."""
    return tuple(cls.__dict__[name].__set__ for name in names.split())


_MATCH_SET = _setters(
    FlowMatch, "in_port eth_type vlan_vid ipv4_src ipv4_dst ip_proto l4_src l4_dst"
)
_RULE_SET = _setters(FlowRule, "match priority actions cookie table")


def new_match(
    in_port: int | None,
    eth_type: int | None,
    vlan_vid: int | None,
    ipv4_src: Prefix | None,
    ipv4_dst: Prefix | None,
    ip_proto: int | None,
    l4_src: int | None,
    l4_dst: int | None,
) -> FlowMatch:
    """``FlowMatch(...)`` with every field given in order, built faster (see above)."""
    m = _new(FlowMatch)
    s = _MATCH_SET
    s[0](m, in_port)
    s[1](m, eth_type)
    s[2](m, vlan_vid)
    s[3](m, ipv4_src)
    s[4](m, ipv4_dst)
    s[5](m, ip_proto)
    s[6](m, l4_src)
    s[7](m, l4_dst)
    return m


def new_rule(
    match: FlowMatch, priority: int, actions: tuple[Action, ...], cookie: int, table: int
) -> FlowRule:
    """``FlowRule(...)`` with every field given in order, built faster (see above)."""
    r = _new(FlowRule)
    s = _RULE_SET
    s[0](r, match)
    s[1](r, priority)
    s[2](r, actions)
    s[3](r, cookie)
    s[4](r, table)
    return r


class FlowOp(StrEnum):
    ADD = "add"  # add, or replace the actions of the entry with the same key
    DELETE = "delete"  # strict delete of the entry with the same key


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowChange:
    op: FlowOp
    rule: FlowRule


_CHANGE_SET = _setters(FlowChange, "op rule")


def new_change(op: FlowOp, rule: FlowRule) -> FlowChange:
    """``FlowChange(op=op, rule=rule)``, built faster (see the builders above)."""
    c = _new(FlowChange)
    _CHANGE_SET[0](c, op)
    _CHANGE_SET[1](c, rule)
    return c


@dataclass(frozen=True, slots=True, kw_only=True)
class ForeignEntry:
    """A table entry that is not ours (its cookie is outside the filter of a ``survey``),
    read as far as the driver can: what the planner needs to tell whether it would shadow
    our rules, or ours it, and the device's own text of it for the error that says so."""

    table: int
    priority: int
    match: FlowMatch  # the fields of its match that FlowMatch can say (None: not matched)
    more: bool = False  # it also matches fields FlowMatch cannot say: it matches less
    text: str  # the entry as the device shows it (or as near as the driver can write it)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True, kw_only=True)
class Survey:
    """A table in one read: our entries (cookie under the filter) and everyone else's."""

    ours: list[FlowRule]
    foreign: list[ForeignEntry]


class PortState(StrEnum):
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a driver can do; read by the planner and executor, never probed at run time:
    ``atomic_batch``, ``self_undoing`` and ``max_batch`` by the executor's batches
    (``services.reroute.guard``), ``read_back``, ``port_state`` and ``optical_power`` by
    the plan's fitting (``services.reroute.planning.capable``: lock gates, read-back) and
    by the preflight (``port_state``). A session may declare less than its class (a
    switch without bundles, a Polatis without power monitors)."""

    atomic_batch: bool  # a batch is applied all-or-nothing (OVS bundles, one P4Runtime Write)
    read_back: bool  # the table can be read back to verify
    max_batch: int  # largest batch in one request (0 = no limit)
    port_state: bool  # link state can be read
    optical_power: bool = False  # optical power can be read (a lock gate's second signal)
    notes: str = ""  # for people: docs/drivers.md
    # not atomic, but the driver itself confirms every batch (the device's acknowledgement
    # or its own read-back) and undoes the applied part of a failed one before raising:
    # the executor need not read the table around the batch (services/reroute/guard.py)
    self_undoing: bool = False


@runtime_checkable
class FlowProgrammer(Protocol):
    name: str
    capabilities: Capabilities

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        """Apply the batch; atomically if ``capabilities.atomic_batch``. Raises DriverError."""
        ...

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        """The table's entries (those whose cookie matches under the mask, when given).
        The device filters where its protocol can; an entry outside the filter (or any,
        without one) that a ``FlowRule`` cannot say is skipped and counted, while one
        inside it is a ``ProtocolError`` (it is ours, and should read back)."""
        ...

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        """In one read of the whole table: the entries whose cookie matches ``cookie``
        under ``cookie_mask`` (ours, as ``read`` gives them) and every other one as a
        ``ForeignEntry``; an entry not even readable as that is skipped and counted."""
        ...

    async def close(self) -> None:
        """Close the connection to the device."""


@runtime_checkable
class PortMonitor(Protocol):
    name: str
    capabilities: Capabilities

    async def port_states(self) -> dict[int, PortState]:
        """Link state by port number."""
        ...


PortListener = Callable[[int, PortState], None]


@runtime_checkable
class MasterElection(Protocol):
    """A device that lets one controller at a time write to it, by generation: OpenFlow
    1.3 ROLE_REQUEST master with ``generation_id``, P4Runtime's election id. The engine of
    a replica claims the device with the revision of its lock (etcd) before it writes:
    a replica that lost the device to a later claim has its writes refused by the device
    itself (fencing)."""

    name: str

    def share(self) -> None:
        """Before ``open``: this session is one of several replicas' on the device, so it
        opens without taking the device (a backup, an equal), and writes only once it has
        claimed it with ``claim_master``."""
        ...

    async def claim_master(self, generation_id: int) -> None:
        """Become the device's only writer as ``generation_id``; ``DeviceRejected`` when
        the device has seen a later one (this writer is stale: nothing may be written)."""
        ...


@runtime_checkable
class PortEvents(Protocol):
    """A device that reports port state changes as they happen (OpenFlow PORT_STATUS), so a
    lock gate waits for the event instead of polling ``port_states``."""

    name: str

    def port_events(self, listener: PortListener) -> AbstractAsyncContextManager[None]:
        """Inside, ``listener(port, state)`` is called for every change the device reports
        (it may repeat a state); on entry the device has been told to report them."""
        ...


@runtime_checkable
class FlowVerifier(Protocol):
    """A device that checks a read-back against expected rules itself, faster than
    ``read`` and comparing decoded rules (e.g. by comparing encoded entries)."""

    name: str

    async def missing(
        self, expect: Sequence[FlowRule], cookie: int, cookie_mask: int
    ) -> list[FlowRule]:
        """The rules of ``expect`` the table lacks, reading only the entries whose cookie
        matches ``cookie`` under ``cookie_mask``."""
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """What an opened device says it is (``reroute inventory check`` prints it)."""

    summary: str  # e.g. "OpenFlow 1.3, dpid 0000000000000001"
    problems: tuple[str, ...] = ()  # why it is not ready for reroutes (empty: ready)


class Session(ABC):
    """A driver's session with its device: ``open`` / ``close``, or ``async with driver:``."""

    @abstractmethod
    async def open(self) -> None:
        """Connect (and check the device answers); the driver is usable afterwards."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection; harmless when not open."""

    async def identify(self) -> Identity:
        """Who the (opened) device is, and whether it is ready; drivers say more."""
        return Identity(summary=type(self).__name__)

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


Driver = FlowProgrammer | CrossConnectSwitch


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """A registered driver kind: its class, and the model of its inventory entries."""

    name: str
    factory: type[Session]
    spec: type[DeviceSpec]

    @property
    def summary(self) -> str:
        """The first line of the driver's docstring (or its name)."""
        return (self.factory.__doc__ or self.name).strip().splitlines()[0]


@dataclass(slots=True)
class _Registry:
    kinds: dict[str, Kind] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # package -> why it did not import
    loaded: bool = False


_REGISTRY = _Registry()
_C = TypeVar("_C", bound=type[Session])


def register(kind: str, *, spec: type[DeviceSpec]) -> Callable[[_C], _C]:
    """Class decorator: make a driver available under ``kind``. The class builds itself from
    an inventory entry with ``from_spec(name, spec, expect)``."""

    def deco(factory: _C) -> _C:
        """Register ``factory`` under ``kind`` (again: only the same factory)."""
        old = _REGISTRY.kinds.get(kind)
        if old is not None and old.factory is not factory:
            raise ValueError(f"driver kind {kind!r} registered twice")
        if not callable(getattr(factory, "from_spec", None)):
            raise TypeError(f"driver kind {kind!r}: {factory.__name__} has no from_spec()")
        _REGISTRY.kinds[kind] = Kind(name=kind, factory=factory, spec=spec)
        return factory

    return deco


def load_all() -> None:
    """Import every driver package under ``drivers/`` once (each registers its kinds). A
    package whose dependencies are missing is remembered, not fatal: ``lookup`` says why."""
    if _REGISTRY.loaded:
        return
    _REGISTRY.loaded = True
    import drivers

    for info in pkgutil.iter_modules(drivers.__path__):
        if info.ispkg:
            try:
                importlib.import_module(f"drivers.{info.name}")
            except ImportError as exc:
                _REGISTRY.broken[info.name] = str(exc)


def registered() -> list[str]:
    """The kinds that can be used here, sorted."""
    load_all()
    return sorted(_REGISTRY.kinds)


def broken() -> dict[str, str]:
    """The driver packages that did not import here, with why (``load_all``)."""
    load_all()
    return dict(_REGISTRY.broken)


def kinds() -> list[Kind]:
    """Every registered driver kind, by name."""
    return [_REGISTRY.kinds[k] for k in registered()]


def kind(name: str) -> Kind:
    """The registered kind ``name``; UnknownDriver listing the known ones otherwise."""
    load_all()
    found = _REGISTRY.kinds.get(name)
    if found is not None:
        return found
    if name in _REGISTRY.broken:
        why = _REGISTRY.broken[name]
        raise UnknownDriver(name, f"driver kind {name!r} cannot be loaded here: {why}")
    known = ", ".join(registered()) or "none"
    raise UnknownDriver(name, f"no driver for kind {name!r}; known kinds: {known}")


def lookup(name: str) -> type[Session]:
    """The driver class of kind ``name`` (UnknownDriver listing the known kinds)."""
    return kind(name).factory


def build(name: str, spec: DeviceSpec, expect: Expect) -> Session:
    """The driver of device ``name`` from its inventory entry (not yet opened)."""
    factory: Any = kind(spec.driver).factory
    driver: Session = factory.from_spec(name, spec, expect)
    return driver
