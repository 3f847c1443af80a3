"""The engine: one reroute from intent to outcome, on the devices of an inventory.

hold the resources (locks.py) -> recover reroutes whose owner died -> survey the tables
(our rules by cookie, and the entries of other writers) -> plan -> refuse a plan another
writer's entry would shadow -> hold what the plan needs (resources.py) -> execute.
The drivers come from the inventory (``inventory.open_drivers``); the engine knows nothing
else about the devices.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from drivers.base import (
    CrossConnectSwitch,
    FlowProgrammer,
    FlowRule,
    ForeignEntry,
    MasterElection,
    Survey,
)
from drivers.gcpause import gc_paused
from services.reroute.engine.executor import Driver, Executor, Outcome, StepEvent
from services.reroute.engine.resync import resync, resync_device
from services.reroute.errors import (
    DeviceRejected,
    DeviceTimeout,
    DriverError,
    PlanError,
    RerouteError,
)
from services.reroute.model.intent import Intent
from services.reroute.model.inventory import Inventory
from services.reroute.model.topology import Circuit, Topology
from services.reroute.model.topology import Path as TopoPath
from services.reroute.planning import capable, foreign, plan
from services.reroute.planning.electronic import gc_steps
from services.reroute.planning.order import Order, PhaseName
from services.reroute.planning.plan import Disruption, Plan, StepKind, laid_out
from services.reroute.planning.resources import EVERYTHING, Keys, covers, device_of, plan_resources
from services.reroute.planning.restore import found_on, moved_any, plan_restore
from services.reroute.reach import DEVICE_TIMEOUT_S, ask, ask_each, what_it_did
from services.reroute.rules import DEFAULT_SPACE, CookieSpace, directions, path_tag, tag_of
from services.reroute.store.flock import file_or_memory
from services.reroute.store.journaling import Journaling, offload
from services.reroute.store.locks import (
    Held,
    KeepsClaims,
    Locks,
    Outranking,
    Universe,
    holding,
)
from services.reroute.store.records import Record, RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import Tables, tables_from

log = logging.getLogger("reroute.engine")
SPARE_GRACE_S = 0.1  # an old path's switch may answer this long after the new path's did
EXTEND_TRIES = 3  # a plan that needs more than is held: re-planned after taking more, this often


async def read_tables(
    drivers: Mapping[str, Driver],
    names: Iterable[str] | None = None,
    timeout: float | None = None,
    *,
    space: CookieSpace = DEFAULT_SPACE,
) -> Tables:
    """Our rules (by cookie: ``space``) on every packet switch (of ``names``); the first
    device error is raised (one that does not answer within ``timeout``: ``DeviceTimeout``)."""
    tables, failed = await read_some(drivers, _packet(drivers, names), timeout, space=space)
    _raise_first(failed)
    return tables


async def read_some(
    drivers: Mapping[str, Driver],
    names: Iterable[str],
    timeout: float | None,
    *,
    space: CookieSpace = DEFAULT_SPACE,
) -> tuple[Tables, dict[str, DriverError]]:
    """Our rules (``space``) on the packet switches ``names``, each read within
    ``timeout``; the switches that failed apart, with their errors."""
    calls = {n: _reader(drivers[n], space) for n in _packet(drivers, names)}
    reads, failed = await ask_each(drivers, calls, timeout or math.inf)
    return tables_from(reads), failed


def _reader(driver: Driver, space: CookieSpace) -> Callable[[], Awaitable[list[FlowRule]]]:
    return lambda: _flows(driver).read(cookie=space.base, cookie_mask=space.mask)


async def survey_tables(
    drivers: Mapping[str, Driver],
    names: Iterable[str] | None = None,
    timeout: float | None = None,
    *,
    space: CookieSpace = DEFAULT_SPACE,
) -> tuple[Tables, dict[str, list[ForeignEntry]], dict[str, DriverError]]:
    """Our rules (``space``) on every packet switch (of ``names``), every other writer's
    entries there (another deployment's included; one read of each table:
    ``FlowProgrammer.survey``), and the switches that failed to answer within ``timeout``,
    with their errors."""
    calls = {n: _surveyor(drivers[n], space) for n in _packet(drivers, names)}
    surveys, failed = await ask_each(drivers, calls, timeout or math.inf)
    tables = tables_from({n: s.ours for n, s in surveys.items()})
    return tables, {n: s.foreign for n, s in surveys.items() if s.foreign}, failed


def _surveyor(driver: Driver, space: CookieSpace) -> Callable[[], Awaitable[Survey]]:
    return lambda: _flows(driver).survey(space.base, space.mask)


async def read_optics(
    drivers: Mapping[str, Driver],
    names: Iterable[str] | None = None,
    timeout: float | None = None,
) -> frozenset[Circuit]:
    """The current cross-connects of every optical switch (of ``names``); the first device
    error is raised."""
    circuits, failed = await read_optics_some(drivers, _optical_names(drivers, names), timeout)
    _raise_first(failed)
    return circuits


async def read_optics_some(
    drivers: Mapping[str, Driver], names: Iterable[str], timeout: float | None
) -> tuple[frozenset[Circuit], dict[str, DriverError]]:
    """The cross-connects of the optical switches ``names``, each read within ``timeout``,
    and the switches that failed apart."""
    calls = {n: _optical(drivers[n]).connections for n in _optical_names(drivers, names)}
    maps, failed = await ask_each(drivers, calls, timeout or math.inf)
    circuits = frozenset(
        Circuit(switch=n, ingress=i, egress=e) for n, m in maps.items() for i, e in m.items()
    )
    return circuits, failed


def _packet(drivers: Mapping[str, Driver], names: Iterable[str] | None) -> list[str]:
    wanted = drivers if names is None else [n for n in names if n in drivers]
    return [n for n in wanted if isinstance(drivers[n], FlowProgrammer)]


def _optical_names(drivers: Mapping[str, Driver], names: Iterable[str] | None) -> list[str]:
    wanted = drivers if names is None else [n for n in names if n in drivers]
    return [n for n in wanted if isinstance(drivers[n], CrossConnectSwitch)]


def _raise_first(failed: Mapping[str, DriverError]) -> None:
    for exc in failed.values():
        raise exc


def _flows(driver: Driver) -> FlowProgrammer:
    assert isinstance(driver, FlowProgrammer)
    return driver


def _optical(driver: Driver) -> CrossConnectSwitch:
    assert isinstance(driver, CrossConnectSwitch)
    return driver


@dataclass(frozen=True, slots=True, kw_only=True)
class Needs:
    """The devices a reroute reads. ``needed``: those of its new and temporary paths and
    the optical switches of their circuits (each must answer, or the reroute is refused);
    ``spare``: the packet switches only on the other paths between the same hosts, where
    its flows may be now (a dead one is the failure being routed around); the circuits of
    an optical switch there do not matter to the move."""

    needed: Mapping[str, str]  # device -> why it is needed (for refusals)
    spare: frozenset[str]

    @property
    def devices(self) -> frozenset[str]:
        """Every device to read."""
        return frozenset(self.needed) | self.spare


def needs(topo: Topology, intent: Intent, managed: Iterable[str]) -> Needs:
    """What ``intent`` reads of the ``managed`` devices (PlanError for an unknown path)."""
    have = frozenset(managed)
    to = topo.paths[_known(topo, intent.to_path)]
    roles = [(to, "the new path")]
    if intent.via is not None:
        roles.append((topo.paths[_known(topo, intent.via)], "the temporary path"))
    needed: dict[str, str] = {}
    for path, role in roles:
        for node in _path_devices(path):
            if node in have:
                needed.setdefault(node, f"on {path.name}, {role}")
    ends = {to.src, to.dst}
    others = [p for p in topo.paths.values() if {p.src, p.dst} == ends]
    spare = {h.node for p in others for h in p.hops if h.node in have} - set(needed)
    return Needs(needed=needed, spare=frozenset(spare))


def _known(topo: Topology, name: str) -> str:
    path_tag(topo, name)  # PlanError listing the paths
    return name


def _path_devices(path: TopoPath) -> list[str]:
    """The packet switches of ``path`` and the optical switches of its circuits."""
    nodes = [h.node for h in path.hops] + sorted({c.switch for c in path.circuits})
    return list(dict.fromkeys(nodes))


def refuse_needed(failed: Mapping[str, DriverError], need: Needs) -> None:
    """PlanError naming every needed device that failed and what it did (nothing changed)."""
    down = [(n, e) for n, e in failed.items() if n in need.needed]
    if not down:
        return
    said = "; ".join(f"{n} ({need.needed[n]}) {what_it_did(e)}" for n, e in down)
    raise PlanError(
        f"refused, nothing changed: {said}. Wait until it answers (GET /v1/health shows "
        "each device), or choose a path that does not cross it"
    )


def debt_of(
    topo: Topology, the_plan: Plan, failed: Iterable[str], space: CookieSpace = DEFAULT_SPACE
) -> tuple[str, ...]:
    """The packet switches of ``failed`` on a path whose rules ``the_plan`` cleans up: they
    keep those rules until they return."""
    cleaned = {
        tag_of(c.rule, space)
        for s in the_plan.steps()
        if s.kind is StepKind.REMOVE
        for c in s.changes
    }  # fmt: skip
    names = list(topo.paths)
    paths = [topo.paths[names[t - 1]] for t in cleaned if t is not None and 0 < t <= len(names)]
    gone = set(failed)
    return tuple(sorted({h.node for p in paths for h in p.hops if h.node in gone}))


async def plan_on_devices(
    topo: Topology,
    drivers: Mapping[str, Driver],
    intent: Intent,
    scope: frozenset[str] | None = None,
    *,
    timeout: float = DEVICE_TIMEOUT_S,
    space: CookieSpace = DEFAULT_SPACE,
) -> Plan:
    """Read the tables and circuits of the devices ``intent`` crosses (``needs``: each read
    within ``timeout``), then plan it on them. PlanError when a device it needs does not
    answer (naming it and what it did), when another writer's entry would shadow a rule the
    plan writes (``planning.foreign``) or a step needs what its device lacks
    (``planning.capable``: the lock gates fitted to the signals the devices have).
    ``space``: the deployment's cookies (the inventory's ``cookie_tag``). A device only on
    the paths the flows leave that does not answer is left out: its cleanup is the
    plan's ``debt``; one that is slow is not waited for beyond ``SPARE_GRACE_S`` after the
    needed ones answered (``_spare_reads``)."""
    need = needs(topo, intent, drivers)
    spare = {
        n: asyncio.ensure_future(ask(drivers, n, _surveyor(drivers[n], space), timeout))
        for n in _packet(drivers, need.spare)
    }  # fmt: skip
    try:
        (tables, others, failed), (optics, lost) = await asyncio.gather(
            survey_tables(drivers, need.needed, timeout, space=space),
            read_optics_some(drivers, need.needed, timeout),
        )
        failed |= lost
        refuse_needed(failed, need)
        read, missed = await _spare_reads(spare)
    finally:
        for task in spare.values():
            task.cancel()
    tables = {**tables, **tables_from({n: s.ours for n, s in read.items()})}
    others |= {n: s.foreign for n, s in read.items() if s.foreign}
    failed |= missed
    known = optics if any(isinstance(d, CrossConnectSwitch) for d in drivers.values()) else None
    the_plan = plan(topo, tables, intent, now=time.time(), optics=known, scope=scope, space=space)
    foreign.check(the_plan, others, topo, space)
    fitted = capable.fit(the_plan, topo, {n: d.capabilities for n, d in drivers.items()})
    debt = debt_of(topo, fitted, failed, space)
    return replace(fitted, debt=debt) if debt else fitted


async def _spare_reads(
    tasks: Mapping[str, asyncio.Future[Survey]],
) -> tuple[dict[str, Survey], dict[str, DriverError]]:
    """The surveys of the old paths' switches that answered by the time the new path's
    did, or within ``SPARE_GRACE_S`` after: a failover waits for no dead switch. A switch
    that answered later is cleaned later (it is owed)."""
    if tasks:
        await asyncio.wait(list(tasks.values()), timeout=SPARE_GRACE_S)
    read: dict[str, Survey] = {}
    failed: dict[str, DriverError] = {}
    for name, task in tasks.items():
        if not task.done():
            failed[name] = DeviceTimeout(name, "no answer by the time the new path's devices did")
        elif isinstance(exc := task.exception(), DriverError):
            failed[name] = exc
        elif exc is not None:
            raise exc
        else:
            read[name] = task.result()
    return read, failed


async def recover(
    topo: Topology,
    drivers: Mapping[str, Driver],
    journal: Journaling,
    scope: frozenset[str] | None = None,
    records: list[Record] | None = None,
    *,
    executor: Callable[[Journaling], Executor] | None = None,
    space: CookieSpace = DEFAULT_SPACE,
) -> list[str]:
    """Finish every reroute of ``records`` (default: every one the journal shows running:
    its process died mid-plan): read the devices, put every flow back on its origin path,
    remove what the reroute left behind. Safe to repeat: an interrupted recovery leaves the
    record running for the next one. The caller holds the records' resources."""
    done = []
    for record in await offload(journal, journal.in_flight) if records is None else records:
        await restore(topo, drivers, journal, record, scope, executor=executor, space=space)
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
    space: CookieSpace = DEFAULT_SPACE,
    generation: Callable[[str], int] | None = None,
) -> None:
    """Recover one interrupted reroute (``recover``), level-triggered: from what the
    devices hold, never from step records. ``executor`` makes the executor of each restore
    plan (default: a plain one on ``drivers``). ``generation``: the fencing token of each
    device held (``Held.revision``): every device the recovery reads that elects a master
    is claimed with it first (``claim``), so that the deposed owner's last write lands
    before the read or is refused, never after it.

    **Forward** when a shift of the reroute landed (some flow's ingress is on its target
    path: ``moved_any``) and the target path needs no circuit that is not connected now:
    the intent is planned again from the devices (make what is missing, shift the rest,
    remove what the old paths left) and ends ``done``. **Back** otherwise, or when the
    forward plan fails: every flow to its origin (as recorded, or where the devices show
    it), what the reroute left removed, ``rolled_back``. The paths it may have touched:
    as its plan recorded them, or (etcd writes the plan with the finish only) every path
    within the devices it held."""
    touched = record.touched or _held_paths(topo, record)
    paths = [topo.paths[p] for p in (*touched, *record.origins) if p in topo.paths]
    crossed = {n for p in paths for n in _path_devices(p)} if paths else None
    if generation is not None:
        await claim(drivers, drivers if crossed is None else crossed, generation)
    tables = await read_tables(drivers, crossed, space=space)
    intent, now = record.intent, time.time()
    origins = dict(record.origins) or (
        found_on(topo, tables, intent.flows, touched, scope, space) if intent else {}
    )
    scratch = Journal(None)
    try:
        if intent is not None and await _forward_allowed(
            topo, drivers, tables, intent, scope, space
        ):
            ahead = {intent.to_path: intent.flows}
            plans = plan_restore(topo, tables, ahead, touched, now=now, scope=scope, space=space)
            failed = await _run_restore(drivers, record.id, plans, scratch, executor)
            if failed is None:
                await offload(
                    journal,
                    journal.finish,
                    record.id,
                    RerouteState.DONE,
                    "interrupted after its traffic moved: recovered forward from the devices, "
                    f"every flow on {intent.to_path}",
                )
                return
            log.warning("reroute %s: recovery forward failed (%s): back", record.id, failed)
            tables = await read_tables(drivers, crossed, space=space)
        plans = plan_restore(topo, tables, origins, touched, now=now, scope=scope, space=space)
        failed = await _run_restore(drivers, record.id, plans, scratch, executor)
        if failed is not None:
            error = f"recovery failed: {failed}"
            await offload(journal, journal.finish, record.id, RerouteState.FAILED, error)
            return
        await offload(
            journal,
            journal.finish,
            record.id,
            RerouteState.ROLLED_BACK,
            "interrupted: the applying process stopped mid-plan; recovered, every flow "
            "is back on its path",
        )
    finally:
        scratch.close()


