"""``RerouteService``: what the HTTP routes call. Admission, idempotency, views, drain.

Admission of a reroute (``submit``), under one lock so two requests never race:

1. the target (and ``via``) path must exist: else 422, nothing recorded;
2. an ``Idempotency-Key`` seen before returns that reroute (same request) or is refused
   with 409 (a different request under the same key). The key and the queue are read in
   one read (``Journaling.look``), none when there is no key and the scheduler knows
   it is busy; a key used between that read and the journaling (the journal refuses it)
   is read again and answered the same way;
3. it is journaled ``pending`` with the resources it is expected to hold and queued for
   the scheduler (``scheduler.py``): while other reroutes run or wait, or while other
   replicas stand (one may queue a reroute at this moment), or while another admission is
   under way here (its read of the queue may be in flight: on etcd two requests that came
   together would otherwise both find nothing and both hold every device, one after the
   other), those come from a plan on the devices now; when nothing runs it is planned
   alone (no extra read). A reroute queued here since the queue was read counts as well;
4. when nothing was running or queued, the answer waits until the scheduler has planned it
   (up to ``JUDGE_S``): it reads the devices' tables holding the devices and plans on
   them -- exactly the tables it runs on, read once -- and either runs the plan or, when
   the planner refuses it (an unknown flow, flows already on the path), ends it
   ``rejected`` with the planner's message and nothing changed. Behind overlapping
   reroutes it cannot be judged yet: it is planned when its turn comes.

Device state (``devicestate.DeviceTracker``, started with ``watch_devices``): every device
probed within its timeout, ``/healthz`` and ``/v1/health`` answer from what it found;
``degraded`` while any device is not up, or while this replica holds no lease in etcd (cut
off from etcd, or paused past its TTL: it starts nothing; ``reason`` says since when, the
gauge ``reroute_lease_lost_seconds`` counts it). Every transition is an event (``device``)
and a line of the operator's log; a device found ``out_of_sync`` or ``no_pipeline`` is resynced
at once when the settings say ``auto_resync`` (``Engine.resync_device``: that device
alone, its program put back, our rules written from the journal), announced as ``resync``
events.

One condition, one answer: a well-formed request the planner refuses is always a created
reroute in state ``rejected`` (201 when judged at once or waited for, 202 while queued,
then ``rejected`` at its turn), never a 422 in one timing and a record in the other. 422
is only for requests that are malformed whatever the devices hold (a field, a path name).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import ParamSpec, Protocol, TypeVar

from prometheus_client import Gauge

from drivers.base import CrossConnectSwitch, FlowRule
from services.reroute.devicestate import DeviceStatus, DeviceTracker, State, Transition
from services.reroute.engine.engine import Engine, read_optics, read_some
from services.reroute.engine.resync import intended, wanted
from services.reroute.errors import ApiError, DriverError, PlanError, RerouteError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.planning import no_lock_to_wait
from services.reroute.planning.plan import Plan
from services.reroute.planning.resources import EVERYTHING, Keys
from services.reroute.rules import path_tag
from services.reroute.service.config import Settings
from services.reroute.service.events import EventBus
from services.reroute.service.metrics import Metrics
from services.reroute.service.oplog import lifecycle_log
from services.reroute.service.scheduler import Scheduler
from services.reroute.service.schemas import (
    DeviceHealth,
    DevicesHealth,
    FlowsView,
    Health,
    OpticsView,
    RerouteRequest,
    RerouteView,
)
from services.reroute.service.views import flows_view, optics_view, plan_view, reroute_view
from services.reroute.store.journaling import Journaling, offload
from services.reroute.store.records import JournalError, Record, RerouteState
from services.reroute.tables import RuleKey

_P = ParamSpec("_P")
_T = TypeVar("_T")
log = logging.getLogger("reroute.service")
SETTLE_S = 2.0  # how often the reconciler looks for devices back whose cleanup is owed
JUDGE_S = 2.0  # how long an admission waits for the idle scheduler's plan before answering
NEEDS_RESYNC = frozenset({State.OUT_OF_SYNC, State.NO_PIPELINE})


class Mastering(Protocol):
    """Device ownership as the health and metrics show it (``etcd.terms.Terms``)."""

    def held(self) -> list[str]:
        """The groups this replica masters."""
        ...

    def owners(self) -> dict[str, str]:
        """Each device in a group -> its master ("": none now)."""
        ...


class FieldError(PlanError):
    """A plan error caused by one field of the request (``loc``, as in FastAPI's 422s)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        super().__init__(message)


class RerouteService:
    def __init__(self, settings: Settings, engine: Engine, journal: Journaling) -> None:
        self.settings = settings
        self.engine = engine
        self.journal = journal
        self.draining = False
        self.bus = EventBus()
        self.metrics = Metrics(self._queue_length, lambda: self.scheduler.running)
        self._queue_seen = 0  # the queue's length when the journal was last read
        self.scheduler = Scheduler(engine, journal, self.bus, self.metrics, settings.retention)
        lost = Gauge(
            "reroute_lease_lost_seconds",
            "Seconds this replica has held no lease in etcd (0: it holds one, or needs none)",
            registry=self.metrics.registry,
        )
        lost.set_function(self._lease_lost_s)
        self._admission = asyncio.Lock()
        self._admitted = 0  # reroutes queued here
        self._admitting = 0  # admissions under way here (``submit``)
        self._stopping: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        self._stop_reconciling = asyncio.Event()
        self.devices = self._tracker()
        self.metrics.watch_devices(
            lambda: [(d.name, d.state.value) for d in self.devices.statuses()],
            [s.value for s in State],
            able=lambda: not self.draining and not self._lease_lost_s(),
        )
        self.metrics.replica(lambda: self.engine.lock.owner)
        if isinstance(claims := getattr(engine.lock, "claims", None), dict):
            self.metrics.claims(claims)
        self._terms: Mastering | None = getattr(engine.lock, "terms", None)
        if self._terms is not None:
            self.metrics.mastering(self._terms.held, self._terms.owners)
        self._resyncing: set[str] = set()

    async def start(self) -> list[str]:
        """Recover reroutes a crash interrupted, queue the pending ones, start scheduling."""
        shared = self.engine.lock.lease_left() is not None  # replicas: taken over as they come
        recovered = [] if shared else await self.engine.recover()
        for reroute_id in recovered:
            record = self._record(reroute_id)
            strategy = record.intent.strategy.value if record.intent else "unknown"
            self.metrics.finished(record.state, strategy=strategy)
            log.warning("interrupted reroute %s: %s (%s)", record.id, record.state, record.error)
        pending = self.journal.pending()
        if pending:
            log.warning("%d pending reroute(s) queued again", len(pending))
        self.scheduler.prune()
        try:
            await self.warm_up()
        except DriverError as exc:  # serve all the same: the pages say what cannot be read
            log.warning("warm-up: %s", exc)
        self.scheduler.start()
        self._reconciler = asyncio.create_task(self._reconcile(), name="reroute-reconciler")
        return recovered

    async def _reconcile(self) -> None:
        """Every ``SETTLE_S``: the cleanup owed on devices that did not answer, done once
        they answer (``Engine.settle``), announced as ``cleanup`` events."""
        while not self.draining:
            try:  # a cleanup under way is finished, never cut: only this wait is
                await asyncio.wait_for(self._stop_reconciling.wait(), SETTLE_S)
                return
            except TimeoutError:
                pass
            if self.draining or not await self.io(self.journal.debts):
                continue
            try:
                done = await self.engine.settle()
            except RerouteError as exc:  # the store or a lock: tried again next time
                log.warning("reconciler: %s", exc)
                continue
            for device, what in done.items():
                self.bus.publish("cleanup", {"device": device, "done": what})

    async def warm_up(self) -> None:
        """Run the request path once before serving, changing nothing: read the tables (the
        drivers' first reads), dry-run a move of a flow found on them (the request and view
        models, the planner) and read the journal. A reroute is then not the first request
        (it was ~25 ms slower: first calls, first reads)."""
        view = await self.flows()
        self.history(state=None, flow=None, limit=1)
        found = next(((p.path, p.flows[0]) for p in view.paths if p.flows), None)
        others = [p.path for p in view.paths if found is None or p.path != found[0]]
        if found is None or not others:
            return
        body = {"flows": [found[1]], "to_path": others[0], "dry_run": True}
        try:
            plan_view(await self.dry_run(RerouteRequest.model_validate(body))).model_dump_json()
        except PlanError as exc:  # the code ran all the same
            log.debug("warm-up dry run: %s", exc)

    async def submit(self, request: RerouteRequest, key: str | None) -> tuple[str, bool]:
        """The id of the reroute of ``request`` and whether it is new (see the module
        docstring); the caller reads what it shows (no read here that it would repeat)."""
        self._accepting()
        intent = self._intent(request)
        check_paths(self.engine, intent)
        self._admitting += 1
        try:
            return await self._admit(request, intent, key)
        finally:
            self._admitting -= 1

    async def _admit(
        self, request: RerouteRequest, intent: Intent, key: str | None
    ) -> tuple[str, bool]:
        admitted = self._admitted
        # another admission under way here may be queueing a reroute right now, unseen by
        # the read below (a networked journal's read leaves the loop): plan this one
        busy = self.scheduler.busy or self._admitting > 1
        if key is not None or not busy:  # the queue and the key: one read per request
            active, old = await self.io(self.journal.look, key)
            if old is not None:
                return self._same(old, key, request).id, False
            busy |= active
        keys = await self._expected(intent, busy)
        async with self._admission:
            # idle: nothing was queued or running, and nothing was queued here since
            idle = not busy and admitted == self._admitted and not self.scheduler.running
            reroute_id = uuid.uuid4().hex[:12]
            try:
                await self.io(
                    self.journal.enqueue,
                    reroute_id,
                    intent,
                    idem_key=key,
                    fingerprint=request.fingerprint(),
                    resources=keys,
                )
            except JournalError:  # its key was used since it was read: that reroute
                old = await self.io(self.journal.by_key, key) if key is not None else None
                if old is None:
                    raise
                return self._same(old, key, request).id, False
            self._admitted += 1
            self.scheduler.enqueue(reroute_id)
        self.bus.publish("reroute", {"reroute_id": reroute_id, "state": "pending"})
        if idle:
            await self.scheduler.judged(reroute_id, JUDGE_S)
        return reroute_id, True

    async def _expected(self, intent: Intent, busy: bool) -> Keys:
        """What the reroute is expected to hold: planned on the devices now while others
        run or wait (so disjoint ones run at once); else ``EVERYTHING`` (planned alone)."""
        if not busy:
            return frozenset({EVERYTHING})
        try:
            return await self.engine.expected(intent)
        except DriverError as exc:  # it is read again when it runs
            log.warning("planning ahead: %s", exc)
            return frozenset({EVERYTHING})

    async def io(self, call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``call`` off the event loop when the journal is networked (etcd: a replica cut
        off from it keeps answering, renewing and cancelling; ``journal.offload``)."""
        return await offload(self.journal, call, *args, **kwargs)

    @staticmethod
    def _same(old: Record, key: str | None, request: RerouteRequest) -> Record:
        """``old``, created with ``key``, replayed: 409 when ``request`` is not the one
        that created it."""
        if old.fingerprint != request.fingerprint():
            raise ApiError(
                409, f"Idempotency-Key {key!r} was used for a different request (reroute {old.id})"
            )
        return old

    def _intent(self, request: RerouteRequest) -> Intent:
        """The request's intent, its host names resolved with the topology's (a 422 names
        the flow at fault)."""
        hosts = self.engine.topo.addresses
        try:
            return request.intent(hosts)
        except PlanError:
            for i, flow in enumerate(request.flows):
                try:
                    FlowSpec.parse(flow, hosts)
                except PlanError as exc:
                    raise FieldError(("body", "flows", i), str(exc)) from None
            raise

    def _accepting(self) -> None:
        if self.draining:
            raise ApiError(503, "the service is shutting down: not accepting changes")

    async def dry_run(self, request: RerouteRequest) -> Plan:
        """The plan of ``request`` on the devices as they are now (changes nothing)."""
        intent = self._intent(request)
        check_paths(self.engine, intent)
        return await self.engine.plan(intent)

    def cancel(self, reroute_id: str) -> RerouteView:
        """Cancel a pending reroute (ApiError 409 once it runs)."""
        self._accepting()
        record = self._record(reroute_id)
        if record.state is RerouteState.CANCELLED or self.scheduler.cancel(reroute_id):
            return self.view(reroute_id)
        state = "running" if self.scheduler.is_running(reroute_id) else record.state
        raise ApiError(409, f"reroute {reroute_id} is {state}: only a pending one can be cancelled")

    async def wait(self, reroute_id: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a reroute to end."""
        if timeout > 0:
            await self.scheduler.wait(reroute_id, timeout)

    def view(self, reroute_id: str) -> RerouteView:
        """The reroute ``reroute_id`` as the API shows it (404 if unknown)."""
        return self._view(self._record(reroute_id))

    def history(
        self, *, state: RerouteState | None, flow: str | None, limit: int
    ) -> list[RerouteView]:
        """Past and queued reroutes, newest first, filtered by state and flow."""
        flows: tuple[FlowSpec, ...] = ()
        if flow is not None:
            try:
                spec = FlowSpec.parse(flow, self.engine.topo.addresses)
            except PlanError as exc:
                raise FieldError(("query", "flow"), str(exc)) from exc
            flows = (spec, spec.reverse())
        debts = self.journal.debts()
        records = self.journal.history(limit, state=state, flows=flows)
        return [self._view(r, debts) for r in records]

    async def flows(self) -> FlowsView:
        """Which flows each path carries, read from the switches that answer (each within
        the device timeout; a switch that does not is left out, and logged)."""
        engine = self.engine  # the optical switches are not needed
        drivers, timeout = engine.drivers, engine.device_timeout_s
        tables, failed = await read_some(drivers, drivers, timeout, space=engine.space)
        for exc in failed.values():
            log.info("flows: %s", exc)
        return flows_view(engine.topo, tables, engine.scope, engine.space)

    async def optics(self) -> OpticsView:
        """Each optical switch's cross-connects, read from the devices this instance manages."""
        drivers = self.engine.drivers
        read = [n for n, d in drivers.items() if isinstance(d, CrossConnectSwitch)]
        circuits = await read_optics(drivers, read, self.engine.device_timeout_s)
        return optics_view(self.engine.topo, circuits, frozenset(read))

    def health(self) -> Health:
        """The service's health: draining, degraded (naming the devices that are not up, as
        last probed) or ok; queue length, running reroute."""
        running = self.scheduler.running_ids
        bad = {d.name: d.state.value for d in self.devices.not_up()}
        try:
            queue, reason = self._queued(), self._no_lease()
        except JournalError as exc:  # etcd cut off: the health answers all the same
            queue, reason = self._queue_seen, self._no_lease() or str(exc)
        status = "draining" if self.draining else "degraded" if bad or reason else "ok"
        return Health(
            status=status,
            fabric=self.settings.fabric,
            queue=queue,
            running=running[0] if running else None,
            in_flight=len(running),
            replica=self.engine.lock.owner,
            groups=[] if self._terms is None else self._terms.held(),
            devices=bad,
            reason=reason,
        )

    def _queued(self) -> int:
        """The queue's length (the journal read: a JournalError when it cannot be)."""
        self._queue_seen = self.scheduler.queued
        return self._queue_seen

    def _queue_length(self) -> int:
        """The queue's length, as last read when the journal cannot be read now."""
        try:
            return self._queued()
        except JournalError:
            return self._queue_seen

    def _lease_lost_s(self) -> float:
        """Seconds since this replica's lease surely lived (0: it lives, or there is none:
        file locks)."""
        left = self.engine.lock.lease_left()
        return 0.0 if left is None or left > 0 else -left

    def _no_lease(self) -> str:
        """Why this replica starts nothing now: it holds no lease in etcd ("": it does)."""
        lost = self._lease_lost_s()
        if not lost:
            return ""
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - lost))
        return (
            f"no lease in etcd since {since} ({lost:.1f} s): this replica starts nothing, "
            "and once etcd answers it takes a new lease as a new owner"
        )

    async def device_health(self) -> DevicesHealth:
        """``health`` and every device's state, each asked now (``identify``: one request
        each, at once, within its own timeout; its rules compared with the journal's when
        it was not up), as the tracker keeps it (since when, last error)."""
        await self.devices.probe_all()
        base = self.health()
        owners = {} if self._terms is None else self._terms.owners()
        return DevicesHealth(
            status=base.status,
            fabric=base.fabric,
            queue=base.queue,
            running=base.running,
            devices=[device_view(s, owners.get(s.name, "")) for s in self.devices.statuses()],
            reason=base.reason,
        )

    def _tracker(self) -> DeviceTracker:
        inv = self.settings.inventory
        specs = inv.devices if inv is not None else {}
        drivers = self.engine.drivers
        return DeviceTracker(
            drivers,
            timeouts={n: specs[n].timeout_s for n in drivers if n in specs},
            kinds={n: specs[n].driver for n in drivers if n in specs},
            expected=self._expected_rules,
            space=self.engine.space,
        )

    def _expected_rules(self, name: str) -> dict[RuleKey, FlowRule]:
        """Our rules the journal's intended placement puts on switch ``name``."""
        topo = self.engine.topo
        return wanted(topo, intended(topo, self.journal), self.engine.space).get(name, {})

    async def watch_devices(self) -> None:
        """Probe every device once (each within its timeout), then keep probing; publish
        every transition and resync what comes back out of sync (``auto_resync``)."""
        self.devices.subscribe(self._on_device)
        await self.devices.probe_all()
        self.devices.start()

    def _on_device(self, moved: Transition) -> Awaitable[None] | None:
        status = self.devices.status(moved.device)
        self.bus.publish(
            "device",
            {"device": moved.device, "state": moved.new.value, "was": moved.old.value,
             "since": moved.at, "error": moved.error, "came_back": moved.came_back,
             "restored": moved.restored, "kind": status.kind},
        )  # fmt: skip
        needed = moved.new in NEEDS_RESYNC and self.settings.auto_resync
        if not needed or self.draining or moved.device in self._resyncing:
            return None
        self._resyncing.add(moved.device)
        return self._resync(moved.device)

    async def _resync(self, name: str) -> None:
        """Resync device ``name`` (``Engine.resync_device``), announced as ``resync``
        events (started, then done or failed), then probe it again."""
        self.bus.publish("resync", {"device": name, "state": "started"})
        try:
            outcome = await self.engine.resync_device(name)
        except (DriverError, PlanError) as exc:
            self.bus.publish("resync", {"device": name, "state": "failed", "error": str(exc)})
            return
        finally:
            self._resyncing.discard(name)
        steps = len(outcome.timings) if outcome else 0
        ok = outcome is None or outcome.state is RerouteState.DONE
        self.bus.publish(
            "resync",
            {"device": name, "state": "done" if ok else "failed", "steps": steps,
             "error": "" if ok or outcome is None else outcome.error},
        )  # fmt: skip
        await self.devices.probe(name, check_sync=True)

    def begin_drain(self) -> None:
        """Refuse changes (503) from now on; let the running reroutes finish."""
        self.draining = True
        if self._stopping is None:
            running = self.scheduler.running
            try:
                queued = str(self.scheduler.queued)
            except RerouteError:  # the journal cannot be read now (etcd cut off)
                queued = "an unknown number of"
            lifecycle_log.info(
                "shutting down: refusing changes; waiting for %d running reroute(s); "
                "%s queued stay in the journal",
                running, queued,
            )  # fmt: skip
            self._stopping = asyncio.create_task(self.scheduler.stop())

    @property
    def drained(self) -> bool:
        """Draining has finished."""
        return self._stopping is not None and self._stopping.done()

    async def stop(self) -> None:
        """Drain (the running reroutes finish, no new one starts) and wait for them."""
        self.begin_drain()
        self._stop_reconciling.set()
        if self._reconciler is not None:
            await asyncio.gather(self._reconciler, return_exceptions=True)
        assert self._stopping is not None
        await self._stopping
        await self.devices.stop()
        self.bus.close()
        lifecycle_log.info("shut down: no reroute runs here any more")

    def _record(self, reroute_id: str) -> Record:
        record = self.journal.get(reroute_id)
        if record is None:
            raise ApiError(404, f"no reroute {reroute_id!r}")
        return record

    def _view(self, record: Record, debts: dict[str, str] | None = None) -> RerouteView:
        queued = record.state is RerouteState.PENDING
        position = self.scheduler.position(record.id) if queued else None
        view = reroute_view(record, self.journal.steps(record.id), position)
        if debts is None:  # one reroute: its own (etcd: no read for one ended here)
            owed = self.journal.owed(record.id)
        else:
            owed = [d for d, r in debts.items() if r == record.id]
        if owed:
            view = view.model_copy(update={"cleanup_pending": sorted(owed)})
        if self.scheduler.is_running(record.id) and record.state is RerouteState.PENDING:
            return view.model_copy(update={"state": RerouteState.RUNNING})  # being planned
        return view


