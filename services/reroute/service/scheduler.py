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
holds only what the plan needs. One whose plan is refused ends ``rejected`` (nothing
changed). The queue is the journal's ``pending`` rows: a restart rebuilds it.

Running reroutes of other owners (a CLI ``apply`` on the same lock directory, another
replica) block their resources; one whose owner died is recovered as ``reroute recover``
does (``Engine.recover_one``) as soon as its resources can be taken.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass

from services.reroute.engine import Engine, NeedMore
from services.reroute.errors import PlanError, RerouteError
from services.reroute.executor import Outcome, StepEvent
from services.reroute.journal import Journal, Record, RerouteState, Retention
from services.reroute.locks import Held
from services.reroute.resources import EVERYTHING, Keys, overlap
from services.reroute.service.events import EventBus, step_data
from services.reroute.service.metrics import Metrics

log = logging.getLogger("reroute.service")
RETRY_S = 0.02  # a reroute found its resources held by another process: try again after
CHECK_S = 1.0  # otherwise look for reroutes of owners that died this often
PRUNE_EVERY = 50  # ended reroutes between two prunings of the journal (Retention)


@dataclass(frozen=True, slots=True, kw_only=True)
class Queued:
    seq: int  # submission order
    keys: Keys  # what it is expected to hold


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        journal: Journal,
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
        self._queue: dict[str, Queued] = {}
        self._seq = itertools.count()
        self._order: dict[str, int] = {}  # each queued or running reroute's place
        self._running: dict[str, Held] = {}  # started here: planning, executing, recovering
        self._recovering: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._finished: dict[str, asyncio.Event] = {}
        self._planned: dict[str, asyncio.Event] = {}  # judged: planned, or ended
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """A reroute is running or queued here."""
        return bool(self._running) or bool(self._queue)

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
        """How many reroutes wait."""
        return len(self._queue)

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

    def enqueue(self, reroute_id: str, keys: Keys = frozenset({EVERYTHING})) -> None:
        """Queue a reroute expected to hold ``keys``."""
        seq = self._order.setdefault(reroute_id, next(self._seq))
        self._queue[reroute_id] = Queued(seq=seq, keys=keys)
        self._wake.set()

    def position(self, reroute_id: str) -> int | None:
        """How many reroutes run or wait before this pending one (those it overlaps; None:
        not queued)."""
        mine = self._queue.get(reroute_id)
        if mine is None:
            return None
        ahead = [q.keys for q in self._queue.values() if q.seq < mine.seq]
        held = [h.keys for h in self._running.values()]
        return sum(overlap(mine.keys, k) for k in (*ahead, *held))

    def cancel(self, reroute_id: str) -> bool:
        """Cancel a pending reroute: False if it is running or not pending."""
        if reroute_id in self._running or not self.journal.cancel(reroute_id):
            return False
        self._queue.pop(reroute_id, None)
        self._order.pop(reroute_id, None)
        self._announce(reroute_id, RerouteState.CANCELLED)
        self._release(reroute_id)
        return True

    async def wait(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute is final, or ``timeout``, or the scheduler stops."""
        record = self.journal.get(reroute_id)
        if record is None or record.state.final:
            return
        if self.stopped and reroute_id not in self._running:
            return
        done = self._finished.setdefault(reroute_id, asyncio.Event())
        with suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)

    async def judged(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute has been planned on the devices (it runs) or has ended (a
        refused plan: ``rejected``), or ``timeout``, or the scheduler stops."""
        record = self.journal.get(reroute_id)
        if record is None or record.state.final or self.stopped:
            return
        planned = self._planned.setdefault(reroute_id, asyncio.Event())
        with suppress(TimeoutError):
            await asyncio.wait_for(planned.wait(), timeout)

    async def stop(self) -> None:
        """Start nothing new; wait for the running reroutes; pending ones stay pending."""
        self.stopping = True
        self._wake.set()
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
        while not self.stopping:
            self._wake.clear()
            try:
                retry = await self._dispatch()
            except RerouteError as exc:  # the journal or the locks cannot be read now
                log.warning("scheduling: %s", exc)
                retry = True
            if self.stopping:
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RETRY_S if retry else CHECK_S)

    async def _dispatch(self) -> bool:
        """Start every queued reroute that can start; take over the reroutes of owners that
        died. True: something could not be taken now and should be tried again soon."""
        blockers: list[Keys] = [h.keys for h in self._running.values()]
        retry = False
        for record in self.journal.in_flight():
            if record.id in self._running:
                continue
            blockers.append(record.resources)
            if not await self._alive(record):
                retry |= not await self._take_over(record)
        for reroute_id, queued in sorted(self._queue.items(), key=lambda kv: kv[1].seq):
            if self.stopping:
                break
            if _overlaps(queued.keys, blockers):
                blockers.append(queued.keys)
                continue
            blockers.append(queued.keys)
            held = await self.engine.lock.try_acquire(queued.keys)
            if held is None:
                retry = True
            elif self._queue.get(reroute_id) is not queued:  # cancelled meanwhile
                await held.release()
            else:
                del self._queue[reroute_id]
                held = Waking(held, self._wake)
                self._spawn(reroute_id, held, self._run(reroute_id, held))
        return retry

    async def _alive(self, record: Record) -> bool:
        if record.owner == self.engine.lock.owner:
            return record.id in self._running  # ours, but nothing runs it any more
        return await self.engine.lock.alive(record.owner)

    async def _take_over(self, record: Record) -> bool:
        """Recover a reroute whose owner died, once its resources are free here."""
        held = await self.engine.lock.try_acquire(record.resources)
        if held is None:
            return False
        log.warning("reroute %s: its owner %s is gone: recovering it", record.id, record.owner)
        self._recovering.add(record.id)
        self._spawn(record.id, held, self._recover(record, held))
        return True

    def _spawn(self, reroute_id: str, held: Held, work: object) -> None:
        self._running[reroute_id] = held  # its keys narrow once it is planned
        assert asyncio.iscoroutine(work)
        task = asyncio.create_task(work, name=f"reroute-{reroute_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _done(self, reroute_id: str) -> None:
        self._running.pop(reroute_id, None)
        self._recovering.discard(reroute_id)
        if reroute_id not in self._queue:
            self._order.pop(reroute_id, None)
            self._release(reroute_id)
            self._ended += 1
            if self._ended % PRUNE_EVERY == 0:
                self.prune()
        self._wake.set()

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

    async def _run(self, reroute_id: str, held: Held) -> None:
        try:
            record = self.journal.get(reroute_id)
            if record is not None and record.state is RerouteState.PENDING and record.intent:
                await self._execute(record, held)
        finally:
            await held.release()
            self._done(reroute_id)

    async def _execute(self, record: Record, held: Held) -> None:
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
            self.journal.expect(reroute_id, more.keys)
            self._queue[reroute_id] = Queued(seq=self._order[reroute_id], keys=more.keys)
            self._announce(reroute_id, RerouteState.PENDING)
        except PlanError as exc:
            self._end(reroute_id, RerouteState.REJECTED, str(exc))
        except Exception as exc:
            log.exception("reroute %s: %s", reroute_id, exc)
            await self._settle(reroute_id, exc)
        else:
            self._outcome(outcome)

    async def _recover(self, record: Record, held: Held) -> None:
        try:
            await self.engine.recover_one(record)
        except RerouteError as exc:
            log.error("reroute %s: recovery failed: %s", record.id, exc)
        else:
            after = self.journal.get(record.id)
            if after is not None and after.state.final:
                self.metrics.finished(after.state)
                self._announce(record.id, after.state, after.error)
        finally:
            await held.release()
            self._done(record.id)

    def _on_step(self, event: StepEvent) -> None:
        self.metrics.step(event)
        self.bus.publish("step", step_data(event))

    def _outcome(self, outcome: Outcome) -> None:
        self.metrics.finished(outcome.state, outcome.total_ms)
        self._announce(outcome.reroute_id, outcome.state, outcome.error, outcome.total_ms)

    def _end(self, reroute_id: str, state: RerouteState, error: str) -> None:
        self.journal.finish(reroute_id, state, error)
        self.metrics.finished(state)
        self._announce(reroute_id, state, error)

    async def _settle(self, reroute_id: str, exc: Exception) -> None:
        """An unexpected error: before any step, reject; mid-plan, recover (roll back now,
        still holding what the plan holds)."""
        record = self.journal.get(reroute_id)
        if record is None:
            return
        if record.state is RerouteState.PENDING:
            self._end(reroute_id, RerouteState.REJECTED, f"could not plan: {exc}")
            return
        if record.state is RerouteState.RUNNING:
            with suppress(RerouteError):
                await self.engine.recover_one(record)
        after = self.journal.get(reroute_id)
        if after is not None and after.state.final:
            self.metrics.finished(after.state)
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
    """A ``Held`` that wakes the scheduler when it narrows: what it let go may start others."""

    def __init__(self, held: Held, wake: asyncio.Event) -> None:
        self._held = held
        self._wake = wake

    @property
    def keys(self) -> Keys:
        return self._held.keys

    async def extend(self, keys: Keys) -> bool:
        return await self._held.extend(keys)

    async def narrow(self, keys: Keys) -> None:
        await self._held.narrow(keys)
        self._wake.set()

    async def release(self) -> None:
        await self._held.release()

    def revision(self, device: str) -> int:
        return self._held.revision(device)


def _overlaps(keys: Keys, others: Iterable[Keys]) -> bool:
    return any(overlap(keys, other) for other in others)
