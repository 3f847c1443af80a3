"""The engine: one reroute from intent to outcome, on the devices of an inventory.

recover interrupted reroutes -> survey the tables (our rules by cookie, and the entries of
other writers) -> plan -> refuse a plan another writer's entry would shadow -> execute.
The drivers come from the inventory (``inventory.open_drivers``); the engine knows nothing
else about the devices.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from drivers.base import CrossConnectSwitch, FlowProgrammer, ForeignEntry
from drivers.gcpause import gc_paused
from services.reroute.executor import Driver, Executor, Outcome, StepEvent
from services.reroute.inventory import Inventory
from services.reroute.journal import Journal, RerouteState
from services.reroute.locks import device_locks
from services.reroute.model import Intent
from services.reroute.planning import capable, foreign, plan
from services.reroute.planning.plan import Plan
from services.reroute.planning.restore import plan_restore
from services.reroute.resync import resync
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK
from services.reroute.tables import Tables, tables_from
from services.reroute.topology import Circuit, Topology


async def read_tables(drivers: Mapping[str, Driver]) -> Tables:
    """Our rules (by cookie) on every packet switch."""
    names = [n for n, d in drivers.items() if isinstance(d, FlowProgrammer)]
    reads = await asyncio.gather(
        *(_flows(drivers[n]).read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK) for n in names)
    )
    return tables_from(dict(zip(names, reads, strict=True)))


async def survey_tables(
    drivers: Mapping[str, Driver],
) -> tuple[Tables, dict[str, list[ForeignEntry]]]:
    """Our rules on every packet switch, and every other writer's entries there (one read
    of each table: ``FlowProgrammer.survey``)."""
    names = [n for n, d in drivers.items() if isinstance(d, FlowProgrammer)]
    surveys = await asyncio.gather(
        *(_flows(drivers[n]).survey(COOKIE_BASE, COOKIE_MASK) for n in names)
    )
    tables = tables_from({n: s.ours for n, s in zip(names, surveys, strict=True)})
    return tables, {n: s.foreign for n, s in zip(names, surveys, strict=True) if s.foreign}


async def read_optics(drivers: Mapping[str, Driver]) -> frozenset[Circuit]:
    """The current cross-connects of every optical switch."""
    names = [n for n, d in drivers.items() if isinstance(d, CrossConnectSwitch)]
    maps = await asyncio.gather(*(_optical(drivers[n]).connections() for n in names))
    return frozenset(
        Circuit(switch=n, ingress=i, egress=e)
        for n, m in zip(names, maps, strict=True)
        for i, e in m.items()
    )


def _flows(driver: Driver) -> FlowProgrammer:
    assert isinstance(driver, FlowProgrammer)
    return driver


def _optical(driver: Driver) -> CrossConnectSwitch:
    assert isinstance(driver, CrossConnectSwitch)
    return driver


async def plan_on_devices(
    topo: Topology,
    drivers: Mapping[str, Driver],
    intent: Intent,
    scope: frozenset[str] | None = None,
) -> Plan:
    """Read the devices' flow tables and circuits, then plan ``intent`` on them; PlanError
    when another writer's entry would shadow a rule the plan writes (``planning.foreign``)
    or a step needs what its device lacks (``planning.capable``: the lock gates fitted to
    the signals the devices have)."""
    (tables, others), optics = await asyncio.gather(survey_tables(drivers), read_optics(drivers))
    known = optics if any(isinstance(d, CrossConnectSwitch) for d in drivers.values()) else None
    the_plan = plan(topo, tables, intent, now=time.time(), optics=known, scope=scope)
    foreign.check(the_plan, others)
    return capable.fit(the_plan, topo, {n: d.capabilities for n, d in drivers.items()})


async def recover(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journal,
    scope: frozenset[str] | None = None,
) -> list[str]:
    """Finish every reroute the journal shows running (its process died mid-plan): read the
    devices, put every flow back on its origin path, remove what the reroute left behind.
    Safe to repeat: an interrupted recovery leaves the record running for the next one."""
    done = []
    for record in journal.in_flight():
        tables = await read_tables(drivers)
        plans = plan_restore(
            topo, tables, record.origins, record.touched, now=time.time(), scope=scope
        )
        scratch = Journal(None)
        try:
            for i, p in enumerate(plans):
                outcome = await Executor(drivers, scratch).run(f"{record.id}-restore{i}", p)
                if outcome.state is not RerouteState.DONE:
                    journal.finish(
                        record.id, RerouteState.FAILED, f"recovery failed: {outcome.error}"
                    )
                    break
            else:
                journal.finish(
                    record.id,
                    RerouteState.ROLLED_BACK,
                    "interrupted: the applying process stopped mid-plan; recovered, every flow "
                    "is back on its path",
                )
        finally:
            scratch.close()
        done.append(record.id)
    return done


async def reroute(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journal,
    intent: Intent,
    *,
    step_timeout: float = 10.0,
    on_event: Callable[[StepEvent], None] | None = None,
    reroute_id: str | None = None,
    lock_dir: Path | None = None,
) -> tuple[Plan, Outcome]:
    """Plan and execute one reroute with a one-off ``Engine``; return the plan and its outcome."""
    engine = Engine(
        topo=topo, drivers=drivers, journal=journal, step_timeout=step_timeout, lock_dir=lock_dir
    )
    return await engine.apply(intent, reroute_id=reroute_id, on_event=on_event)


@dataclass(slots=True)
class Engine:
    """One engine instance: a topology, the drivers of the switches it manages (``scope``;
    None = all), and its journal. What the service, the CLI and experiments call."""

    topo: Topology
    drivers: Mapping[str, Driver]
    journal: Journal
    scope: frozenset[str] | None = None
    step_timeout: float = 10.0
    lock_dir: Path | None = None  # device locks shared with other instances (locks.py)

    @classmethod
    def of(
        cls,
        topo: Topology,
        inv: Inventory,
        drivers: Mapping[str, Driver],
        journal: Journal,
        *,
        scope: frozenset[str] | None = None,
        step_timeout: float = 10.0,
    ) -> Engine:
        """An engine on an inventory's opened drivers, its locks shared with every engine
        that uses the same inventory."""
        return cls(
            topo=topo,
            drivers=drivers,
            journal=journal,
            scope=scope,
            step_timeout=step_timeout,
            lock_dir=inv.lock_dir,
        )

    async def state(self) -> tuple[Tables, frozenset[Circuit]]:
        """Our rules on every managed packet switch, and every managed optical circuit."""
        tables, optics = await asyncio.gather(read_tables(self.drivers), read_optics(self.drivers))
        return tables, optics

    async def plan(self, intent: Intent) -> Plan:
        """The plan on the devices' current state (a dry run: nothing changes)."""
        return await plan_on_devices(self.topo, self.drivers, intent, self.scope)

    async def apply(
        self,
        intent: Intent,
        *,
        reroute_id: str | None = None,
        on_event: Callable[[StepEvent], None] | None = None,
        on_plan: Callable[[Plan], None] | None = None,
    ) -> tuple[Plan, Outcome]:
        """Recover anything interrupted, plan on the devices, execute (journaled).
        ``on_plan`` is called with the plan before it runs (a PlanError is raised instead)."""
        executor = Executor(
            self.drivers, self.journal, step_timeout=self.step_timeout, on_event=on_event
        )
        async with device_locks(self.lock_dir, self.drivers):
            await recover(self.topo, self.drivers, self.journal, self.scope)
            with gc_paused():  # reading, planning and applying 10,000s of rules: gcpause.py
                the_plan = await self.plan(intent)
                if on_plan is not None:
                    on_plan(the_plan)
                outcome = await executor.run(reroute_id or uuid.uuid4().hex[:12], the_plan)
        return the_plan, outcome

    async def recover(self) -> list[str]:
        """Recover every reroute the journal shows running, holding the device locks."""
        async with device_locks(self.lock_dir, self.drivers):
            return await recover(self.topo, self.drivers, self.journal, self.scope)

    async def resync(self) -> tuple[list[str], Outcome | None]:
        """Recover the interrupted reroutes, then write every flow's intended path where the
        switches differ (``resync``: after a switch lost its tables, a failed rollback)."""
        if self.scope is not None:
            raise ValueError("resync needs every switch (an engine without a scope)")
        async with device_locks(self.lock_dir, self.drivers):
            recovered = await recover(self.topo, self.drivers, self.journal)
            tables = await read_tables(self.drivers)
            return recovered, await resync(self.topo, self.drivers, self.journal, tables)
