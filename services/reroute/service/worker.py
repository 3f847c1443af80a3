"""The one worker: runs queued reroutes one at a time, first in, first out.

Why one: two reroutes touching the same flows or links must never interleave (the second
would plan on tables the first is rewriting). A single FIFO worker gives that for free,
whatever the flows, and a reroute takes milliseconds (electronic) to about a second
(optical lock), so the queue stays short. Each reroute is planned when its turn comes, on
the tables its predecessors left; one whose plan fails then ends ``rejected`` (nothing
changed). The queue itself is the journal's ``pending`` rows: the in-memory deque only
orders them, and a restart rebuilds it from the journal.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from contextlib import suppress

from services.reroute.engine import Engine
from services.reroute.errors import PlanError, RerouteError
from services.reroute.executor import Outcome, StepEvent
from services.reroute.journal import Journal, RerouteState
from services.reroute.model import Intent
from services.reroute.service.events import EventBus, step_data
from services.reroute.service.metrics import Metrics

log = logging.getLogger("reroute.service")


class Worker:
    def __init__(self, engine: Engine, journal: Journal, bus: EventBus, metrics: Metrics) -> None:
        self.engine = engine
        self.journal = journal
        self.bus = bus
        self.metrics = metrics
        self.current: str | None = None
        self.stopping = False
        self._queue: deque[str] = deque()
        self._wake = asyncio.Event()
        self._finished: dict[str, asyncio.Event] = {}
        self._planned: dict[str, asyncio.Event] = {}  # judged: planned, or ended
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """A reroute is running or queued."""
        return self.current is not None or bool(self._queue)

    @property
    def running(self) -> int:
        """How many reroutes run (0 or 1)."""
        return int(self.current is not None)

    @property
    def queued(self) -> int:
        """How many reroutes wait."""
        return len(self._queue)

    @property
    def stopped(self) -> bool:
        """The worker task is not running."""
        return self._task is None or self._task.done()

    def start(self) -> None:
        """Start the worker task."""
        self._task = asyncio.create_task(self._loop(), name="reroute-worker")

    def enqueue(self, reroute_id: str) -> None:
        """Queue a reroute and wake the worker."""
        self._queue.append(reroute_id)
        self._wake.set()

    def position(self, reroute_id: str) -> int | None:
        """How many reroutes run before this pending one (None: not queued)."""
        if reroute_id not in self._queue:
            return None
        return self._queue.index(reroute_id) + (self.current is not None)

    def cancel(self, reroute_id: str) -> bool:
        """Cancel a pending reroute: False if it is running or not pending."""
        if reroute_id == self.current or not self.journal.cancel(reroute_id):
            return False
        with suppress(ValueError):
            self._queue.remove(reroute_id)
        self._announce(reroute_id, RerouteState.CANCELLED)
        self._release(reroute_id)
        return True

    async def wait(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute is final, or ``timeout``, or the worker stops."""
        record = self.journal.get(reroute_id)
        if record is None or record.state.final or (self.stopped and reroute_id != self.current):
            return
        done = self._finished.setdefault(reroute_id, asyncio.Event())
        with suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)

    async def judged(self, reroute_id: str, timeout: float) -> None:
        """Until the reroute has been planned on the devices (it runs) or has ended (a
        refused plan: ``rejected``), or ``timeout``, or the worker stops."""
        record = self.journal.get(reroute_id)
        if record is None or record.state.final or self.stopped:
            return
        planned = self._planned.setdefault(reroute_id, asyncio.Event())
        with suppress(TimeoutError):
            await asyncio.wait_for(planned.wait(), timeout)

    async def stop(self) -> None:
        """Take no new reroute; wait for the running one; pending ones stay pending."""
        self.stopping = True
        self._wake.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _loop(self) -> None:
        try:
            while (reroute_id := await self._next()) is not None:
                record = self.journal.get(reroute_id)
                if record is None or record.state is not RerouteState.PENDING or not record.intent:
                    self._release(reroute_id)
                    continue
                self.current = reroute_id
                try:
                    await self._run(reroute_id, record.intent)
                finally:
                    self.current = None
                    self._release(reroute_id)
        finally:
            for done in (*self._finished.values(), *self._planned.values()):
                done.set()
            self._finished.clear()
            self._planned.clear()

    async def _next(self) -> str | None:
        while not self._queue and not self.stopping:
            self._wake.clear()
            await self._wake.wait()
        return None if self.stopping else self._queue.popleft()

    async def _run(self, reroute_id: str, intent: Intent) -> None:
        self._announce(reroute_id, RerouteState.RUNNING)
        try:
            _, outcome = await self.engine.apply(
                intent,
                reroute_id=reroute_id,
                on_event=self._on_step,
                on_plan=lambda _: self._judge(reroute_id),
            )
        except PlanError as exc:
            self._end(reroute_id, RerouteState.REJECTED, str(exc))
        except Exception as exc:
            log.exception("reroute %s: %s", reroute_id, exc)
            await self._settle(reroute_id, exc)
        else:
            self._outcome(outcome)

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
        """An unexpected error: before any step, reject; mid-plan, recover (roll back now)."""
        record = self.journal.get(reroute_id)
        if record is not None and record.state is RerouteState.PENDING:
            self._end(reroute_id, RerouteState.REJECTED, f"could not plan: {exc}")
            return
        with suppress(RerouteError):
            await self.engine.recover()
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
