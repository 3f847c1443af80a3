"""What a driver promises: capabilities as data, and narrow typed interfaces per concern.

- ``Capabilities``: what a driver can do, declared up front and read by the planner and
  executor (nothing is discovered by ``NotImplementedError``).
- ``FlowProgrammer``: apply a batch of flow changes (atomically when ``atomic_batch``),
  read the table back (only the entries under a cookie filter, where the protocol can
  filter; an entry outside it that the driver cannot read is skipped, counted, never
  fatal), and ``survey`` it for the planner. ``FlowVerifier``: compare encoded entries.
- ``PortMonitor``, ``PortEvents``: link state of ports (optical power where the device has
  it), polled or pushed.
- ``CrossConnectSwitch``: optical cross-connects (add / remove / list).
- ``MasterElection``: a device that elects its one writer (fencing of replicas);
  ``GenerationSeen``: and tells the highest generation it saw.
- ``Session``: ``open`` / ``close`` / ``identify``, or ``async with driver:``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from drivers.values import FlowChange, FlowRule, PortState, Survey


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a driver can do; read by the planner and executor, never probed at run time:
    ``atomic_batch``, ``self_undoing`` and ``max_batch`` by the executor's batches
    (``services.reroute.engine.guard``), ``read_back``, ``port_state`` and ``optical_power`` by
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
    # the executor need not read the table around the batch (services/reroute/engine/guard.py)
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
class FlowCounters(Protocol):
    """A switch that counts the packets each flow entry matched. The MBB's drain reads the
    rules a shift added until they have matched packets: the moved flows are then forwarded
    by the new rules (an OVS datapath credits them when its revalidator re-translates the
    cached flows after the change, from when on the old actions are gone)."""

    name: str

    async def flow_packets(self, cookie: int) -> int:
        """Packets the entries whose cookie is exactly ``cookie`` have matched so far."""
        ...


@runtime_checkable
class PortCounters(Protocol):
    """A switch whose port counters are read live from its data plane (OVS's port stats
    come from the kernel's device counters at each request). The MBB's drain watches the
    ports that feed a circuit it is about to cut until they stop sending: an OVS datapath
    may forward by a flow's old actions for tens of ms after the flow-mod was
    acknowledged and read back (its revalidator threads update the cached datapath flows
    afterwards), so a fixed margin after the shift is a guess. A device whose counters are
    a cached poll (OpenDaylight's statistics) must not claim this."""

    name: str

    async def tx_packets(self, ports: Sequence[int] = ()) -> dict[int, int]:
        """Packets each of ``ports`` (every numbered port: none named) has sent so far;
        asking for one port asks the switch for that port's counters only."""
        ...


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
class ClaimKept(Protocol):
    """A ``MasterElection`` device whose session tells whether its last claim still
    stands as far as it can tell: then a holder that no other writer can have claimed the
    device after (etcd's record of its holders) need not claim it again."""

    def master_generation(self) -> int | None:
        """The generation this session is the device's master with (None: it never
        claimed, gave the claim up, or cannot tell)."""
        ...


@runtime_checkable
class GenerationSeen(Protocol):
    """A ``MasterElection`` device that tells the highest generation it has seen (OpenFlow
    1.3 ROLE_REQUEST NOCHANGE, P4Runtime's arbitration): a replica whose claim was refused
    as stale while it holds the device's lock raises its tokens above it (etcd.locks)."""

    async def generation_seen(self) -> int:
        """The highest generation the device has seen (0: none)."""
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


Driver = FlowProgrammer | CrossConnectSwitch