async def _forward_allowed(
    topo: Topology,
    drivers: Mapping[str, Driver],
    tables: Tables,
    intent: Intent,
    scope: frozenset[str] | None,
    space: CookieSpace,
) -> bool:
    """A shift of ``intent`` landed, onto a path whose circuits are all connected now."""
    to = topo.paths.get(intent.to_path)
    if to is None or not moved_any(topo, tables, intent, scope, space):
        return False
    if not to.circuits:
        return True
    try:
        connected = await read_optics(drivers, {c.switch for c in to.circuits})
    except DriverError:
        return False
    return to.circuits <= connected


def _held_paths(topo: Topology, record: Record) -> tuple[str, ...]:
    """Every path whose switches are all within what ``record`` held (its target first):
    the paths it may have touched, when its plan was not recorded."""
    held = {device_of(k) for k in record.resources}
    every = EVERYTHING in record.resources
    names = [
        name for name, path in topo.paths.items() if every or {h.node for h in path.hops} <= held
    ]
    target = record.intent.to_path if record.intent else None
    return tuple(sorted(names, key=lambda n: n != target))


async def _run_restore(
    drivers: Mapping[str, Driver],
    reroute_id: str,
    plans: list[Plan],
    scratch: Journaling,
    executor: Callable[[Journaling], Executor] | None,
) -> str | None:
    """Run the restore plans in turn; the error of the first that did not end done."""
    for i, p in enumerate(plans):
        run = executor(scratch) if executor else Executor(drivers, scratch)
        outcome = await run.run(f"{reroute_id}-restore{i}", p)
        if outcome.state is not RerouteState.DONE:
            return outcome.error or str(outcome.state)
    return None


