"""In-memory packet switches for service tests that need no fabric: the real engine,
planner, executor and journal run against them; only the devices are dictionaries."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

from drivers.base import (
    Capabilities,
    DeviceUnreachable,
    FlowChange,
    FlowOp,
    FlowRule,
    ForeignEntry,
    Identity,
    PortState,
    Survey,
)
from services.reroute.engine.executor import Driver
from services.reroute.model.topology import Topology
from services.reroute.rules import initial_rules
from services.reroute.service.config import Settings

CAPS = Capabilities(atomic_batch=True, read_back=True, max_batch=0, port_state=False)


class FakeSwitch:
    """A flow table: atomic batches, reads filtered by cookie; ``foreign``: entries of
    other writers beside ours, which ``survey`` shows."""

    capabilities = CAPS

    def __init__(self, name: str, rules: Sequence[FlowRule] = ()) -> None:
        self.name = name
        self.table: dict[object, FlowRule] = {r.key: r for r in rules}
        self.applied = 0
        self.reads = 0
        self.foreign: list[ForeignEntry] = []
        self.down: str | None = None  # why it does not answer (None: it does)

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        table = dict(self.table)
        for c in changes:
            if c.op is FlowOp.ADD:
                table[c.rule.key] = c.rule
            else:
                table.pop(c.rule.key, None)
        self.table = table
        self.applied += 1

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        self.reads += 1
        if cookie is None:
            return list(self.table.values())
        return [r for r in self.table.values() if r.cookie & cookie_mask == cookie & cookie_mask]

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        return Survey(ours=await self.read(cookie, cookie_mask), foreign=list(self.foreign))

    async def identify(self) -> Identity:
        if self.down is not None:
            raise DeviceUnreachable(self.name, self.down)
        return Identity(summary=f"fake switch {self.name}")

    async def close(self) -> None:
        pass


class FakeFabric:
    """Fake switches for every packet switch of a topology, with its initial rules."""

    def __init__(self, topo: Topology) -> None:
        rules = initial_rules(topo)
        self.switches = {s.name: FakeSwitch(s.name, rules.get(s.name, [])) for s in topo.switches}

    def snapshot(self) -> dict[str, dict[object, FlowRule]]:
        return {n: copy.copy(s.table) for n, s in self.switches.items()}

    @asynccontextmanager
    async def drivers(self, settings: Settings) -> AsyncIterator[Mapping[str, Driver]]:
        """A ``DriverFactory``: the switches in the settings' scope."""
        scope = settings.scope
        yield {n: s for n, s in self.switches.items() if scope is None or n in scope}


POLATIS = Capabilities(
    atomic_batch=False, read_back=True, max_batch=0, port_state=True, optical_power=True
)


class FakeOptical:
    """An optical switch's cross-connects; with power monitors (``caps``) its duplex port
    i reports UP while egress N+i has a circuit (light at once: no lock time here)."""

    def __init__(self, name: str, circuits: dict[int, int], *, ingress: int = 16,
                 caps: Capabilities = POLATIS) -> None:  # fmt: skip
        self.name = name
        self.table = dict(circuits)
        self.ingress = ingress
        self.capabilities = caps
        self.changes = 0

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.table |= dict(pairs)
        self.changes += 1

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        for i in ingresses:
            self.table.pop(i, None)
        self.changes += 1

    async def connections(self) -> dict[int, int]:
        return dict(self.table)

    async def port_states(self) -> dict[int, PortState]:
        assert self.capabilities.optical_power, "asked a switch without power monitors"
        lit = {e - self.ingress for e in self.table.values()}
        return {i: PortState.UP if i in lit else PortState.DOWN for i in range(1, 17)}
