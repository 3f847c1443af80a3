"""The executor honours ``Capabilities.atomic_batch``: a non-atomic device's batch is read
back, and when it fails part-way the applied part is undone (services/reroute/engine/guard.py).

The devices are in-memory flow tables that apply a batch one change at a time, as an
OpenFlow 1.0 switch or a REST northbound does; the executor, journal and plan are real.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest

from drivers.base import (
    Capabilities,
    DeviceRejected,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    Prefix,
    Survey,
)
from services.reroute.engine.executor import Executor, Outcome
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import Circuit
from services.reroute.planning.order import PhaseName
from services.reroute.planning.plan import Disruption, Phase, Plan, Step, StepKind
from services.reroute.store.records import RerouteState, StepState
from services.reroute.store.sqlite import Journal

NON_ATOMIC = Capabilities(atomic_batch=False, read_back=True, max_batch=0, port_state=False)
ATOMIC = Capabilities(atomic_batch=True, read_back=True, max_batch=0, port_state=False)
SELF_UNDOING = Capabilities(
    atomic_batch=False, read_back=True, max_batch=0, port_state=False, self_undoing=True
)


def rule(host: int, port: int = 2, cookie: int = 0x5252_0000_0000_0101) -> FlowRule:
    match = FlowMatch(eth_type=0x0800, ipv4_dst=Prefix.parse(f"10.0.0.{host}"))
    return FlowRule(match=match, priority=100, actions=(Output(port),), cookie=cookie)


def add(*rules: FlowRule) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]


def delete(*rules: FlowRule) -> list[FlowChange]:
    return [FlowChange(op=FlowOp.DELETE, rule=r) for r in rules]


class OneByOne:
    """A flow table that applies a batch change by change. ``fail_at``: the change that is
    refused (those before it stay applied); ``drop``: changes it acknowledges but loses."""

    def __init__(
        self,
        name: str,
        rules: Sequence[FlowRule],
        *,
        capabilities: Capabilities = NON_ATOMIC,
        fail_at: int | None = None,
        drop: frozenset[int] = frozenset(),
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.table = {r.key: r for r in rules}
        self.fail_at = fail_at
        self.drop = drop
        self.batches: list[int] = []
        self.reads = 0

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        self.batches.append(len(changes))
        first = len(self.batches) == 1
        for i, change in enumerate(changes):
            if first and i == self.fail_at:
                raise DeviceRejected(self.name, f"change #{i} refused", "TABLE_FULL")
            if first and i in self.drop:
                continue
            if change.op is FlowOp.ADD:
                self.table[change.rule.key] = change.rule
            else:
                self.table.pop(change.rule.key, None)

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        self.reads += 1
        return list(self.table.values())

    async def survey(self, cookie: int, cookie_mask: int) -> Survey:
        return Survey(ours=await self.read(cookie, cookie_mask), foreign=[])

    async def close(self) -> None:
        pass


def run(
    switch: OneByOne, changes: Sequence[FlowChange], undo: Sequence[FlowChange] = ()
) -> Outcome:
    """One INSTALL step of ``changes`` (its planned inverse ``undo``) on ``switch``."""
    step = Step(kind=StepKind.INSTALL, device=switch.name, changes=tuple(changes), undo=tuple(undo))
    plan = Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=(Phase(name=PhaseName.MAKE, steps=(step,)),), planned_at=0.0,
    )  # fmt: skip
    journal = Journal(None)
    outcome = asyncio.run(Executor({switch.name: switch}, journal).run("r1", plan))
    steps = journal.steps("r1")
    assert [s.state for s in steps] == (
        [StepState.DONE] if outcome.state is RerouteState.DONE else [StepState.UNDONE]
    )
    return outcome


BEFORE = [rule(1), rule(2), rule(3)]


def test_a_non_atomic_batch_failing_mid_way_leaves_the_table_as_before() -> None:
    switch = OneByOne("s1", BEFORE, fail_at=3)
    batch = [*add(rule(1, port=3), rule(4)), *delete(rule(2)), *add(rule(5))]
    # no planned inverse: only the executor's own bookkeeping can put the table back
    outcome = run(switch, batch)
    assert outcome.state is RerouteState.ROLLED_BACK and "change #3 refused" in (
        outcome.error or ""
    )
    assert sorted(switch.table.values()) == sorted(BEFORE)


def test_a_non_atomic_batch_acknowledged_but_not_applied_is_found_and_undone() -> None:
    switch = OneByOne("s1", BEFORE, drop=frozenset({1}))  # loses the second change, says ok
    outcome = run(switch, [*add(rule(4)), *delete(rule(1)), *add(rule(5))])
    assert outcome.state is RerouteState.ROLLED_BACK
    assert "change #1" in (outcome.error or "") and "read back" in (outcome.error or "")
    assert sorted(switch.table.values()) == sorted(BEFORE)


def test_a_non_atomic_batch_that_applies_is_read_back_once() -> None:
    switch = OneByOne("s1", BEFORE)
    outcome = run(switch, [*add(rule(4)), *delete(rule(1))])
    assert outcome.state is RerouteState.DONE
    assert sorted(switch.table.values()) == sorted([rule(2), rule(3), rule(4)])
    assert switch.reads == 2 and switch.batches == [2]  # the undo point and the read-back


def test_an_atomic_device_is_trusted_with_its_batch() -> None:
    switch = OneByOne("s1", BEFORE, capabilities=ATOMIC)
    outcome = run(switch, [*add(rule(4)), *delete(rule(1))])
    assert outcome.state is RerouteState.DONE and switch.reads == 0


def test_a_self_undoing_device_is_trusted_with_its_batch() -> None:
    switch = OneByOne("s1", BEFORE, capabilities=SELF_UNDOING)
    outcome = run(switch, [*add(rule(4)), *delete(rule(1))])
    assert outcome.state is RerouteState.DONE and switch.reads == 0
    assert sorted(switch.table.values()) == sorted([rule(2), rule(3), rule(4)])


def test_a_self_undoing_device_that_fails_is_left_to_its_own_undo() -> None:
    # this device does not undo (it only declares it does): the executor's part is the
    # planned inverse alone, so what the batch applied stays, and the executor read nothing
    switch = OneByOne("s1", BEFORE, capabilities=SELF_UNDOING, fail_at=1)
    outcome = run(switch, [*add(rule(4)), *delete(rule(1))])
    assert outcome.state is RerouteState.ROLLED_BACK and switch.reads == 0
    assert switch.batches == [2] and rule(4) in switch.table.values()


@pytest.mark.parametrize("fail_at", [0, 1, 2])
def test_the_planned_inverse_after_the_guard_still_leaves_the_table_as_before(fail_at: int) -> None:
    switch = OneByOne("s1", BEFORE, fail_at=fail_at)
    batch = [*add(rule(4)), *delete(rule(1)), *add(rule(5))]
    outcome = run(switch, batch, undo=[*delete(rule(5), rule(4)), *add(rule(1))])
    assert outcome.state is RerouteState.ROLLED_BACK
    assert sorted(switch.table.values()) == sorted(BEFORE)


# --------------------------------------------------------------------------------------
# optical circuits: remove then add, two commands


class Optical:
    """Cross-connects as a Polatis keeps them; ``refuse_add``: the next ADD is refused."""

    capabilities = NON_ATOMIC

    def __init__(self, name: str, table: dict[int, int], *, refuse_add: int = 0) -> None:
        self.name = name
        self.table = dict(table)
        self.refuse_add = refuse_add

    async def connect(self, pairs: Sequence[tuple[int, int]]) -> None:
        if self.refuse_add:
            self.refuse_add -= 1
            raise DeviceRejected(self.name, "ADD refused: 1002,'Egress already in use'", "1002")
        self.table |= dict(pairs)

    async def disconnect(self, ingresses: Sequence[int]) -> None:
        for i in ingresses:
            self.table.pop(i, None)

    async def connections(self) -> dict[int, int]:
        return dict(self.table)


def run_circuits(switch: Optical, remove: Sequence[Circuit], add: Sequence[Circuit]) -> Outcome:
    step = Step(
        kind=StepKind.CIRCUITS, device=switch.name, disconnect=tuple(remove), connect=tuple(add)
    )
    plan = Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=(Phase(name=PhaseName.CIRCUITS, steps=(step,)),), planned_at=0.0,
    )  # fmt: skip
    return asyncio.run(Executor({switch.name: switch}, Journal(None)).run("r1", plan))


def test_a_circuit_step_whose_add_fails_after_the_removal_puts_the_circuits_back() -> None:
    before = {1: 17, 2: 18}
    switch = Optical("ost1", before, refuse_add=1)
    outcome = run_circuits(
        switch,
        [Circuit(switch="ost1", ingress=1, egress=17)],
        [Circuit(switch="ost1", ingress=1, egress=18)],
    )
    assert outcome.state is RerouteState.ROLLED_BACK and "1002" in (outcome.error or "")
    assert switch.table == before


def test_a_circuit_step_that_succeeds_changes_only_its_circuits() -> None:
    switch = Optical("ost1", {1: 17, 2: 18})
    outcome = run_circuits(
        switch,
        [Circuit(switch="ost1", ingress=1, egress=17)],
        [Circuit(switch="ost1", ingress=1, egress=19)],
    )
    assert outcome.state is RerouteState.DONE and switch.table == {1: 19, 2: 18}


# --------------------------------------------------------------------------------------
# max_batch: a batch larger than the device takes goes in requests, guarded


class RefusesThird(OneByOne):
    """Refuses its third request (table full, say), whatever it holds."""

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        if len(self.batches) == 2:
            self.batches.append(len(changes))
            raise DeviceRejected(self.name, "request refused", "TABLE_FULL")
        await super().apply(changes)


LIMITED = dataclasses.replace(ATOMIC, max_batch=2)


def test_a_batch_beyond_max_batch_goes_in_requests_of_that_size() -> None:
    switch = OneByOne("s1", BEFORE, capabilities=LIMITED)
    outcome = run(switch, add(*(rule(h) for h in range(4, 9))))
    assert outcome.state is RerouteState.DONE
    assert switch.batches == [2, 2, 1]
    assert sorted(switch.table.values()) == sorted([*BEFORE, *(rule(h) for h in range(4, 9))])
    assert switch.reads == 2  # no longer all or nothing: the undo point and the read-back


def test_a_split_batch_failing_part_way_is_undone_whole_though_the_device_is_atomic() -> None:
    switch = RefusesThird("s1", BEFORE, capabilities=LIMITED)
    outcome = run(switch, add(*(rule(h) for h in range(4, 9))))
    assert outcome.state is RerouteState.ROLLED_BACK
    assert sorted(switch.table.values()) == sorted(BEFORE)
    assert all(size <= 2 for size in switch.batches), switch.batches


def test_a_step_on_a_device_without_a_driver_is_refused_and_the_rest_undone() -> None:
    """Two INSTALL steps, the second on a switch no driver was opened for (outside the
    service's scope): a named error, and the first step undone."""
    switch = OneByOne("s1", BEFORE)
    steps = (
        Step(kind=StepKind.INSTALL, device="s1", changes=tuple(add(rule(4))),
             undo=tuple(delete(rule(4)))),
        Step(kind=StepKind.INSTALL, device="s9", changes=tuple(add(rule(5)))),
    )  # fmt: skip
    plan = Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=(Phase(name=PhaseName.MAKE, steps=steps[:1]),
                Phase(name=PhaseName.SHIFT, steps=steps[1:])),
        planned_at=0.0,
    )  # fmt: skip
    outcome = asyncio.run(Executor({"s1": switch}, Journal(None)).run("r1", plan))
    assert outcome.state is RerouteState.ROLLED_BACK
    assert "s9: has no driver here" in (outcome.error or "")
    assert sorted(switch.table.values()) == sorted(BEFORE)


