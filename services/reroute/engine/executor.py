"""The executor: runs a plan through drivers, journaled, verified, rolled back on failure.

Each step gets a timeout. INSTALL/SHIFT/REMOVE apply the step's batch: as one atomic batch
where the driver declares ``atomic_batch``, else through ``guard`` (read back, and the
applied part undone when the batch fails), so every device's failed step leaves its table
as before; VERIFY reads the device back (only the rules under the step's
cookie) and requires every expected rule; DRAIN/WAIT sleep. Steps of a concurrent phase
run at once. Before a step touches a device its start is given to the journal (with how
the previous batch ended): SQLite commits it (a local write per batch boundary), etcd
keeps it until the reroute's checkpoint or finish (step records are for display:
recovery plans from the devices). On any
failure the executor waits for the steps in flight, then undoes every started step, newest
first (each step carries its inverse, computed by the planner), which returns every flow to
the path it had before. A journal that can no longer be written (its disk filled up) is
such a failure: the step whose start it cannot record is not run, and the undo is
journaled as far as it can be (the record stays ``running``, so recovery after a restart
restores the same origins). Recovery after a crash is the engine's (``engine.recover``).

**Under a lease** (replicas on etcd) a device that has no fencing of its own relies on
timing: a step must have ended before this replica's lease may end. Each step is capped at
the lock's ``step_s`` and starts only while the lease surely lives
``store.locks.lease_needed(step_s)`` more: checked before its write-ahead and **again
after it** (a write-ahead that goes to the store may take up to its deadline), just before
the device is touched. Writes that
go to the store (``create``, ``checkpoint``, ``finish``) run off the event loop where the
journal is networked (``journal.offload``). The margin beyond the cap (``store.locks.LEASE_MARGIN``)
covers what runs between the check and the device and between the cap's timeout and the
step's cancellation: the event loop's other work. A journal write of a run whose lease has
surely ended -- or was replaced by a new one: a new owner, ``EtcdLocks`` -- is not even
tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from drivers.base import (
    CrossConnectSwitch,
    FlowCounters,
    FlowProgrammer,
    FlowVerifier,
    MasterElection,
    PortCounters,
    PortEvents,
    PortListener,
    PortMonitor,
    PortState,
)
from drivers.contract import ClaimKept, GenerationSeen
from drivers.gcpause import gc_paused
from services.reroute.engine import guard
from services.reroute.engine.drain import quiet
from services.reroute.engine.guard import VerifyError
from services.reroute.errors import DeviceTimeout, DriverError, RerouteError
from services.reroute.model.topology import Circuit
from services.reroute.planning.plan import Plan, Step, StepKind
from services.reroute.planning.resources import EVERYTHING
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK
from services.reroute.store.journaling import Journaling, offload
from services.reroute.store.locks import KeepsClaims, lease_needed
from services.reroute.store.records import (
    Ended,
    JournalError,
    LeaseLost,
    RerouteState,
    StepState,
)

ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF
log = logging.getLogger("reroute.executor")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTiming:
    index: int
    description: str
    ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    reroute_id: str
    state: RerouteState
    timings: tuple[StepTiming, ...]
    total_ms: float
    error: str | None = None
    shifted_ms: float | None = None  # from start until the last shift step finished
    debt: tuple[str, ...] = ()  # devices whose cleanup waits until they answer (Plan.debt)

    def describe(self) -> str:
        """The outcome as lines: state, timings and the steps that ran."""
        lines = [f"reroute {self.reroute_id}: {self.state} in {self.total_ms:.1f} ms"]
        if self.shifted_ms is not None:
            lines.append(f"  traffic on the new path after {self.shifted_ms:.1f} ms")
        lines += [f"  {t.index:>3}. {t.ms:8.2f} ms  {t.description}" for t in self.timings]
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.debt:
            lines.append(
                f"  cleanup pending on {', '.join(self.debt)}: not answering; its rules of the "
                "old path are removed when it returns"
            )
        return "\n".join(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEvent:
    """Progress of one step, for subscribers (server-sent events, progress lines)."""

    reroute_id: str
    index: int  # 1-based
    total: int
    description: str
    state: StepState
    ms: float | None = None
    error: str | None = None
    kind: str = ""  # the step's ``StepKind`` (metrics: durations by kind, lock waits)


async def sleep_until(deadline: float) -> None:
    """Until the event loop's clock reads ``deadline``, to a few microseconds: asyncio's
    timers wake on whole milliseconds (epoll's timeout, rounded up), so a drain of 5 ms
    took 5-6; the last millisecond is waited for by yielding to the loop."""
    loop = asyncio.get_running_loop()
    while (left := deadline - loop.time()) > 0.001:
        await asyncio.sleep(left - 0.001)
    while loop.time() < deadline:
        await asyncio.sleep(0)


class LockTimeout(DeviceTimeout):
    """The new circuit's transceivers did not lock (its switch ports stayed down) in time."""


Driver = FlowProgrammer | CrossConnectSwitch
LOCK_POLL_S = 0.002  # how often the lock gate reads port state (devices without events)
LOCK_RECHECK_S = 0.05  # how often it reads port state anyway when it waits for events


class LockWatch:
    """The lock ports as seen since the circuits changed: a port of a packet switch counts
    as locked once it has been seen down since then and is up (a port the optical switch
    reads itself, by its power monitors, once it is up: ``Executor._reads_light``). A
    receiver still lit by the old circuit reads up until its switch notices the change
    (OVS tells tens of ms later on a busy machine), and an up read then is not the new
    circuit's light. ``eventful``: the changes come as events (listened to from before the
    circuits step), else only from reads."""

    def __init__(self, eventful: bool) -> None:
        self.eventful = eventful
        self.events: asyncio.Queue[tuple[str, int, PortState]] = asyncio.Queue()
        self.seen_down: set[tuple[str, int]] = set()
        self.count = 0  # events so far
        # each port's latest event: its number (``count`` then) and the state it reported
        self.latest: dict[tuple[str, int], tuple[int, PortState]] = {}

    def note(self, device: str, port: int, state: PortState) -> None:
        """A state read or reported now."""
        if state is not PortState.UP:
            self.seen_down.add((device, port))

    def listener(self, device: str) -> PortListener:
        """A ``PortListener`` of ``device`` feeding this watch."""

        def put(port: int, state: PortState) -> None:
            """Queue one port-state change of ``device`` (noted when it is taken off the
            queue, in order: ``take``, ``read``)."""
            self.count += 1
            self.latest[(device, port)] = (self.count, state)
            self.events.put_nowait((device, port, state))

        return put

    async def take(self) -> tuple[str, int, PortState]:
        """The next event, noted. Downs count only as they are taken, in the order the
        switch sent them: OVS reports a link going down as an "up" then a "down", both
        handed on at once, and a "down" noted at once beside a state still "up" would
        open the gate on a dark circuit (stop 49)."""
        device, port, state = await self.events.get()
        self.note(device, port, state)
        return device, port, state

    def read(self, asked: int, states: dict[tuple[str, int], PortState]) -> None:
        """Take a read asked for when ``count`` was ``asked``: the events queued so far
        are noted (a down among them was since the circuits changed), and a port with an
        event since ``asked`` is as its latest event says, not as the read does (the switch
        may have answered before the change it then reported, and the reply been looked
        at after the event: a stale "up" after a seen "down" would open the gate on a
        dark circuit); the rest is as read, and noted."""
        while not self.events.empty():
            self.note(*self.events.get_nowait())
        for key, state in states.items():
            n, reported = self.latest.get(key, (0, state))
            states[key] = reported if n > asked else state
            self.note(*key, states[key])


def _read_ahead(plan: Plan) -> dict[int, tuple[Step, ...]]:
    """id(drain) -> the circuits steps that come right after it (nothing of this run
    touches those optical switches between them)."""
    ahead: dict[int, tuple[Step, ...]] = {}
    steps = plan.steps()
    for i, drain in enumerate(steps):
        if drain.kind is StepKind.DRAIN:
            after = itertools.takewhile(lambda s: s.kind is StepKind.CIRCUITS, steps[i + 1 :])
            if circuits := tuple(after):
                ahead[id(drain)] = circuits
    return ahead


def _lock_ports(plan: Plan) -> tuple[tuple[str, int], ...]:
    """Every port the plan's lock gates wait for."""
    return tuple(p for s in plan.steps() if s.kind is StepKind.AWAIT_LOCK for p in s.ports)


def _not_locked(
    step: Step, ports: list[tuple[str, int]], known: dict[tuple[str, int], PortState]
) -> str:
    down = " ".join(f"{d}:p{p}" for d, p in ports if known.get((d, p)) is not PortState.UP)
    stale = " ".join(f"{d}:p{p}" for d, p in ports if known.get((d, p)) is PortState.UP)
    text = f"new circuit not locked after {step.duration_s * 1000:.0f} ms:"
    text += f" {down} still down" if down else ""
    text += f"{';' if down else ''} {stale} never went down (still the old light)" if stale else ""
    return text


def _stands(claims: KeepsClaims, device: str, driver: object) -> bool:
    """Whether ``device``'s earlier claim by this owner stands: no other owner held it
    since (``claims``) and its driver is still its master (``ClaimKept``)."""
    return (
        isinstance(driver, ClaimKept)
        and claims.sole(device)
        and driver.master_generation() is not None
    )


class Executor:
    def __init__(
        self,
        drivers: Mapping[str, Driver],
        journal: Journaling,
        *,
        step_timeout: float = 10.0,
        clock: Callable[[], float] = time.perf_counter,
        on_event: Callable[[StepEvent], None] | None = None,
        lock_events: bool = True,
        lease: Callable[[], float] | None = None,
        lease_step_s: float = 0.0,
        generation: Callable[[str], int] | None = None,
        outrank: Callable[[str, int], Awaitable[int | None]] | None = None,
        claims: KeepsClaims | None = None,
    ) -> None:
        self.drivers = drivers
        # the generation a device is claimed with before this run first writes to it
        # (``MasterElection``: the revision of its lock in etcd); 0 or None: not claimed
        self.generation = generation
        # raises that generation above what a device saw, while the lock is still ours
        # (``locks.Outranking``); None: a refused claim stands
        self.outrank = outrank
        # whether an earlier claim of a device still stands (etcd: no other owner held it
        # since): its driver, still master, is not claimed again; None: always claimed
        self.claims = claims
        self._claimed: set[str] = set()
        # seconds this replica's lease surely lives (etcd): a step starts only with at
        # least ``lease_needed(lease_step_s)`` left, and times out after ``lease_step_s``
        self.lease = lease
        self.lease_step_s = lease_step_s
        self.lease_need = lease_needed(lease_step_s)
        if lease is not None:
            step_timeout = min(step_timeout, lease_step_s)
        self.lock_events = lock_events  # False: poll port state even where events come
        self.journal = journal
        self.step_timeout = step_timeout
        self.clock = clock
        self.on_event = on_event
        self._total = 0
        self._stack: contextlib.AsyncExitStack | None = None  # of one run
        self._watch: LockWatch | None = None  # lock ports, from the circuits step on
        self._watching: asyncio.Future[LockWatch] | None = None  # asked for at the run's start
        self._shifted_at: float | None = None  # loop time at the end of the last shift
        # an optical switch's connections read during the drain before its circuits step
        # (the guard's undo point, read while nothing of this run changes the switch)
        self._prefetch: dict[int, tuple[str, asyncio.Future[dict[int, int]]]] = {}
        self._read_ahead: dict[int, tuple[Step, ...]] = {}  # id(drain) -> circuits after it

    async def run(
        self,
        reroute_id: str,
        plan: Plan,
        *,
        owner: str | None = None,
        resources: frozenset[str] = frozenset({EVERYTHING}),
    ) -> Outcome:
        """Execute ``plan`` step by step (garbage collection paused); roll back on failure.
        The journal records ``owner`` running it, holding ``resources``."""
        with gc_paused():
            async with contextlib.AsyncExitStack() as stack:
                self._stack = stack
                # the lock ports' events asked for while the first steps run, not on the
                # way to the circuits step (a round trip or two per switch)
                self._watching = (
                    asyncio.ensure_future(self._watch_ports(_lock_ports(plan), stack))
                    if any(s.kind is StepKind.CIRCUITS for s in plan.steps())
                    else None
                )
                self._read_ahead = _read_ahead(plan)
                try:
                    return await self._run(reroute_id, plan, owner, resources)
                finally:
                    for _, read in self._prefetch.values():
                        read.cancel()
                    self._prefetch, self._read_ahead = {}, {}
                    if self._watching is not None and not self._watching.done():
                        self._watching.cancel()
                    if self._watching is not None:
                        with contextlib.suppress(BaseException):
                            await self._watching  # entered into ``stack`` or not at all
                    self._stack = self._watch = self._watching = None
                    self._shifted_at = None

    async def _run(
        self, reroute_id: str, plan: Plan, owner: str | None, resources: frozenset[str]
    ) -> Outcome:
        started = self.clock()  # the write-ahead record counts: 0.3 s for 100,000 flows
        await offload(
            self.journal, self.journal.create, reroute_id, plan, owner=owner, resources=resources
        )
        steps = plan.steps()
        self._total = len(steps)
        timings: list[StepTiming] = []
        shifted: float | None = None
        first = 0
        checkpoint = 0  # steps before this index are never undone (a checkpoint passed)
        rest = ""
        error: RerouteError | None = None
        ended: Ended = ()  # how the last batch ended: written with the next write
        for phase in plan.phases:
            batches = [phase.steps] if phase.concurrent else [(s,) for s in phase.steps]
            for batch in batches:
                index = range(first, first + len(batch))
                # every start journaled (one write, with the previous batch's end) before
                # any step of the batch runs; the lease checked before and after it
                error = (
                    self._leased()
                    or self._write(self.journal.steps_started, reroute_id, index, ended)
                    or self._leased()
                )
                if isinstance(error, LeaseLost):
                    return self._abandoned(reroute_id, error, timings, started)
                if error is not None:
                    break  # not run, nothing of this batch to undo
                first += len(batch)
                if self._watch is None and any(s.kind is StepKind.CIRCUITS for s in batch):
                    self._watch = await self._watched(plan)
                error, ended = await self._run_batch(reroute_id, batch, index, timings)
                if error is not None:
                    break
                if any(s.kind is StepKind.SHIFT for s in batch):
                    self._shifted_at = asyncio.get_running_loop().time()
                    shifted = (self.clock() - started) * 1000
                elif any(s.kind is not StepKind.VERIFY for s in batch):
                    self._shifted_at = None  # a drain counts from a shift only right after it
            if error is None and phase.rest:
                error = await self._awrite(self.journal.checkpoint, reroute_id, phase.rest, ended)
                if error is None:
                    ended = ()
                    checkpoint = first
                    rest = ", ".join(f"{len(f)} flow(s) on {p}" for p, f in phase.rest)
            if error is not None:
                break
        else:
            error = await self._awrite(
                self.journal.finish, reroute_id, RerouteState.DONE, None, ended
            )
            if error is None:
                return Outcome(
                    reroute_id=reroute_id,
                    state=RerouteState.DONE,
                    timings=tuple(timings),
                    total_ms=(self.clock() - started) * 1000,
                    shifted_ms=shifted,
                )
        if ended:  # the steps' ends, before their undo (best effort, as the undo's records)
            self._write(self.journal.steps_ended, reroute_id, ended)
        undo = list(range(checkpoint, first))
        state, story = await self.rollback(
            reroute_id, steps, undo, error, rest, undo_drain_s=plan.undo_drain_s
        )
        return Outcome(
            reroute_id=reroute_id,
            state=state,
            timings=tuple(timings),
            total_ms=(self.clock() - started) * 1000,
            error=story,
        )

    async def _watched(self, plan: Plan) -> LockWatch:
        """The lock ports' watch, from the circuits step on: what the run asked for at its
        start, with what was seen before now forgotten (a port counts as locked once seen
        down since the circuits changed, ``LockWatch``)."""
        watching, self._watching = self._watching, None
        if watching is None:
            return await self._watch_ports(_lock_ports(plan), self._stack)
        watch = await watching
        watch.seen_down.clear()
        while not watch.events.empty():
            watch.events.get_nowait()
        return watch

    def _leased(self) -> LeaseLost | None:
        """LeaseLost when this replica's lease may end before a step starting now has
        ended (its cap and the margin: module docstring)."""
        if self.lease is None or self.lease() >= self.lease_need:
            return None
        return LeaseLost(
            f"this replica's lease in etcd has under {self.lease_need:g} s left: no step "
            "starts; another replica, or this one as a new owner, recovers the reroute"
        )

    def _abandoned(
        self, reroute_id: str, error: LeaseLost, timings: list[StepTiming], started: float
    ) -> Outcome:
        """Stop without touching a device again (no undo): the lease is gone, another
        replica recovers the reroute from the journal (it stays ``running`` there)."""
        log.error("reroute %s: %s", reroute_id, error)
        return Outcome(
            reroute_id=reroute_id,
            state=RerouteState.RUNNING,
            timings=tuple(timings),
            total_ms=(self.clock() - started) * 1000,
            error=str(error),
        )

    def _write(self, record: Callable[..., None], *args: object) -> JournalError | None:
        """A journal write during the run; its JournalError (the file cannot be written any
        more, e.g. its disk filled up) is returned: the reroute stops and rolls back. Not
        tried once the run's lease has surely ended or was replaced (LeaseLost): the write
        would be refused, or would be another owner's. For what the journal keeps in
        memory until its next write (etcd's step records) or writes locally (SQLite)."""
        if lost := self._ended_lease():
            return lost
        try:
            record(*args)
        except JournalError as exc:
            log.error("%s", exc)
            return exc
        return None

    async def _awrite(self, record: Callable[..., None], *args: object) -> JournalError | None:
        """``_write`` of a write that goes to the store (off the event loop where the
        store is networked: ``journal.offload``)."""
        if lost := self._ended_lease():
            return lost
        try:
            await offload(self.journal, record, *args)
        except JournalError as exc:
            log.error("%s", exc)
            return exc
        return None

    def _ended_lease(self) -> LeaseLost | None:
        if self.lease is not None and not self.lease() > 0:
            return LeaseLost(
                "this replica's lease in etcd ended: nothing more is written about this "
                "reroute here; another replica recovers it"
            )
        return None

    async def _run_batch(
        self, reroute_id: str, batch: tuple[Step, ...], index: range, timings: list[StepTiming]
    ) -> tuple[RerouteError | None, Ended]:
        """Run steps at once (their starts journaled by the caller); the first error, after
        all have finished, and how each ended (the caller journals it with its next
        write)."""
        for i, step in zip(index, batch, strict=True):
            self._emit(reroute_id, i, step, StepState.STARTED)
        results = await asyncio.gather(
            *(self._timed(step) for step in batch), return_exceptions=True
        )
        failed: RerouteError | None = None
        ended: list[tuple[int, StepState, str | None]] = []
        for i, step, result in zip(index, batch, results, strict=True):
            if isinstance(result, RerouteError):
                ended.append((i, StepState.FAILED, str(result)))
                log.warning("step %d (%s) failed: %s", i + 1, step.describe(), result)
                failed = failed or result
            elif isinstance(result, BaseException):
                raise result
            else:
                ended.append((i, StepState.DONE, None))
        for (i, state, text), step, result in zip(ended, batch, results, strict=True):
            if state is StepState.FAILED:
                self._emit(reroute_id, i, step, state, error=text)
            else:
                assert isinstance(result, float)
                self._emit(reroute_id, i, step, state, ms=result)
                timings.append(StepTiming(index=i + 1, description=step.describe(), ms=result))
        return failed, ended

    def _emit(
        self,
        reroute_id: str,
        i: int,
        step: Step,
        state: StepState,
        *,
        ms: float | None = None,
        error: str | None = None,
    ) -> None:
        if self.on_event is not None:
            self.on_event(
                StepEvent(
                    reroute_id=reroute_id,
                    index=i + 1,
                    total=self._total,
                    description=step.describe(),
                    state=state,
                    ms=ms,
                    error=error,
                    kind=step.kind.value,
                )
            )

    async def _timed(self, step: Step) -> float:
        t0 = self.clock()
        await self._run_step(step)
        return (self.clock() - t0) * 1000

    async def _run_step(self, step: Step) -> None:
        if step.kind in (StepKind.DRAIN, StepKind.WAIT):
            # a drain right after a shift counts from the shift's end (what was in flight on
            # the old path when the shift took effect); the shift's VERIFY ran meanwhile
            since = self._shifted_at if step.kind is StepKind.DRAIN else None
            for circuits in self._read_ahead.get(id(step), ()):
                self._read_before(circuits)
            start = since or asyncio.get_running_loop().time()
            settled = await self._quiet(step, start)  # ``start`` where nothing is watched
            await sleep_until(settled + step.duration_s)
            return
        if step.kind is StepKind.AWAIT_LOCK:
            await self._await_lock(step)
            return
        try:
            async with asyncio.timeout(self.step_timeout):
                await self._device_step(step)
        except TimeoutError as exc:
            raise DeviceTimeout(
                step.device, f"{step.kind} took over {self.step_timeout} s"
            ) from exc

    async def _quiet(self, drain: Step, start: float) -> float:
        """When ``drain``'s margin may start counting (``drain.quiet``: the shift's rules
        counted, the old circuits' feeders quiet), read from the devices that count."""
        ports: dict[str, PortCounters] = {}
        flows: dict[str, FlowCounters] = {}
        for device, _ in drain.ports:
            if isinstance(driver := self.drivers.get(device), PortCounters):
                ports[device] = driver
        for device, _ in drain.seen_on:
            if isinstance(driver := self.drivers.get(device), FlowCounters):
                flows[device] = driver
        return await quiet(drain, start, ports, flows)

    async def _claim(self, device: str) -> None:
        """Claim ``device`` as its master (once per run) where it elects one. Refused as
        stale while the lock is still ours (``Outranking``: a hold in etcd), the device saw
        a generation above our token (a clock behind, etcd restored): the hold raises the
        token above what the device reports and the claim is made again; a hold superseded
        meanwhile raises nothing and the refusal stands."""
        if self.generation is None or device in self._claimed:
            return
        driver = self.drivers.get(device)
        generation = self.generation(device)
        if isinstance(driver, MasterElection) and generation > 0:
            if self.claims is not None and _stands(self.claims, device, driver):
                self.claims.claimed(device, kept=True)
                self._claimed.add(device)
                return
            try:
                await driver.claim_master(generation)
            except DriverError:
                if self.outrank is None or not isinstance(driver, GenerationSeen):
                    raise
                seen = await driver.generation_seen()
                above = await self.outrank(device, seen) if seen >= generation else None
                if above is None:
                    raise
                await driver.claim_master(above)
            if self.claims is not None:
                self.claims.claimed(device, kept=False)
        self._claimed.add(device)

    async def _device_step(self, step: Step) -> None:
        await self._claim(step.device)
        if step.kind is StepKind.CIRCUITS:
            await self._circuits(step.device, step.disconnect, step.connect)
        elif step.kind is StepKind.VERIFY:
            await self._verify(self._programmer(step.device), step)
        else:
            await guard.apply(self._programmer(step.device), step.changes)

    def _driver(self, name: str) -> object:
        driver = self.drivers.get(name)
        if driver is None:
            raise DriverError(name, "has no driver here (not in the inventory or the scope)")
        return driver

    def _programmer(self, name: str) -> FlowProgrammer:
        driver = self._driver(name)
        if not isinstance(driver, FlowProgrammer):
            raise DriverError(name, "is not a packet switch (no flow programming)")
        return driver

    async def _circuits(
        self, name: str, remove: tuple[Circuit, ...], add: tuple[Circuit, ...]
    ) -> None:
        before = None
        for key, (device, read) in list(self._prefetch.items()):
            if device == name:
                del self._prefetch[key]
                with contextlib.suppress(Exception):  # read again by the guard
                    before = await read
        await guard.circuits(self._optical(name), remove, add, before=before)

    def _read_before(self, step: Step) -> None:
        """Read the connections of ``step``'s optical switch now (during the drain before
        it) for the guard's undo point, where the guard would read them (not atomic)."""
        driver = self.drivers.get(step.device)
        if isinstance(driver, CrossConnectSwitch) and not driver.capabilities.atomic_batch:
            read = asyncio.ensure_future(driver.connections())
            read.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved
            self._prefetch[id(step)] = (step.device, read)

    def _optical(self, name: str) -> CrossConnectSwitch:
        driver = self._driver(name)
        if not isinstance(driver, CrossConnectSwitch):
            raise DriverError(name, "is not an optical switch (no cross-connects)")
        return driver

    async def _await_lock(self, step: Step) -> None:
        """Until every port of ``step`` is locked (``LockWatch``); LockTimeout after
        ``duration_s``.

        Where every device reports port changes (``PortEvents``: OpenFlow PORT_STATUS) they
        are listened to from before the circuits change; the gate reads the states once,
        then waits for the events (re-reading every ``LOCK_RECHECK_S`` in case one is lost);
        otherwise it polls every ``LOCK_POLL_S``."""
        devices = sorted({d for d, _ in step.ports})
        deadline = self.clock() + step.duration_s
        async with contextlib.AsyncExitStack() as stack:
            watch = self._watch or await self._watch_ports(step.ports, stack)
            while True:
                asked = watch.count
                states = await asyncio.gather(*(self._monitor(d).port_states() for d in devices))
                known = {
                    (d, p): s for d, ps in zip(devices, states, strict=True) for p, s in ps.items()
                }
                watch.read(asked, known)
                if await self._until_up(step, known, watch, deadline):
                    return

    async def _watch_ports(
        self, ports: tuple[tuple[str, int], ...], stack: contextlib.AsyncExitStack | None
    ) -> LockWatch:
        """A watch of ``ports``: listening to their devices' events (until ``stack`` closes)
        where every one of them sends events."""
        devices = sorted({d for d, _ in ports})
        eventful = self.lock_events and all(
            isinstance(self.drivers.get(d), PortEvents) for d in devices
        )
        watch = LockWatch(eventful and stack is not None)
        if watch.eventful and stack is not None:
            for d in devices:
                await stack.enter_async_context(self._events(d).port_events(watch.listener(d)))
        return watch

    async def _until_up(
        self,
        step: Step,
        known: dict[tuple[str, int], PortState],
        watch: LockWatch,
        deadline: float,
    ) -> bool:
        """True once every port is locked, updating ``known`` from events; False: read
        again."""
        recheck = self.clock() + (LOCK_RECHECK_S if watch.eventful else LOCK_POLL_S)
        while True:
            down = [
                (d, p)
                for d, p in step.ports
                if known.get((d, p)) is not PortState.UP
                or ((d, p) not in watch.seen_down and not self._reads_light(d))
            ]
            if not down:
                return True
            now = self.clock()
            if now >= deadline:
                raise LockTimeout(step.device, _not_locked(step, down, known))
            if now >= recheck:
                return False
            try:
                async with asyncio.timeout(min(recheck, deadline) - now):
                    d, port, state = await watch.take()
            except TimeoutError:
                continue
            known[(d, port)] = state

    def _reads_light(self, name: str) -> bool:
        """``name`` is the optical switch itself, its port state its own power monitors: a
        read after the circuits step (which returns once the switch is set) is the new
        circuit's light, not a stale report of the old one (``LockWatch``)."""
        return isinstance(self.drivers.get(name), CrossConnectSwitch)

    def _events(self, name: str) -> PortEvents:
        driver = self.drivers[name]
        assert isinstance(driver, PortEvents)
        return driver

    def _monitor(self, name: str) -> PortMonitor:
        driver = self._driver(name)
        if not isinstance(driver, PortMonitor):
            raise DriverError(name, "cannot report port state")
        return driver

    async def _verify(self, driver: FlowProgrammer, step: Step) -> None:
        cookies = {r.cookie for r in step.expect}
        if len(cookies) == 1:  # read back only this step's rules: (path tag, role) is exact
            cookie, mask = cookies.pop(), ALL_BITS
        else:  # the step's owner (its deployment's cookie space: rules.CookieSpace)
            cookie, mask = next(iter(cookies), COOKIE_BASE) & COOKIE_MASK, COOKIE_MASK
        if isinstance(driver, FlowVerifier):  # compares encoded entries: no decoding
            missing = await driver.missing(step.expect, cookie, mask)
        else:
            have = set(await driver.read(cookie=cookie, cookie_mask=mask))
            missing = [r for r in step.expect if r not in have]
        if missing:
            raise VerifyError(step.device, f"{len(missing)} rule(s) missing, e.g. {missing[0]}")

    async def rollback(
        self,
        reroute_id: str,
        steps: list[Step],
        started: list[int],
        cause: Exception,
        rest: str = "",
        *,
        undo_drain_s: float = 0.0,
    ) -> tuple[RerouteState, str]:
        """Undo the started steps, newest first. Returns the final state and the story.
        Journaling the undo is best effort: a journal that cannot be written (the cause,
        perhaps) does not stop it; recovery restores the same origins.

        Once a shift is undone the traffic is back on its old path, but what was already
        sent on the new one is still in flight: ``undo_drain_s`` passes before an earlier
        step is undone (the new path's make removed), as a forward plan drains a path
        before it removes it."""
        shifted_back = False
        for i in reversed(started):
            if lost := self._leased():
                log.error("reroute %s: rollback stopped: %s", reroute_id, lost)
                return RerouteState.RUNNING, f"{cause}; rollback stopped: {lost}"
            step = steps[i]
            if shifted_back and step.kind is not StepKind.SHIFT:
                await asyncio.sleep(undo_drain_s)
                shifted_back = False
            shifted_back = shifted_back or step.kind is StepKind.SHIFT
            try:
                async with asyncio.timeout(self.step_timeout):
                    await self._undo(step)
            except (RerouteError, TimeoutError) as exc:
                why = str(exc)
                if isinstance(exc, TimeoutError):  # says nothing by itself
                    why = f"{step.device}: undoing {step.kind} took over {self.step_timeout} s"
                error = f"{cause}; rollback of step {i + 1} failed too: {why}"
                await self._awrite(self.journal.finish, reroute_id, RerouteState.FAILED, error)
                return RerouteState.FAILED, error
            self._write(self.journal.step, reroute_id, i, StepState.UNDONE)
            self._emit(reroute_id, i, step, StepState.UNDONE)
        where = f"to the checkpoint ({rest})" if rest else "every flow is on its previous path"
        error = f"{cause} (rolled back: {where})"
        await self._awrite(self.journal.finish, reroute_id, RerouteState.ROLLED_BACK, error)
        return RerouteState.ROLLED_BACK, error

    async def _undo(self, step: Step) -> None:
        await self._claim(step.device)
        if step.kind is StepKind.CIRCUITS:
            await guard.undo_circuits(self._optical(step.device), step.disconnect, step.connect)
        elif step.undo:
            await guard.apply(self._programmer(step.device), step.undo)
