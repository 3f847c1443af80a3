"""The drain after a shift counts from the shift's end (its VERIFY runs meanwhile), never
less than the plan's drain; the guard's undo point of a circuit step that follows a drain
is read during the drain, and still puts the circuits back when the ADD fails.

In-memory devices (tests/unit/services/test_executor_guard.py's); executor, journal and
plan are real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from drivers.base import FlowRule
from services.reroute.executor import Executor, StepEvent
from services.reroute.journal import Journal, RerouteState, StepState
from services.reroute.model import FlowSpec, Intent
from services.reroute.planning.plan import Disruption, Phase, Plan, Step, StepKind
from services.reroute.topology import Circuit
from tests.unit.services.test_executor_guard import ATOMIC, OneByOne, Optical, add, rule

DRAIN_S = 0.06
VERIFY_S = 0.03


class SlowRead(OneByOne):
    """Reads back (VERIFY) in ``VERIFY_S``."""

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        await asyncio.sleep(VERIFY_S)
        return await super().read(cookie, cookie_mask)


class CountedOptical(Optical):
    """Records the order of its calls."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.calls: list[str] = []
        self.read_at = self.drained_by = 0.0

    async def connections(self) -> dict[int, int]:
        self.calls.append("read")
        self.read_at = time.perf_counter()
        return await super().connections()

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        self.calls.append("sub")
        self.drained_by = self.drained_by or time.perf_counter()
        await super().disconnect(ingresses)

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.calls.append("add")
        await super().connect(pairs)


def plan_of(*phases: tuple[str, tuple[Step, ...]]) -> Plan:
    return Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=tuple(Phase(name=n, steps=s) for n, s in phases), planned_at=0.0,
    )  # fmt: skip


def test_the_drain_counts_from_the_shift_and_is_never_shorter() -> None:
    switch = SlowRead("s1", [], capabilities=ATOMIC)
    r = rule(2)
    plan = plan_of(
        ("shift", (Step(kind=StepKind.SHIFT, device="s1", changes=tuple(add(r))),)),
        ("verify-shift", (Step(kind=StepKind.VERIFY, device="s1", expect=(r,)),)),
        ("drain", (Step(kind=StepKind.DRAIN, duration_s=DRAIN_S),)),
    )
    ended: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        if event.state is StepState.DONE:
            ended[event.index] = time.perf_counter()

    outcome = asyncio.run(Executor({"s1": switch}, Journal(None), on_event=on_event).run("r", plan))
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert ended[3] - ended[1] >= DRAIN_S  # the whole drain after the shift
    drain_ms = outcome.timings[-1].ms
    assert drain_ms < (DRAIN_S - VERIFY_S / 2) * 1000, outcome.describe()  # verify overlapped


def test_a_drain_not_right_after_a_shift_is_whole() -> None:
    plan = plan_of(("wait", (Step(kind=StepKind.DRAIN, duration_s=DRAIN_S),)))
    outcome = asyncio.run(Executor({}, Journal(None)).run("r", plan))
    assert outcome.timings[-1].ms >= DRAIN_S * 1000


def circuits_after_a_drain(switch: CountedOptical) -> Plan:
    step = Step(
        kind=StepKind.CIRCUITS, device=switch.name,
        disconnect=(Circuit(switch="ost1", ingress=1, egress=17),),
        connect=(Circuit(switch="ost1", ingress=1, egress=19),),
    )  # fmt: skip
    return plan_of(
        ("drain", (Step(kind=StepKind.DRAIN, duration_s=0.02),)),
        ("circuits", (step,)),
    )


def test_the_undo_point_read_during_the_drain_puts_the_circuits_back() -> None:
    before = {1: 17, 2: 18}
    switch = CountedOptical("ost1", before, refuse_add=1)
    outcome = asyncio.run(
        Executor({"ost1": switch}, Journal(None)).run("r", circuits_after_a_drain(switch))
    )
    assert outcome.state is RerouteState.ROLLED_BACK and "1002" in (outcome.error or "")
    assert switch.table == before
    assert switch.calls[:3] == ["read", "sub", "add"]  # read once, before the SUB


def test_circuits_after_a_drain_change_only_their_circuits() -> None:
    switch = CountedOptical("ost1", {1: 17, 2: 18})
    outcome = asyncio.run(
        Executor({"ost1": switch}, Journal(None)).run("r", circuits_after_a_drain(switch))
    )
    assert outcome.state is RerouteState.DONE and switch.table == {1: 19, 2: 18}
    assert switch.calls == ["read", "sub", "add"]
    assert switch.drained_by - switch.read_at > 0.01  # read during the drain, not after it
