"""The executor: runs a plan through drivers, journaled, verified, rolled back on failure.

Each step gets a timeout. INSTALL/SHIFT/REMOVE apply the step's batch (one atomic bundle
where the driver can); VERIFY reads the device back (only the rules under the step's
cookie) and requires every expected rule; DRAIN/WAIT sleep. Steps of a concurrent phase
run at once. Before a step touches a device its start is committed to the journal. On any
failure the executor waits for the steps in flight, then undoes every started step, newest
first (each step carries its inverse, computed by the planner), which returns every flow to
the path it had before. Recovery after a crash is the engine's (``engine.recover``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from drivers.base import FlowProgrammer
from services.reroute.errors import DeviceTimeout, DriverError, RerouteError
from services.reroute.journal import Journal, RerouteState, StepState
from services.reroute.planner import Plan, Step, StepKind
from services.reroute.rules import COOKIE_BASE, COOKIE_MASK

ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF
log = logging.getLogger("reroute.executor")


class VerifyError(DriverError):
    """A device read back without rules it should have."""


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

    def describe(self) -> str:
        lines = [f"reroute {self.reroute_id}: {self.state} in {self.total_ms:.1f} ms"]
        if self.shifted_ms is not None:
            lines.append(f"  traffic on the new path after {self.shifted_ms:.1f} ms")
        lines += [f"  {t.index:>3}. {t.ms:8.2f} ms  {t.description}" for t in self.timings]
        if self.error:
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)


class Executor:
    def __init__(
        self,
        drivers: Mapping[str, FlowProgrammer],
        journal: Journal,
        *,
        step_timeout: float = 10.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.drivers = drivers
        self.journal = journal
        self.step_timeout = step_timeout
        self.clock = clock

    async def run(self, reroute_id: str, plan: Plan) -> Outcome:
        self.journal.create(reroute_id, plan)
        steps = plan.steps()
        timings: list[StepTiming] = []
        started = self.clock()
        shifted: float | None = None
        first = 0
        for phase in plan.phases:
            batches = [phase.steps] if phase.concurrent else [(s,) for s in phase.steps]
            for batch in batches:
                index = range(first, first + len(batch))
                first += len(batch)
                error = await self._run_batch(reroute_id, batch, index, timings)
                if error is not None:
                    state, story = await self.rollback(reroute_id, steps, list(range(first)), error)
                    return Outcome(
                        reroute_id=reroute_id,
                        state=state,
                        timings=tuple(timings),
                        total_ms=(self.clock() - started) * 1000,
                        error=story,
                    )
                if any(s.kind is StepKind.SHIFT for s in batch):
                    shifted = (self.clock() - started) * 1000
        self.journal.finish(reroute_id, RerouteState.DONE)
        return Outcome(
            reroute_id=reroute_id,
            state=RerouteState.DONE,
            timings=tuple(timings),
            total_ms=(self.clock() - started) * 1000,
            shifted_ms=shifted,
        )

    async def _run_batch(
        self, reroute_id: str, batch: tuple[Step, ...], index: range, timings: list[StepTiming]
    ) -> RerouteError | None:
        """Run steps at once (journaled first); the first error, after all have finished."""
        for i in index:
            self.journal.step(reroute_id, i, StepState.STARTED)
        results = await asyncio.gather(
            *(self._timed(step) for step in batch), return_exceptions=True
        )
        error: RerouteError | None = None
        for i, step, result in zip(index, batch, results, strict=True):
            if isinstance(result, RerouteError):
                self.journal.step(reroute_id, i, StepState.FAILED, str(result))
                log.warning("step %d (%s) failed: %s", i + 1, step.describe(), result)
                error = error or result
            elif isinstance(result, BaseException):
                raise result
            else:
                self.journal.step(reroute_id, i, StepState.DONE)
                timings.append(StepTiming(index=i + 1, description=step.describe(), ms=result))
        return error

    async def _timed(self, step: Step) -> float:
        t0 = self.clock()
        await self._run_step(step)
        return (self.clock() - t0) * 1000

    async def _run_step(self, step: Step) -> None:
        if step.kind in (StepKind.DRAIN, StepKind.WAIT):
            await asyncio.sleep(step.duration_s)
            return
        driver = self.drivers[step.device]
        try:
            async with asyncio.timeout(self.step_timeout):
                if step.kind is StepKind.VERIFY:
                    await self._verify(driver, step)
                else:
                    await driver.apply(step.changes)
        except TimeoutError as exc:
            raise DeviceTimeout(
                step.device, f"{step.kind} took over {self.step_timeout} s"
            ) from exc

    async def _verify(self, driver: FlowProgrammer, step: Step) -> None:
        cookies = {r.cookie for r in step.expect}
        if len(cookies) == 1:  # read back only this step's rules: (path tag, role) is exact
            have = set(await driver.read(cookie=cookies.pop(), cookie_mask=ALL_BITS))
        else:
            have = set(await driver.read(cookie=COOKIE_BASE, cookie_mask=COOKIE_MASK))
        missing = [r for r in step.expect if r not in have]
        if missing:
            raise VerifyError(step.device, f"{len(missing)} rule(s) missing, e.g. {missing[0]}")

    async def rollback(
        self, reroute_id: str, steps: list[Step], started: list[int], cause: Exception
    ) -> tuple[RerouteState, str]:
        """Undo the started steps, newest first. Returns the final state and the story."""
        for i in reversed(started):
            step = steps[i]
            if not step.undo:
                continue
            try:
                async with asyncio.timeout(self.step_timeout):
                    await self.drivers[step.device].apply(step.undo)
            except (RerouteError, TimeoutError) as exc:
                error = f"{cause}; rollback of step {i + 1} failed too: {exc}"
                self.journal.finish(reroute_id, RerouteState.FAILED, error)
                return RerouteState.FAILED, error
            self.journal.step(reroute_id, i, StepState.UNDONE)
        error = f"{cause} (rolled back: every flow is on its previous path)"
        self.journal.finish(reroute_id, RerouteState.ROLLED_BACK, error)
        return RerouteState.ROLLED_BACK, error
