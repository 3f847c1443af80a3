"""``Locks``: what reroutes hold while they run, as lock keys (``engine/resources.py``),
taken all or nothing; the ``Universe`` of atoms they are held as; ``holding``. Kept by
``flock`` (this machine: the embedded default) or ``etcd.locks`` (replicas)."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.reroute.model.topology import Topology
from services.reroute.planning.resources import EVERYTHING, Keys, device_of

# what a step needs beyond its cap, as a share of the cap (``lease_needed``)
LEASE_MARGIN = 1 / 3


def lease_needed(step_s: float) -> float:
    """The lease a step capped at ``step_s`` needs left when it starts (the executor's
    docstring): strictly more than its cap."""
    return step_s * (1 + LEASE_MARGIN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Universe:
    """Every atom an engine can lock: its packet switches and its optical switches' ports."""

    switches: frozenset[str]
    ports: dict[str, tuple[str, ...]]  # optical switch -> its port keys
    # devices whose driver elects no writer (no ``MasterElection``: REST, OpenFlow 1.0,
    # SCPI): a deposed holder's last write may still land, so etcd holds them back from
    # a new owner for a while (``etcd.locks``: lock-delay)
    unfenced: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        topo: Topology,
        scope: frozenset[str] | None = None,
        *,
        unfenced: frozenset[str] = frozenset(),
    ) -> Universe:
        """The atoms of the devices of ``topo`` in ``scope`` (None: all); ``unfenced``: the
        devices whose drivers elect no writer."""

        def mine(name: str) -> bool:
            return scope is None or name in scope

        ports = {
            o.name: tuple(
                [f"{o.name}/in{i}" for i in range(1, o.ingress_count + 1)]
                + [f"{o.name}/out{o.ingress_count + e}" for e in range(1, o.egress_count + 1)]
            )
            for o in topo.optical_switches
            if mine(o.name)
        }
        switches = frozenset(s.name for s in topo.switches if mine(s.name))
        return cls(switches=switches, ports=ports, unfenced=unfenced)

    @property
    def devices(self) -> frozenset[str]:
        """Every device (packet and optical switches)."""
        return self.switches | frozenset(self.ports)

    def atoms(self, keys: Iterable[str]) -> list[str]:
        """``keys`` as atoms, sorted (the order they are taken in)."""
        out: set[str] = set()
        for key in keys:
            if key == EVERYTHING:
                out |= self.switches
                out.update(*self.ports.values())
            elif key in self.ports:
                out.update(self.ports[key])
            else:
                out.add(key)
        return sorted(out)


class Held(Protocol):
    """Keys held by one owner for one reroute (or recovery)."""

    @property
    def keys(self) -> Keys:
        """What is held (as asked: a device may stand for its ports)."""
        ...

    async def extend(self, keys: Keys, extra: Sequence[object] = ()) -> bool:
        """Also hold ``keys``, all or nothing, without waiting; False: nothing changed.
        ``extra``: the journal's compares (``Queue.guard``) the taking must also pass."""
        ...

    async def narrow(self, keys: Keys) -> None:
        """Hold only ``keys`` (covered by what is held): let the rest go."""
        ...

    async def release(self) -> None:
        """Let everything go."""
        ...

    def revision(self, device: str) -> int:
        """A number that grows each time ``device`` changes hands (0: not counted)."""
        ...


@runtime_checkable
class Outranking(Protocol):
    """Held keys whose fencing tokens can be raised above what a device saw (etcd)."""

    async def outrank(self, device: str, seen: int) -> int | None:
        """A token for ``device`` above ``seen`` while this owner still holds it; None when
        it does not (it was superseded: nothing may be raised)."""
        ...


@runtime_checkable
class KeepsClaims(Protocol):
    """Held keys that know whether this owner's earlier claim of a device still stands
    (etcd: no other owner has held the device since), so it need not be made again."""

    def sole(self, device: str) -> bool:
        """No other owner held ``device`` since this one last claimed it."""
        ...

    def claimed(self, device: str, *, kept: bool) -> None:
        """``device`` was claimed under this hold, or its claim found standing (``kept``)."""
        ...


class Locks(Protocol):
    """Where reroutes hold their resources: files on this machine, or etcd. ``changed``:
    set when another owner may have let something go or queued a reroute (None: no
    notice; look again now and then)."""

    owner: str

    @property
    def changed(self) -> asyncio.Event | None:
        """Set on changes by other owners (None: no notice)."""
        ...

    async def try_acquire(
        self, keys: Keys, claim: str | None = None, extra: Sequence[object] = ()
    ) -> Held | None:
        """``keys``, all or nothing, without waiting (None: some are held elsewhere);
        ``claim``: and the pending reroute of that id, which no other owner starts;
        ``extra``: the journal's compares (``Queue.guard``, etcd) the taking must pass."""
        ...

    async def acquire(self, keys: Keys) -> Held:
        """``keys``, all or nothing, waiting until they are all free."""
        ...

    async def alive(self, owner: str | None) -> bool:
        """The owner still runs (None: a record from before owners were recorded)."""
        ...

    async def close(self) -> None:
        """This owner is done: it holds nothing any more."""
        ...

    def lease_left(self) -> float | None:
        """Seconds this owner's lease surely lives (None: no lease, as with file locks)."""
        ...

    @property
    def step_s(self) -> float:
        """The longest a device step may take under this owner's lease (0: no limit)."""
        ...


def new_owner() -> str:
    """A fresh owner name: host, process, and a random part (a restarted process differs)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def holding(locks: Locks, keys: Keys) -> AsyncIterator[Held]:
    """Hold ``keys`` (waiting for them) for the ``with`` block."""
    held = await locks.acquire(keys)
    try:
        yield held
    finally:
        await held.release()


def devices_of(keys: Iterable[str]) -> frozenset[str]:
    """The devices ``keys`` touch."""
    return frozenset(device_of(k) for k in keys)
