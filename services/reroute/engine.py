"""The engine: one reroute from intent to outcome, on the devices of an inventory.

hold the resources (locks.py) -> recover reroutes whose owner died -> survey the tables
(our rules by cookie, and the entries of other writers) -> plan -> refuse a plan another
writer's entry would shadow -> hold what the plan needs (resources.py) -> execute.
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
from services.reroute.errors import PlanError, RerouteError
from services.reroute.executor import Driver, Executor, Outcome, StepEvent
from services.reroute.inventory import Inventory
from services.reroute.journal import Journal, Journaling, Record, RerouteState
from services.reroute.locks import Held, Locks, Universe, file_or_memory, holding
from services.reroute.model import Intent
from services.reroute.planning import capable, foreign, plan
from services.reroute.planning.plan import Plan
from services.reroute.planning.restore import plan_restore
from services.reroute.resources import EVERYTHING, Keys, covers, device_of, plan_resources
from services.reroute.resync import resync
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK
from services.reroute.tables import Tables, tables_from
from services.reroute.topology import Circuit, Topology

EXTEND_TRIES = 3  # a plan that needs more than is held: re-planned after taking more, this often


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
    journal: Journaling,
    scope: frozenset[str] | None = None,
    records: list[Record] | None = None,
    *,
    executor: Callable[[Journaling], Executor] | None = None,
) -> list[str]:
    """Finish every reroute of ``records`` (default: every one the journal shows running:
    its process died mid-plan): read the devices, put every flow back on its origin path,
    remove what the reroute left behind. Safe to repeat: an interrupted recovery leaves the
    record running for the next one. The caller holds the records' resources."""
    done = []
    for record in journal.in_flight() if records is None else records:
        await restore(topo, drivers, journal, record, scope, executor=executor)
        done.append(record.id)
    return done


async def restore(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journaling,
    record: Record,
    scope: frozenset[str] | None = None,
    *,
    executor: Callable[[Journaling], Executor] | None = None,
) -> None:
    """Recover one interrupted reroute (``recover``); ``executor`` makes the executor of
    each restore plan (default: a plain one on ``drivers``)."""
    tables = await read_tables(drivers)
    plans = plan_restore(topo, tables, record.origins, record.touched, now=time.time(), scope=scope)
    scratch = Journal(None)
    try:
        for i, p in enumerate(plans):
            run = executor(scratch) if executor else Executor(drivers, scratch)
            outcome = await run.run(f"{record.id}-restore{i}", p)
            if outcome.state is not RerouteState.DONE:
                journal.finish(record.id, RerouteState.FAILED, f"recovery failed: {outcome.error}")
                return
        journal.finish(
            record.id,
            RerouteState.ROLLED_BACK,
            "interrupted: the applying process stopped mid-plan; recovered, every flow "
            "is back on its path",
        )
    finally:
        scratch.close()