async def claim(
    drivers: Mapping[str, Driver], names: Iterable[str], generation: Callable[[str], int]
) -> None:
    """Claim each device of ``names`` that elects a master (``MasterElection``) with its
    ``generation`` (0: not held, not claimed), all at once; the first refusal is raised (a
    later generation took it: this owner is stale). A device without an election has no
    claim: its old owner's writes are held back by the locks' delay instead."""
    claims: list[Awaitable[None]] = []
    for name in names:
        driver, token = drivers.get(name), generation(name)
        if isinstance(driver, MasterElection) and token > 0:
            claims.append(driver.claim_master(token))
    await asyncio.gather(*claims)


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
    device_timeout_s: float = DEVICE_TIMEOUT_S  # one device read while planning (reach.py)
    space: CookieSpace = DEFAULT_SPACE  # the deployment's cookies (inventory cookie_tag)

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
            device_timeout_s=inv.device_timeout_s,
            space=inv.cookies,
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
            outrank=held.outrank if isinstance(held, Outranking) else None,
            claims=held if isinstance(held, KeepsClaims) else None,
        )

    async def state(self) -> tuple[Tables, frozenset[Circuit]]:
        """Our rules on every managed packet switch, and every managed optical circuit."""
        read = read_tables(self.drivers, space=self.space)
        tables, optics = await asyncio.gather(read, read_optics(self.drivers))
        return tables, optics

    async def plan(self, intent: Intent) -> Plan:
        """The plan on the devices' current state (a dry run: nothing changes)."""
        return await plan_on_devices(
            self.topo,
            self.drivers,
            intent,
            self.scope,
            timeout=self.device_timeout_s,
            space=self.space,
        )

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
        if the_plan.debt and outcome.state is RerouteState.DONE:
            self.journal.owe(the_plan.debt, reroute_id)
            outcome = replace(outcome, debt=the_plan.debt)
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
            self.topo, self.drivers, self.journal, self.scope, dead,
            executor=self.executor, space=self.space,
        )  # fmt: skip

    async def recover_one(self, record: Record, held: Held | None = None) -> None:
        """Recover one reroute that stopped mid-plan (the caller holds its resources:
        ``held``, whose revisions claim the devices that elect a master, before their
        tables are read: claim, then read)."""

        def executor(journal: Journaling) -> Executor:
            return self.executor(journal, held=held)

        await restore(
            self.topo, self.drivers, self.journal, record, self.scope,
            executor=executor, space=self.space,
            generation=None if held is None else held.revision,
        )  # fmt: skip

    async def dead(self) -> list[Record]:
        """The running reroutes whose owner died, oldest first."""
        running = await offload(self.journal, self.journal.in_flight)
        return [r for r in running if not await self.lock.alive(r.owner)]

    async def recover(self) -> list[str]:
        """Recover every reroute whose owner died, holding every device."""
        async with holding(self.lock, frozenset({EVERYTHING})):
            return await self._recover_dead()

    async def settle(self) -> dict[str, str]:
        """Remove the rules reroutes left on devices that did not answer (the journal's
        debts) from those that answer now: our transit rules of paths no ingress rule uses
        any more. Device -> what was done; a device still down, or whose paths' ingress
        switches do not answer, stays owed. A device is asked first without holding
        anything: one still hung holds no reroute back."""
        owed = [d for d in self.journal.debts() if d in self.managed]
        answering = [d for d in owed if await self._answers(d)]
        if not answering:
            return {}
        done: dict[str, str] = {}
        async with holding(self.lock, frozenset({EVERYTHING})):
            for device in answering:
                try:
                    done[device] = await self._settle(device)
                except DriverError as exc:
                    log.info("cleanup of %s still pending: %s", device, exc)
                    continue
                self.journal.paid(device)
                log.warning("%s: cleanup done: %s", device, done[device])
        return done

    async def _answers(self, device: str) -> bool:
        try:
            await read_tables(self.drivers, [device], self.device_timeout_s, space=self.space)
        except DriverError:
            return False
        return True

    async def _settle(self, device: str) -> str:
        timeout = self.device_timeout_s
        space = self.space
        tables = await read_tables(self.drivers, [device], timeout, space=space)
        tags = {t for r in tables.get(device, {}).values() if (t := tag_of(r, space)) is not None}
        names = list(self.topo.paths)
        paths = [self.topo.paths[names[t - 1]] for t in tags if 0 < t <= len(names)]
        ingress = {d.hops[0].node for p in paths for d in directions(p)} - {device}
        tables = {**tables, **await read_tables(self.drivers, ingress, timeout, space=space)}
        gc = gc_steps(self.topo, tables, sorted(tags), space=space)
        steps = [s for s in gc if s.device == device]
        if not steps:
            return "nothing left to remove"
        the_plan = Plan(
            intent=Intent(flows=(), to_path="", drain_s=0.0),
            from_paths=(),
            to_path="",
            disruption=Disruption.HITLESS,
            phases=laid_out(Order.CLEANUP, {PhaseName.CLEAN: steps}),
            planned_at=time.time(),
        )
        scratch = Journal(None)
        try:
            outcome = await self.executor(scratch).run(f"settle-{device}", the_plan)
        finally:
            scratch.close()
        if outcome.state is not RerouteState.DONE:
            raise DriverError(device, f"cleanup failed: {outcome.error}")
        removed = sum(len(s.changes) for s in steps)
        return f"removed {removed} rule(s) of paths no flow uses"

    async def resync(self) -> tuple[list[str], Outcome | None]:
        """Recover the interrupted reroutes, then write every flow's intended path where the
        switches differ (``resync``: after a switch lost its tables, a failed rollback)."""
        if self.scope is not None:
            raise ValueError("resync needs every switch (an engine without a scope)")
        async with holding(self.lock, frozenset({EVERYTHING})):
            recovered = await self._recover_dead()
            tables = await read_tables(self.drivers, space=self.space)
            outcome = await resync(self.topo, self.drivers, self.journal, tables, self.space)
            return recovered, outcome

    async def resync_device(self, name: str) -> Outcome | None:
        """Switch ``name`` back to the journal's intended rules (``resync.resync_device``:
        after it restarted with empty tables), holding that switch only, so others may be
        down meanwhile. A P4 target that lost its program gets it back first
        (``install_program``: it had no tables left to reset). None: nothing differed."""
        driver, space = self.drivers[name], self.space
        async with holding(self.lock, frozenset({name})):
            try:
                rules = await _flows(driver).read(cookie=space.base, cookie_mask=space.mask)
            except DeviceRejected as exc:
                install = getattr(driver, "install_program", None)
                if exc.code != "PIPELINE_MISMATCH" or install is None:
                    raise
                await install()
                rules = await _flows(driver).read(cookie=space.base, cookie_mask=space.mask)
            tables = tables_from({name: rules})
            return await resync_device(self.topo, self.drivers, self.journal, name, tables, space)