def device_view(status: DeviceStatus, owner: str = "") -> DeviceHealth:
    """A device's status as the API shows it (``owner``: its master, etcd ownership)."""
    known = status.state is not State.UNKNOWN
    return DeviceHealth(
        name=status.name,
        kind=status.kind,
        up=status.up,
        state=status.state.value,
        since=status.since if known else None,
        error=status.error,
        checked=status.checked or None,
        detail=status.error if status.error else status.detail,
        down_since=None if status.up or not known else status.since,
        owner=owner,
    )


def check_paths(engine: Engine, intent: Intent) -> None:
    """The intent's paths exist (PlanError naming the field otherwise), and a lock timeout
    is only asked of a path that has cross-connects to lock: one that crosses no optical
    switch never waits for a lock, whatever the devices hold (the planner refuses it on a
    path whose circuits are all present)."""
    for field, name in (("to_path", intent.to_path), ("via", intent.via)):
        if name is not None:
            try:
                path_tag(engine.topo, name)
            except PlanError as exc:
                raise FieldError(("body", field), str(exc)) from None
    to = engine.topo.paths.get(intent.to_path)
    if intent.lock_timeout_s is not None and to is not None and not to.circuits:
        raise FieldError(("body", "lock_timeout_ms"), no_lock_to_wait(engine.topo, intent.to_path))