def test_each_step_ends_before_the_next_starts_and_the_last_before_the_reroute() -> None:
    """A batch's end is journaled with the next write (the next start, or the finish): its
    time is that write's, never later than what the write records next."""
    switch = OneByOne("s1", BEFORE)
    steps = tuple(
        Step(kind=StepKind.INSTALL, device="s1", changes=tuple(add(rule(h))),
             undo=tuple(delete(rule(h))))
        for h in (4, 5, 6)
    )  # fmt: skip
    plan = Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=tuple(Phase(name=list(PhaseName)[i], steps=(s,)) for i, s in enumerate(steps)),
        planned_at=0.0,
    )  # fmt: skip
    journal = Journal(None)
    outcome = asyncio.run(Executor({"s1": switch}, journal).run("r1", plan))
    record, done = journal.get("r1"), journal.steps("r1")
    assert outcome.state is RerouteState.DONE and record is not None
    assert record.started is not None and record.finished is not None
    assert [s.state for s in done] == [StepState.DONE] * 3
    times = [t for s in done for t in (s.started, s.finished)]
    assert times == sorted(times), times  # started, ended, started, ended...
    assert record.started <= times[0] and times[-1] <= record.finished


class HangsAfterFirst(OneByOne):
    """Applies its first batch, then hangs on every other (the undo of the first)."""

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        if self.batches:
            await asyncio.sleep(10)
        await super().apply(changes)


def test_an_undo_that_times_out_says_which_device_and_how_long() -> None:
    s1, s2 = HangsAfterFirst("s1", BEFORE), OneByOne("s2", BEFORE, fail_at=0)
    steps = (
        Step(
            kind=StepKind.INSTALL,
            device="s1",
            changes=tuple(add(rule(4))),
            undo=tuple(delete(rule(4))),
        ),
        Step(kind=StepKind.INSTALL, device="s2", changes=tuple(add(rule(5)))),
    )
    plan = Plan(
        intent=Intent(flows=(FlowSpec.parse("10.0.0.1>10.0.0.2"),), to_path="p"),
        from_paths=("q",), to_path="p", disruption=Disruption.HITLESS,
        phases=(Phase(name=PhaseName.MAKE, steps=steps),), planned_at=0.0,
    )  # fmt: skip
    executor = Executor({"s1": s1, "s2": s2}, Journal(None), step_timeout=0.2)
    outcome = asyncio.run(executor.run("r1", plan))
    assert outcome.state is RerouteState.FAILED
    assert "rollback of step 1 failed too: s1: undoing install took over 0.2 s" in (
        outcome.error or ""
    ), outcome.error