class NeedMore(RerouteError):
    """The plan needs resources beyond those held and they are taken: try again later
    holding ``keys``."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        super().__init__(f"needs {', '.join(sorted(keys))}")


async def reroute(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journaling,
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
    try:
        return await engine.apply(intent, reroute_id=reroute_id, on_event=on_event)
    finally:
        await engine.close()


@dataclass(slots=True)
class Engine:
    """One engine instance: a topology, the drivers of the switches it manages (``scope``;
    None = all), its journal and its locks. What the service, the CLI and experiments call.

    Reroutes of one engine (or of several, on one lock directory) whose resources do not
    overlap run at once (``resources.py``); ``apply`` takes every device, plans, then keeps
    only what its plan holds."""

    topo: Topology
    drivers: Mapping[str, Driver]
    journal: Journaling
    scope: frozenset[str] | None = None
    step_timeout: float = 10.0
    lock_dir: Path | None = None  # device locks shared with other instances (locks.py)
    locks: Locks | None = None  # default: files in lock_dir, else within this process

    def __post_init__(self) -> None:
        if self.locks is None:
            self.locks = file_or_memory(self.lock_dir, Universe.of(self.topo, self.managed))

    @property
    def managed(self) -> frozenset[str]:
        """The devices this engine has drivers of."""
        return frozenset(self.drivers)

    @property
    def lock(self) -> Locks:
        """The engine's locks."""
        assert self.locks is not None
        return self.locks

    @classmethod
    def of(
        cls,
        topo: Topology,
        inv: Inventory,
        drivers: Mapping[str, Driver],
        journal: Journaling,
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

    async def close(self) -> None:
        """Let go of the locks' owner (its reroutes have ended)."""
        await self.lock.close()

    def executor(
        self,
        journal: Journaling,
        on_event: Callable[[StepEvent], None] | None = None,
        held: Held | None = None,
    ) -> Executor:
        """An executor on this engine's drivers, steps bounded by the owner's lease (etcd:
        no step starts unless the lease outlives it), each device claimed as master with
        the revision of its lock where it elects one (``MasterElection``)."""
        lease = self.lock.lease_left() is not None
        return Executor(
            self.drivers,
            journal,
            step_timeout=self.step_timeout,
            on_event=on_event,
            lease=self.lock.lease_left if lease else None,  # type: ignore[arg-type]
            lease_step_s=self.lock.step_s,
            generation=None if held is None else held.revision,
        )

    async def state(self) -> tuple[Tables, frozenset[Circuit]]:
        """Our rules on every managed packet switch, and every managed optical circuit."""
        tables, optics = await asyncio.gather(read_tables(self.drivers), read_optics(self.drivers))
        return tables, optics

    async def plan(self, intent: Intent) -> Plan:
        """The plan on the devices' current state (a dry run: nothing changes)."""
        return await plan_on_devices(self.topo, self.drivers, intent, self.scope)

    async def expected(self, intent: Intent) -> Keys:
        """What ``intent`` is expected to hold, from a plan on the devices now (which may
        change before it runs); ``EVERYTHING`` when it cannot be planned now."""
        try:
            return self.resources(await self.plan(intent))
        except PlanError:
            return frozenset({EVERYTHING})

    def resources(self, the_plan: Plan) -> Keys:
        """What ``the_plan`` holds on the devices this engine manages."""
        return frozenset(
            k for k in plan_resources(self.topo, the_plan) if device_of(k) in self.managed
        )

    async def apply(
        self,
        intent: Intent,
        *,
        reroute_id: str | None = None,
        on_event: Callable[[StepEvent], None] | None = None,
        on_plan: Callable[[Plan], None] | None = None,
    ) -> tuple[Plan, Outcome]:
        """Take every device, recover what died, plan on the devices, keep only what the
        plan holds and execute it (journaled). ``on_plan`` is called with the plan before
        it runs (a PlanError is raised instead)."""
        async with holding(self.lock, frozenset({EVERYTHING})) as held:
            await self._recover_dead()
            return await self.run_held(
                reroute_id or uuid.uuid4().hex[:12], intent, held, on_event, on_plan
            )

    async def run_held(
        self,
        reroute_id: str,
        intent: Intent,
        held: Held,
        on_event: Callable[[StepEvent], None] | None = None,
        on_plan: Callable[[Plan], None] | None = None,
    ) -> tuple[Plan, Outcome]:
        """Plan ``intent`` holding ``held`` and execute it, holding only what the plan needs
        from then on. ``NeedMore`` when the plan needs more and it cannot be had now
        (nothing changed, nothing journaled); ``held`` is the caller's to release."""
        with gc_paused():  # reading, planning and applying 10,000s of rules: gcpause.py
            the_plan = await self._plan_within(intent, held)
            if on_plan is not None:
                on_plan(the_plan)
            keys = self.resources(the_plan)
            await held.narrow(keys)
            executor = self.executor(self.journal, on_event, held)
            outcome = await executor.run(
                reroute_id, the_plan, owner=self.lock.owner, resources=keys
            )
        return the_plan, outcome

    async def _plan_within(self, intent: Intent, held: Held) -> Plan:
        """A plan made while holding all it needs: re-planned after taking more."""
        for _ in range(EXTEND_TRIES):
            the_plan = await self.plan(intent)
            keys = self.resources(the_plan)
            if covers(held.keys, keys):
                return the_plan
            if not await held.extend(keys):
                break
        raise NeedMore(held.keys | keys)

    async def _recover_dead(self) -> list[str]:
        """Recover the running reroutes of owners that died (the caller holds all)."""
        dead = await self.dead()
        if not dead:
            return []
        return await recover(
            self.topo, self.drivers, self.journal, self.scope, dead, executor=self.executor
        )

    async def recover_one(self, record: Record, held: Held | None = None) -> None:
        """Recover one reroute that stopped mid-plan (the caller holds its resources:
        ``held``, whose revisions claim the devices that elect a master)."""

        def executor(journal: Journaling) -> Executor:
            return self.executor(journal, held=held)

        await restore(self.topo, self.drivers, self.journal, record, self.scope, executor=executor)

    async def dead(self) -> list[Record]:
        """The running reroutes whose owner died, oldest first."""
        return [r for r in self.journal.in_flight() if not await self.lock.alive(r.owner)]

    async def recover(self) -> list[str]:
        """Recover every reroute whose owner died, holding every device."""
        async with holding(self.lock, frozenset({EVERYTHING})):
            return await self._recover_dead()

    async def resync(self) -> tuple[list[str], Outcome | None]:
        """Recover the interrupted reroutes, then write every flow's intended path where the
        switches differ (``resync``: after a switch lost its tables, a failed rollback)."""
        if self.scope is not None:
            raise ValueError("resync needs every switch (an engine without a scope)")
        async with holding(self.lock, frozenset({EVERYTHING})):
            recovered = await self._recover_dead()
            tables = await read_tables(self.drivers)
            return recovered, await resync(self.topo, self.drivers, self.journal, tables)

    async def resync_device(self, name: str) -> Outcome | None:
        """Switch ``name`` back to the journal's intended rules (``resync.resync_device``:
        after it restarted with empty tables), holding that switch only, so others may be
        down meanwhile. A P4 target that lost its program gets it back first
        (``install_program``: it had no tables left to reset). None: nothing differed."""
        from drivers.errors import DeviceRejected
        from services.reroute.resync import resync_device

        driver = self.drivers[name]
        async with holding(self.lock, frozenset({name})):
            try:
                rules = await _flows(driver).read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK)
            except DeviceRejected as exc:
                install = getattr(driver, "install_program", None)
                if exc.code != "PIPELINE_MISMATCH" or install is None:
                    raise
                await install()
                rules = await _flows(driver).read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK)
            tables = tables_from({name: rules})
            return await resync_device(self.topo, self.drivers, self.journal, name, tables)
