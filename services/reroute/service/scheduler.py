"""The scheduler: runs queued reroutes, disjoint ones at once, overlapping ones in order.

Each pending reroute carries the resources it is expected to hold (``resources.py``):
planned on the devices when it was submitted, or ``EVERYTHING`` when it could not be
planned then or nothing was running (it is then planned alone, which costs no extra read).
The scheduler walks the queue in submission order and starts a reroute when its resources
overlap neither a running reroute's nor an earlier pending one's and it can take them all
(``locks.py``: all or nothing, never waiting while holding). So overlapping reroutes run in
the order they came and never interleave, disjoint ones run at once, and nothing deadlocks.

A started reroute is planned on the devices while holding its resources; when the plan
needs more (the devices changed since it was submitted) it takes more if they are free,
else it goes back to its place in the queue, expecting the new set. From its plan on it
holds only what the plan needs (on etcd, one that started holding every device narrows
only once another reroute is queued, and else lets it all go with its finish: one durable
write less, ``Waking``). One whose plan is refused ends ``rejected`` (nothing changed). The
queue is the journal's ``pending`` rows: a restart rebuilds it.

Running reroutes of other owners (a CLI ``apply`` on the same lock directory, another
replica) block their resources; one whose owner died is recovered as ``reroute recover``
does (``Engine.recover_one``) as soon as its resources can be taken, before any reroute
queued on them runs (its recovery plans from where it found the flows: after a newer
reroute it would undo that one). Such a reroute holds no lock any more, only its row in
flight: the queue and the reroutes in flight are read at one moment, and a reroute is
locked only while none started since that read (``Journaling.queue``, ``_dispatch``).

With device ownership (etcd, ``etcd/terms.py``: ``Routing``), a replica starts, and takes
over, only the reroutes whose coordinating group it masters; the others' stay in its view
of the queue as blockers (they keep their order) and it never asks whether their owners
live. The lock transaction that starts a reroute also compares this replica's term of that
group (``Routing.fences``). A reroute queued here but mastered elsewhere is waited for on
its own row's changes (``rows``), not on every change of the store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from contextlib import suppress
from typing import Any, Protocol

from services.reroute.engine.engine import Engine, NeedMore
from services.reroute.engine.executor import Outcome, StepEvent
from services.reroute.errors import PlanError, RerouteError
from services.reroute.planning.resources import Keys, overlap
from services.reroute.service.events import EventBus, step_data
from services.reroute.service.metrics import Metrics
from services.reroute.store.journaling import Journaling, offload
from services.reroute.store.locks import Held, KeepsClaims, Outranking, lease_needed
from services.reroute.store.records import Queue, Record, RerouteState, Retention

log = logging.getLogger("reroute.service")
RETRY_S = 0.02  # a reroute found its resources held by another process: try again after
CHECK_S = 1.0  # otherwise look for reroutes of owners that died this often
# with device ownership, a start that failed (another master's start on a shared optical
# port moved the queue's guard, a term changing hands, a stale claim) is tried again after
# this: the watch wakes a master only for its own groups
ROUTED_RETRY_S = 0.1
PRUNE_EVERY = 50  # ended reroutes between two prunings of the journal (Retention)


class Routing(Protocol):
    """Which reroutes this replica runs (``etcd.terms.Terms``; none: every one)."""

    def mine(self, keys: Iterable[str]) -> bool:
        """This replica masters the coordinating group of a reroute holding ``keys``."""
        ...

    def fences(self, keys: Iterable[str]) -> list[Any]:
        """What the lock transaction that starts such a reroute compares (its term)."""
        ...

    async def step_down(self) -> None:
        """Master nothing any more (this replica stops): the others take its devices."""
        ...

    def alone(self) -> bool:
        """No other replica stands (as last read): none may queue a reroute at once."""
        ...


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        journal: Journaling,
        bus: EventBus,
        metrics: Metrics,
        retention: Retention | None = None,
    ) -> None:
        self.engine = engine
        self.retention = retention or Retention()
        self._ended = 0
        self.journal = journal
        self.bus = bus
        self.metrics = metrics
        self.stopping = False
        self._running: dict[str, Held] = {}  # started here: planning, executing, recovering
        self._recovering: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._waiting = True  # the last look at the queue left a reroute waiting (or failed)
        self._start_failed = False  # the last look's lock transactions did not all succeed
        self._looking = False  # a look at the queue is under way
        self._looked = asyncio.Event()  # set (and replaced) as each look ends
        self._finished: dict[str, asyncio.Event] = {}
        self._planned: dict[str, asyncio.Event] = {}  # judged: planned, or ended
        self._loop_task: asyncio.Task[None] | None = None
        # device ownership: which reroutes are this replica's (None: every one)
        self.routing: Routing | None = getattr(engine.lock, "terms", None)
        # reroute id -> events set when its row changes (etcd: ``EtcdLocks.rows``)
        self._rows: dict[str, list[asyncio.Event]] | None = getattr(engine.lock, "rows", None)

    def _mine(self, record: Record) -> bool:
        return self.routing is None or self.routing.mine(record.resources)

    @property
    def busy(self) -> bool:
        """Known without a read: a reroute runs here, or one may be queued at this moment
        by another replica (a reroute admitted unplanned holds every device until it is
        planned, and another replica's would wait for it all that time). The journal
        tells the rest: one queued or running anywhere (``Journaling.look``)."""
        if self.routing is not None and not self.routing.alone():
            return True
        return bool(self._running)

    @property
    def running(self) -> int:
        """How many reroutes run here."""
        return len(self._running) - len(self._recovering)

    @property
    def running_ids(self) -> list[str]:
        """The reroutes running here, oldest first (recoveries not counted)."""
        return [r for r in self._running if r not in self._recovering]

    @property
    def queued(self) -> int:
        """How many reroutes wait (the journal's queue)."""
        return len(self.journal.pending())

    @property
    def stopped(self) -> bool:
        """The scheduler does not run."""
        return self._loop_task is None or self._loop_task.done()

    def is_running(self, reroute_id: str) -> bool:
        """The reroute is being planned or executed here."""
        return reroute_id in self._running

    def start(self) -> None:
        """Start scheduling."""
        self._loop_task = asyncio.create_task(self._loop(), name="reroute-scheduler")

    def enqueue(self, reroute_id: str) -> None:
        """A reroute was queued in the journal: look at the queue now."""
        self._wake.set()

    def position(self, reroute_id: str) -> int | None:
        """How many reroutes run or wait before this pending one (those it overlaps; None:
        not queued)."""
        queue = self.journal.queue()
        pending = queue.pending
        mine = next((i for i, r in enumerate(pending) if r.id == reroute_id), None)
        if mine is None or reroute_id in self._running:
            return None
        keys = pending[mine].resources
        ahead = [r.resources for r in pending[:mine]]
        ahead += [r.resources for r in queue.running]
        ahead += [h.keys for r, h in self._running.items() if r in {p.id for p in pending}]
        return sum(overlap(keys, k) for k in ahead)

    def cancel(self, reroute_id: str) -> bool:
        """Cancel a pending reroute: False if it is running or not pending."""
        if reroute_id in self._running or not self.journal.cancel(reroute_id):
            return False
        self._announce(reroute_id, RerouteState.CANCELLED)
        self._release(reroute_id)
        return True

    async def wait(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute is final, or ``timeout``, or the scheduler stops."""
        done = self._finished.setdefault(reroute_id, asyncio.Event())
        try:
            await self._until(reroute_id, done, timeout, lambda s: s.final)
        finally:
            _forget(self._finished, reroute_id, done)

    async def judged(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute has been planned on the devices (it runs) or has ended (a
        refused plan: ``rejected``), or ``timeout``, or the scheduler stops."""
        planned = self._planned.setdefault(reroute_id, asyncio.Event())
        try:
            await self._until(reroute_id, planned, timeout, lambda s: s is not RerouteState.PENDING)
        finally:
            _forget(self._planned, reroute_id, planned)

    async def _until(
        self,
        reroute_id: str,
        event: asyncio.Event,
        timeout: float,
        reached: Callable[[RerouteState], bool],
    ) -> None:
        """Until ``reached`` holds for the reroute's state in the journal (told by ``event``
        when it happens here; looked up on each change of the store, when another replica
        may run it), or ``timeout``, or the scheduler stops."""
        deadline = asyncio.get_running_loop().time() + timeout
        if self._rows is None or self.routing is None:
            await self._until_set(reroute_id, event, deadline, reached, self.engine.lock.changed)
            return
        row = asyncio.Event()  # ownership: only this reroute's row wakes its waiter
        self._rows.setdefault(reroute_id, []).append(row)
        try:
            await self._until_set(reroute_id, event, deadline, reached, row, own=True)
        finally:
            waiters = self._rows.get(reroute_id, [])
            if row in waiters:
                waiters.remove(row)
            if not waiters:
                self._rows.pop(reroute_id, None)

    async def _until_set(
        self,
        reroute_id: str,
        event: asyncio.Event,
        deadline: float,
        reached: Callable[[RerouteState], bool],
        changed: asyncio.Event | None,
        *,
        own: bool = False,
    ) -> None:
        """``_until``, ``changed`` telling when to read the reroute again (``own``: it is
        this waiter's alone, cleared before each read). A look at the queue that is due or
        under way is waited for before the first read (two at most: one under way may have
        read the queue before the reroute was queued): a reroute it starts here needs no
        read (``event`` tells)."""
        looks = 2
        while not event.is_set():
            if reroute_id in self._running:  # run here: ``event`` tells (its row may be
                # running before it is planned: started by its lock transaction)
                if self.stopped:
                    return
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    return
                await _first([event.wait()], min(left, CHECK_S))
                continue
            if looks and (self._wake.is_set() or self._looking) and not self.stopped:
                looks -= 1
                left = deadline - asyncio.get_running_loop().time()
                await _first([self._looked.wait(), event.wait()], max(0.0, min(left, CHECK_S)))
                continue
            if own and changed is not None:
                changed.clear()  # a change from now on is news to the read below
            record = await offload(self.journal, self.journal.get, reroute_id)
            looks = 0  # read: changes tell from now on
            if record is None or reached(record.state):
                return
            if self.stopped and reroute_id not in self._running:
                return
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            waits = [event.wait()] + ([changed.wait()] if changed is not None else [])
            await _first(waits, min(left, CHECK_S))

    async def stop(self) -> None:
        """Start nothing new; wait for the running reroutes; pending ones stay pending."""
        self.stopping = True
        self._wake.set()
        if self.routing is not None:  # its groups' queued reroutes run elsewhere meanwhile
            try:
                await self.routing.step_down()
            except RerouteError as exc:  # etcd cut off: the terms go with the lease
                log.warning("stepping down: %s", exc)
        if self._loop_task is not None:
            await asyncio.shield(self._loop_task)
        while self._tasks:
            await asyncio.shield(asyncio.gather(*self._tasks, return_exceptions=True))
        for done in (*self._finished.values(), *self._planned.values()):
            done.set()
        self._finished.clear()
        self._planned.clear()

    # ----------------------------------------------------------------------------------
    # dispatching

    async def _loop(self) -> None:
        changed = self.engine.lock.changed  # another owner queued, let go or died (etcd)
        while not self.stopping:
            self._wake.clear()
            if changed is not None:
                changed.clear()
            self._looking = True
            try:
                retry = await self._dispatch()
            except RerouteError as exc:  # the journal or the locks cannot be read now
                log.warning("scheduling: %s", exc)
                retry = True
            finally:
                self._looking = False
                looked, self._looked = self._looked, asyncio.Event()
                looked.set()
            if self.stopping:
                return
            waits = [self._wake.wait()] + ([changed.wait()] if changed is not None else [])
            timeout = CHECK_S if changed is not None or not retry else RETRY_S
            if self._start_failed and self.routing is not None:  # no event may tell
                timeout = ROUTED_RETRY_S
            await _first(waits, timeout)

    async def _dispatch(self) -> bool:
        """Start every queued reroute that can start; take over the reroutes of owners that
        died. True: something could not be taken now and should be tried again soon.

        The reroutes in flight and the queue are read at one moment (``Journaling.queue``):
        a reroute going from one to the other in between is never missed in both. A running
        reroute whose owner died holds its devices through that read alone (its locks went
        with it), so every start is locked under the read's guard: one that started since
        (and may have lost its owner since) fails the lock, and the queue is read again."""
        left = self.engine.lock.lease_left()
        if left is not None and left < lease_needed(self.engine.lock.step_s):
            return True  # this replica's lease is not renewed now: it starts nothing
        queue = await offload(self.journal, lambda: self.journal.queue(reuse=True))
        await self._narrow_put_off(queue)
        blockers: list[Keys] = [h.keys for h in self._running.values()]
        retry = False
        self._waiting = True  # until this look ends
        for record in queue.running:
            if record.id in self._running:
                continue
            blockers.append(record.resources)
            if not self._mine(record):  # its group's master takes it over if need be
                continue
            if not await self._alive(record):
                retry |= not await self._take_over(record)
        waiting = retry  # a takeover waits for resources, too
        starts: list[Record] = []
        for record in queue.pending:
            if self.stopping:
                break
            if record.id in self._running:  # being planned here
                continue
            if not self._mine(record):  # its group's master starts it: it keeps its place
                blockers.append(record.resources)
                continue
            if _overlaps(record.resources, blockers):
                blockers.append(record.resources)
                waiting = True
                continue
            blockers.append(record.resources)
            starts.append(record)
        self._start_failed = not await self._start(starts, queue)
        if self._start_failed:
            retry = waiting = True
        self._waiting = waiting
        return retry

    async def _narrow_put_off(self, queue: Queue) -> None:
        """Holds that put their narrowing off (``Waking``) narrow now when another reroute
        may need what they would let go: one queued or running that does not run here (to
        start, or to take over) and stays clear of the hold's plan, or any when other
        replicas stand (with device ownership, another's queued reroute wakes only its
        master). A narrowing that fails is tried again at the next look (the start it was
        for fails its lock meanwhile)."""
        wider = [h for h in self._running.values() if isinstance(h, Waking) and h.wider]
        if not wider:  # (the common case: nothing to read out of the queue)
            return
        others = self.routing is not None and not self.routing.alone()
        queued = [r for r in (*queue.running, *queue.pending) if r.id not in self._running]
        for held in wider:
            if not others and all(overlap(r.resources, held.keys) for r in queued):
                continue  # none of them could start before this one ends
            try:
                await held.narrow_now()
            except RerouteError as exc:
                log.warning("narrowing a reroute's locks to its plan: %s", exc)

    async def _start(self, records: list[Record], queue: Queue) -> bool:
        """Lock each of ``records`` (disjoint) under ``queue``'s guard, all at once, and run
        those locked; spawned only once every lock answered, so that no start of this
        replica's own lands between the read and a lock. False: some were not locked (held
        by another owner, claimed by another replica, or a reroute started since the read).
        A start since the read that this journal knows of (``started_since``: etcd, one of
        this replica's, which no watch event tells; SQLite, any) reads the queue again at
        once; with no guard (file locks), it voids the locks just taken."""
        results: list[Held | BaseException | None] = []
        if queue.guard:  # one after the other: each starts its reroute (etcd), so the
            # next one's guard must move past it (``rebase``)
            for r in records:
                term = [] if self.routing is None else self.routing.fences(r.resources)
                try:
                    got = await self.engine.lock.try_acquire(
                        r.resources, claim=r.id, extra=(*queue.guard_for(r.resources), *term)
                    )
                except Exception as exc:  # raised below, once the others are spawned
                    got = exc  # type: ignore[assignment]
                results.append(got)
                if got is not None and not isinstance(got, BaseException):
                    queue = self.journal.rebase(queue)
        else:
            tries = [
                self.engine.lock.try_acquire(r.resources, claim=r.id, extra=queue.guard)
                for r in records
            ]
            results = list(await asyncio.gather(*tries, return_exceptions=True))
        stale = bool(records) and self.journal.started_since(queue)
        void = stale and not queue.guard
        for record, held in zip(records, results, strict=True):
            if isinstance(held, BaseException) or held is None:
                continue
            if void:
                await held.release()
                continue
            waking = Waking(held, self._let_go, self.journal)
            self._spawn(record.id, waking, self._run(record, waking))
        for failed in results:
            if isinstance(failed, BaseException):
                raise failed
        everyone = not void and all(r is not None for r in results)
        if stale and not everyone:
            self._wake.set()
        return everyone

    async def _alive(self, record: Record) -> bool:
        if record.owner == self.engine.lock.owner:
            return record.id in self._running  # ours, but nothing runs it any more
        return await self.engine.lock.alive(record.owner)

    async def _take_over(self, record: Record) -> bool:
        """Recover a reroute whose owner died, once its resources are free here."""
        held = await self.engine.lock.try_acquire(record.resources)
        if held is None:
            return False
        # another replica may have recovered it meanwhile
        now = await offload(self.journal, self.journal.get, record.id)
        if now is None or now.state is not RerouteState.RUNNING or now.owner != record.owner:
            await held.release()
            return True
        log.warning("reroute %s: its owner %s is gone: recovering it", record.id, record.owner)
        self._recovering.add(record.id)
        self._spawn(record.id, held, self._recover(now, held))
        return True

    def _spawn(self, reroute_id: str, held: Held, work: object) -> None:
        self._running[reroute_id] = held  # its keys narrow once it is planned
        assert asyncio.iscoroutine(work)
        task = asyncio.create_task(work, name=f"reroute-{reroute_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _done(self, reroute_id: str, requeued: bool = False) -> None:
        self._running.pop(reroute_id, None)
        self._recovering.discard(reroute_id)
        if not requeued:
            self._release(reroute_id)
            self._ended += 1
            if self._ended % PRUNE_EVERY == 0:  # off the loop (``journal.offload``)
                self._spawn_prune()
        if requeued:
            self._wake.set()
        else:
            self._let_go()

    def _let_go(self) -> None:
        """Resources were let go: look at the queue again if a reroute waits in it (one
        queued since is seen anyway: queued here, or another replica's change)."""
        if self._waiting:
            self._wake.set()

    def _spawn_prune(self) -> None:
        task = asyncio.ensure_future(offload(self.journal, self.prune))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def prune(self) -> None:
        """Remove what the journal keeps beyond the retention (never running or pending)."""
        try:
            removed = self.journal.prune(self.retention)
        except RerouteError as exc:
            log.warning("pruning the journal: %s", exc)
            return
        if removed:
            log.info("journal: %d ended reroute(s) beyond the retention removed", removed)

    # ----------------------------------------------------------------------------------
    # one reroute

    async def _run(self, record: Record, held: Held) -> None:
        """Run ``record`` as the queue read it: claimed since, and still pending then (the
        claim compared it), no other replica runs or cancels it (``cancel`` compares the
        claim absent), so it is not read again."""
        requeued = False
        self.journal.release_with(record.id, held)  # its finish lets the locks go
        try:
            if record.state is RerouteState.PENDING and record.intent:
                requeued = await self._execute(record, held)
        finally:
            self.journal.release_with(record.id, None)  # (not let go by a finish)
            await held.release()
            self._done(record.id, requeued)

    async def _execute(self, record: Record, held: Held) -> bool:
        """Plan and run ``record``; True: it went back to the queue (``NeedMore``)."""
        assert record.intent is not None
        reroute_id = record.id
        self._announce(reroute_id, RerouteState.RUNNING)
        try:
            _, outcome = await self.engine.run_held(
                reroute_id,
                record.intent,
                held,
                on_event=self._on_step,
                on_plan=lambda _: self._judge(reroute_id),
            )
        except NeedMore as more:  # back to its place in the queue, expecting more
            await offload(self.journal, self.journal.expect, reroute_id, more.keys)
            self._announce(reroute_id, RerouteState.PENDING)
            return True
        except PlanError as exc:
            await self._end(reroute_id, RerouteState.REJECTED, str(exc), _strategy(record))
        except Exception as exc:
            log.exception("reroute %s: %s", reroute_id, exc)
            await self._settle(reroute_id, exc)
        else:
            if outcome.state is RerouteState.RUNNING:  # abandoned: its lease ran out
                return True  # recovered from the journal (here or by another replica)
            self._outcome(outcome, _strategy(record))
        return False

    async def _recover(self, record: Record, held: Held) -> None:
        try:
            await self.engine.recover_one(record, held)
        except RerouteError as exc:
            log.error("reroute %s: recovery failed: %s", record.id, exc)
        else:
            after = await offload(self.journal, self.journal.get, record.id)
            if after is not None and after.state.final:
                self.metrics.finished(after.state, strategy=_strategy(after))
                self._announce(record.id, after.state, after.error)
        finally:
            await held.release()
            self._done(record.id)

    def _on_step(self, event: StepEvent) -> None:
        self.metrics.step(event)
        self.bus.publish("step", step_data(event))

    def _outcome(self, outcome: Outcome, strategy: str) -> None:
        self.metrics.finished(outcome.state, outcome.total_ms, strategy)
        self._announce(outcome.reroute_id, outcome.state, outcome.error, outcome.total_ms)

    async def _end(self, reroute_id: str, state: RerouteState, error: str, strategy: str) -> None:
        await offload(self.journal, self.journal.finish, reroute_id, state, error)
        self.metrics.finished(state, strategy=strategy)
        self._announce(reroute_id, state, error)

    async def _settle(self, reroute_id: str, exc: Exception) -> None:
        """An unexpected error: before any step, reject; mid-plan, recover (roll back now,
        still holding what the plan holds)."""
        record = await offload(self.journal, self.journal.get, reroute_id)
        if record is None:
            return
        if record.state is RerouteState.PENDING:
            error = f"could not plan: {exc}"
            await self._end(reroute_id, RerouteState.REJECTED, error, _strategy(record))
            return
        if record.state is RerouteState.RUNNING:
            with suppress(RerouteError):
                await self.engine.recover_one(record, self._running.get(reroute_id))
        after = await offload(self.journal, self.journal.get, reroute_id)
        if after is not None and after.state.final:
            self.metrics.finished(after.state, strategy=_strategy(after))
            self._announce(reroute_id, after.state, after.error)

    def _announce(
        self,
        reroute_id: str,
        state: RerouteState,
        error: str | None = None,
        total_ms: float | None = None,
    ) -> None:
        self.bus.publish(
            "reroute",
            {"reroute_id": reroute_id, "state": str(state), "error": error, "total_ms": total_ms},
        )

    def _judge(self, reroute_id: str) -> None:
        planned = self._planned.pop(reroute_id, None)
        if planned is not None:
            planned.set()

    def _release(self, reroute_id: str) -> None:
        self._judge(reroute_id)
        done = self._finished.pop(reroute_id, None)
        if done is not None:
            done.set()


class Waking:
    """A ``Held`` that wakes the scheduler when it narrows (what it let go may start
    others), and takes more only where no reroute is in flight (``extend``).

    **A narrowing put off until the finish** (etcd). A reroute admitted alone starts
    holding every device, and narrowing to its plan's keys would cost a durable write of
    its own. Where the reroute's finish can let the whole hold go in its own write
    (``let_go_ops`` fits), the narrowing is only noted: ``keys`` are the plan's from then
    on (what the scheduler sees), and the hold narrows for real (``narrow_now``) only when
    the scheduler finds a reroute queued that may need what it would let go. The finish and
    such a narrowing never overlap: ``let_go_ops`` (the finish's thread) carries no release
    while one is under way (``release`` lets go after it), and none starts once the finish
    or ``release`` began. The cost: a replica that dies meanwhile leaves lock-delay markers
    (``etcd/locks.py``) on every unfenced device it held, not only on its plan's."""

    def __init__(self, held: Held, wake: Callable[[], None], journal: Journaling) -> None:
        self._held = held
        self._wake = wake
        self._journal = journal
        # the hold's release as another write's part (etcd's ``EtcdHeld.let_go_ops``)
        self._let_go_ops: Callable[[], object] | None = getattr(held, "let_go_ops", None)
        self._wanted: Keys | None = None  # the plan's keys, not narrowed to yet
        self._mutex = threading.Lock()  # (``let_go_ops`` runs in the finish's thread)
        self._narrowing: asyncio.Event | None = None  # set when the narrowing under way ends
        self._ending = False  # the finish or ``release`` began: no narrowing any more

    @property
    def keys(self) -> Keys:
        return self._held.keys if self._wanted is None else self._wanted

    @property
    def wider(self) -> bool:
        """It holds more than ``keys``: a narrowing was put off."""
        return self._wanted is not None

    async def extend(self, keys: Keys, extra: Sequence[object] = ()) -> bool:
        """More keys (a plan that needs more), only where no reroute is in flight: a
        running one whose owner died holds no lock. Read afresh; taken under that read's
        guard (etcd), or let go again when a reroute started since (file locks)."""
        queue = await offload(self._journal, self._journal.queue)
        if _overlaps(keys, [r.resources for r in queue.running]):
            return False
        before = self._held.keys
        if not await self._held.extend(keys, (*extra, *queue.guard_for(keys))):
            return False
        if queue.guard or not self._journal.started_since(queue):
            return True
        await self._held.narrow(before)
        return False

    async def narrow(self, keys: Keys) -> None:
        let_go = self._let_go_ops
        if let_go is not None and keys != self._held.keys and let_go() is not None:
            self._wanted = keys  # the finish lets it all go in its write: no write now
        else:
            await self._held.narrow(keys)
        self._wake()  # a reroute waiting for what it let go (or will) may start

    async def narrow_now(self) -> None:
        """Narrow to the plan's keys, put off by ``narrow``: a queued reroute may need what
        this lets go. Nothing once the finish (or ``release``) began."""
        wanted, narrowing = self._wanted, asyncio.Event()
        with self._mutex:
            if wanted is None or self._ending or self._narrowing is not None:
                return
            self._narrowing = narrowing
        try:
            await self._held.narrow(wanted)
            self._wanted = None
        finally:
            with self._mutex:
                self._narrowing = None
            narrowing.set()

    async def release(self) -> None:
        with self._mutex:
            self._ending = True
            narrowing = self._narrowing
        if narrowing is not None:  # let go only once it ended: else both let one key go
            await narrowing.wait()
        await self._held.release()

    def let_go_ops(self) -> object:
        """The hold's release as another write's part (etcd: the reroute's finish, in its
        thread); None while a narrowing is under way (``release`` lets go after it)."""
        let_go = self._let_go_ops
        if let_go is None:
            return None
        with self._mutex:
            if self._narrowing is not None:
                return None
            self._ending = True
        return let_go()

    def released(self, revision: int) -> None:
        """Let go by the reroute's finish (called in the thread that wrote it: the
        scheduler wakes when the run ends, ``_done``)."""
        self._held.released(revision)  # type: ignore[attr-defined]

    def revision(self, device: str) -> int:
        return self._held.revision(device)

    def sole(self, device: str) -> bool:
        """``locks.KeepsClaims``: this owner's earlier claim of ``device`` stands (etcd);
        False where the hold cannot tell (file locks)."""
        return isinstance(self._held, KeepsClaims) and self._held.sole(device)

    def claimed(self, device: str, *, kept: bool) -> None:
        if isinstance(self._held, KeepsClaims):
            self._held.claimed(device, kept=kept)

    async def outrank(self, device: str, seen: int) -> int | None:
        """``locks.Outranking``: the held token raised above ``seen`` (etcd); None where
        the hold cannot (file locks) or no longer holds ``device``."""
        if isinstance(self._held, Outranking):
            return await self._held.outrank(device, seen)
        return None


async def _first(waits: list[Coroutine[Any, Any, Any]], timeout: float) -> None:
    """Until the first of ``waits`` ends, or ``timeout``."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _forget(events: dict[str, asyncio.Event], reroute_id: str, event: asyncio.Event) -> None:
    """Drop a waiter's event once it is done with it (another replica may have run the
    reroute: nothing here would ever set it, nor drop it)."""
    if events.get(reroute_id) is event:
        del events[reroute_id]


def _strategy(record: Record) -> str:
    """The reroute's strategy, as the metrics label it."""
    return record.intent.strategy.value if record.intent is not None else "unknown"


def _overlaps(keys: Keys, others: Iterable[Keys]) -> bool:
    return any(overlap(keys, other) for other in others)
