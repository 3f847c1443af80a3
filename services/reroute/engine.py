"""The engine: one reroute from intent to outcome against a running fabric.

recover interrupted reroutes -> read the tables (our rules, by cookie) -> plan -> execute.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from drivers.base import FlowProgrammer
from drivers.ovs import OvsDriver
from fabric.ovs import OvsInstance
from fabric.state import FabricState
from services.reroute.executor import Executor, Outcome
from services.reroute.journal import Journal, RerouteState
from services.reroute.model import Intent
from services.reroute.planner import Plan, plan, plan_restore
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK
from services.reroute.tables import Tables, tables_from
from services.reroute.topology import Topology


def journal_path(state: FabricState) -> Path:
    return state.dir / "journal.sqlite"


@asynccontextmanager
async def fabric_drivers(topo: Topology, state: FabricState) -> AsyncIterator[dict[str, OvsDriver]]:
    """Connected OVS drivers for every packet switch of a running fabric."""
    ovs = OvsInstance(rundir=state.ovs_dir, netns=state.fabric_ns)
    drivers = {s.name: OvsDriver(s.name, ovs.mgmt(s.name)) for s in topo.switches}
    try:
        await asyncio.gather(*(d.connect() for d in drivers.values()))
        yield drivers
    finally:
        await asyncio.gather(*(d.close() for d in drivers.values()), return_exceptions=True)


async def read_tables(drivers: Mapping[str, FlowProgrammer]) -> Tables:
    names = list(drivers)
    reads = await asyncio.gather(
        *(drivers[n].read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK) for n in names)
    )
    return tables_from(dict(zip(names, reads, strict=True)))


async def plan_on_devices(
    topo: Topology, drivers: Mapping[str, FlowProgrammer], intent: Intent
) -> Plan:
    return plan(topo, await read_tables(drivers), intent, now=time.time())


async def recover(
    topo: Topology, drivers: Mapping[str, FlowProgrammer], journal: Journal
) -> list[str]:
    """Finish every reroute the journal shows running (its process died mid-plan): read the
    devices, put every flow back on its origin path, remove what the reroute left behind.
    Safe to repeat: an interrupted recovery leaves the record running for the next one."""
    done = []
    for record in journal.in_flight():
        plans = plan_restore(
            topo, await read_tables(drivers), record.origins, record.touched, now=time.time()
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
    drivers: Mapping[str, FlowProgrammer],
    journal: Journal,
    intent: Intent,
    *,
    step_timeout: float = 10.0,
) -> tuple[Plan, Outcome]:
    executor = Executor(drivers, journal, step_timeout=step_timeout)
    await recover(topo, drivers, journal)
    the_plan = await plan_on_devices(topo, drivers, intent)
    outcome = await executor.run(uuid.uuid4().hex[:12], the_plan)
    return the_plan, outcome
