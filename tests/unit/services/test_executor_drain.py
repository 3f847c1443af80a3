"""The drain after a shift counts from the shift's end (its VERIFY runs meanwhile), never
less than the plan's drain, and from when the ports it watches stop sending where their
counters can be read; the guard's undo point of a circuit step that follows a drain
is read during the drain, and still puts the circuits back when the ADD fails.

In-memory devices (tests/unit/services/test_executor_guard.py's); executor, journal and
plan are real.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

from drivers.base import FlowRule
from services.reroute.engine.drain import SEEN_S as DRAIN_SEEN_S
from services.reroute.engine.drain import WATCH_S as DRAIN_WATCH_S
from services.reroute.engine.executor import Executor, Outcome, StepEvent
from services.reroute.errors import DeviceTimeout
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Circuit
from services.reroute.planning.order import PhaseName
from services.reroute.planning.plan import Disruption, Phase, Plan, Step, StepKind
from services.reroute.store.records import RerouteState, StepState
from services.reroute.store.sqlite import Journal
from tests.unit.services.test_executor_guard import ATOMIC, OneByOne, Optical, add, rule

DRAIN_S = 0.06
SHORT_S = 0.01  # a drain shorter than DRAIN_SEEN_S
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
    """A plan of ``phases`` (name: a ``PhaseName`` value)."""
    return Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=tuple(Phase(name=PhaseName(n), steps=s) for n, s in phases), planned_at=0.0,
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
    plan = plan_of(("drain", (Step(kind=StepKind.DRAIN, duration_s=DRAIN_S),)))
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


class Feeding(OneByOne):
    """A switch whose port 2 keeps sending until ``stops_at`` (perf_counter), as an OVS
    datapath that forwards by the old rules a while after the shift was read back; its
    counters read live (``PortCounters``), or fail to (``broken``)."""

    def __init__(self, *args: object, stops_at: float, broken: bool = False, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.stops_at, self.broken, self.counter_reads = stops_at, broken, 0

    async def tx_packets(self, ports: Sequence[int] = ()) -> dict[int, int]:
        assert list(ports) == [2]  # only the port watched
        self.counter_reads += 1
        if self.broken:
            raise DeviceTimeout(self.name, "port statistics took too long")
        now = time.perf_counter()
        return {1: 7, 2: int(min(now, self.stops_at) * 10_000)}  # 10,000 packets/s


def drain_watching(switch: Feeding, *, seen: bool = False) -> tuple[Outcome, float]:
    """A shift, its VERIFY, a drain watching the switch's port 2 (``DRAIN_S``; ``seen``:
    ``SHORT_S``, also waiting for the shift's rule to count); the run's outcome and when
    the drain ended (perf_counter)."""
    r = rule(2)
    drain = Step(kind=StepKind.DRAIN, duration_s=DRAIN_S, ports=(("s1", 2),))
    if seen:
        drain = replace(drain, duration_s=SHORT_S, seen_on=(("s1", r.cookie),))
    plan = plan_of(
        ("shift", (Step(kind=StepKind.SHIFT, device="s1", changes=tuple(add(r))),)),
        ("verify-shift", (Step(kind=StepKind.VERIFY, device="s1", expect=(r,)),)),
        ("drain", (drain,)),
    )
    ended: dict[int, float] = {}

    def on_event(event: StepEvent) -> None:
        if event.state is StepState.DONE:
            ended[event.index] = time.perf_counter()

    outcome = asyncio.run(Executor({"s1": switch}, Journal(None), on_event=on_event).run("r", plan))
    return outcome, ended[3]


def test_a_drain_counts_from_when_the_ports_it_watches_stop_sending() -> None:
    stops_at = time.perf_counter() + 0.08  # still sending 80 ms on (the shift takes ~0)
    switch = Feeding("s1", [], capabilities=ATOMIC, stops_at=stops_at)
    outcome, drained = drain_watching(switch)
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert drained >= stops_at + DRAIN_S  # the whole margin after the last packet
    assert drained < stops_at + DRAIN_S + 0.03  # and not much more (reads every ms)
    assert switch.counter_reads > 10
    assert "after s1:p2 stop sending" in outcome.describe()


def test_a_port_that_never_stops_holds_the_drain_back_a_bounded_time() -> None:
    switch = Feeding("s1", [], capabilities=ATOMIC, stops_at=float("inf"))
    start = time.perf_counter()
    outcome, drained = drain_watching(switch)
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert DRAIN_WATCH_S <= drained - start < DRAIN_WATCH_S + DRAIN_S + 0.05


def test_counters_that_cannot_be_read_leave_the_margin_after_the_shift() -> None:
    switch = Feeding("s1", [], capabilities=ATOMIC, stops_at=float("inf"), broken=True)
    start = time.perf_counter()
    outcome, drained = drain_watching(switch)
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert switch.counter_reads == 1 and DRAIN_S <= drained - start < DRAIN_S + 0.04


class Stale(Feeding):
    """Its port 2 sent nothing since the shift (a sender that paused), and the rule the
    shift added counts packets only from ``counts_at``: until then its datapath may still
    forward by the old rules (``FlowCounters``)."""

    def __init__(self, *args: object, counts_at: float, **kw: object) -> None:
        super().__init__(*args, stops_at=0.0, **kw)  # type: ignore[arg-type]
        self.counts_at, self.flow_reads = counts_at, 0

    async def flow_packets(self, cookie: int) -> int:
        assert cookie == rule(2).cookie  # the rule the shift added
        self.flow_reads += 1
        return 3 if time.perf_counter() >= self.counts_at else 0


def test_quiet_ports_wait_for_the_shifts_rule_to_count_packets() -> None:
    counts_at = time.perf_counter() + 0.025  # ports quiet all along, the datapath stale
    switch = Stale("s1", [], capabilities=ATOMIC, counts_at=counts_at)
    outcome, drained = drain_watching(switch, seen=True)
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert counts_at <= drained < counts_at + 0.02  # not the 10 ms after the shift
    assert "the moved flows counted on s1" in outcome.describe()


def test_a_shifts_rule_that_never_counts_holds_the_drain_back_a_bounded_time() -> None:
    switch = Stale("s1", [], capabilities=ATOMIC, counts_at=float("inf"))  # idle flows
    start = time.perf_counter()
    outcome, drained = drain_watching(switch, seen=True)
    assert outcome.state is RerouteState.DONE, outcome.describe()
    assert DRAIN_SEEN_S <= drained - start < DRAIN_SEEN_S + 0.03


def test_a_drain_whose_devices_count_nothing_waits_an_idle_rules_cap() -> None:
    """Watching ports of a switch that gives no counters (dpctl, ODL, Ryu, P4Runtime), the
    drain cannot see the datapath act on the shift: its margin starts an idle rule's cap
    after the shift (a 5 ms margin alone lost packets, dpctl in CI, stop 49); a drain that
    watches nothing (BBM's gap) is a plain wait from the shift."""
    from services.reroute.engine.drain import quiet

    blind = Step(kind=StepKind.DRAIN, duration_s=0.005, ports=(("s1", 1),))
    wait = Step(kind=StepKind.DRAIN, duration_s=0.005)

    async def main() -> tuple[float, float]:
        return await quiet(blind, 10.0, {}, {}), await quiet(wait, 10.0, {}, {})

    assert asyncio.run(main()) == (10.0 + DRAIN_SEEN_S, 10.0)
