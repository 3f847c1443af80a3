"""The device state tracker (services/reroute/devicestate.py): the state machine with time
passed in, and probes of drivers that answer, refuse, hang, lose their program or their
rules."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from drivers.base import Capabilities, FlowChange, FlowRule, Identity
from drivers.errors import DeviceRejected, DeviceTimeout, DeviceUnreachable
from services.reroute.devicestate import (
    DeviceTracker,
    Finding,
    State,
    Transition,
    advance,
    classify,
    missing,
    unknown,
)
from services.reroute.engine.resync import wanted
from services.reroute.model.topology import load_topology
from services.reroute.rules import host_flow, initial_rules
from services.reroute.store.records import JournalError
from services.reroute.tables import RuleKey, tables_from
from tests.unit.services.test_resync import NGNCS

TOPO = load_topology(NGNCS)
RULES = initial_rules(TOPO)["br2"]


class Switch:
    """A packet switch whose answers a test sets: ``fault`` raised by every request, or
    ``hang`` (requests never answered); ``connections`` as a reconnecting driver counts."""

    name = "br2"
    capabilities = Capabilities(atomic_batch=True, read_back=True, max_batch=0, port_state=False)

    def __init__(self, rules: Sequence[FlowRule]) -> None:
        self.rules = list(rules)
        self.fault: Exception | None = None
        self.hang = False
        self.connections = 1
        self.down_since: float | None = None

    async def _answer(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        if self.fault is not None:
            raise self.fault

    async def identify(self) -> Identity:
        await self._answer()
        return Identity(summary="a switch")

    async def read(self, cookie: int | None = None, cookie_mask: int = 0) -> list[FlowRule]:
        await self._answer()
        return list(self.rules)

    async def apply(self, changes: Sequence[FlowChange]) -> None:
        raise AssertionError("the tracker never writes")

    async def survey(self, cookie: int, cookie_mask: int) -> object:
        raise AssertionError("not used")

    async def close(self) -> None:
        pass


def test_a_state_change_is_one_transition_stamped_with_the_time_given() -> None:
    start = unknown("br2", "ovs")
    up, first = advance(start, Finding(state=State.UP, detail="ovs 3.3"), now=10.0)
    assert first == Transition(device="br2", old=State.UNKNOWN, new=State.UP, at=10.0, error="")
    assert not first.came_back and not first.restored  # the first probe is no comeback
    same, none = advance(up, Finding(state=State.UP), now=11.0)
    assert none is None and same.since == 10.0 and same.checked == 11.0
    assert same.detail == "ovs 3.3"  # kept from its last answer
    down, lost = advance(same, Finding(state=State.DOWN, error="refused"), now=12.0)
    assert lost is not None and (lost.old, lost.new) == (State.UP, State.DOWN)
    assert (down.since, down.error) == (12.0, "refused")
    still, none = advance(down, Finding(state=State.DOWN, error="refused again"), now=13.0)
    assert none is None and still.since == 12.0 and still.error == "refused again"
    lacking, back = advance(still, Finding(state=State.OUT_OF_SYNC, error="3 missing"), 14.0)
    assert back is not None and back.came_back and not back.restored
    synced, restored = advance(lacking, Finding(state=State.UP), now=15.0)
    assert restored is not None and restored.restored and not restored.came_back
    assert synced.since == 15.0 and synced.error == ""


@pytest.mark.parametrize(
    ("error", "reconnecting", "state"),
    [
        (
            DeviceUnreachable("br2", "cannot connect to tcp:x:1: Connection refused"),
            False,
            State.DOWN,
        ),
        (DeviceTimeout("br2", "no reply to xid 0x5 in 2 s"), False, State.HUNG),
        (
            DeviceRejected("br2", "runs no P4 program", "PIPELINE_MISMATCH"),
            False,
            State.NO_PIPELINE,
        ),
        (DeviceRejected("br2", "another dpid", "dpid"), False, State.DOWN),
        (TimeoutError(), False, State.HUNG),
        (TimeoutError(), True, State.DOWN),
    ],
)
def test_each_failure_of_a_probe_means_one_state(
    error: Exception, reconnecting: bool, state: State
) -> None:
    found = classify(error, reconnecting, timeout=2.0)
    assert found.state is state
    assert found.error and not found.error.startswith("br2:")


def tracker(switch: Switch, expected: Sequence[FlowRule] = RULES) -> DeviceTracker:
    want = tables_from({"br2": expected})["br2"]
    clock = iter(range(100, 10_000))
    return DeviceTracker(
        {"br2": switch},  # type: ignore[dict-item]
        timeouts={"br2": 0.2},
        kinds={"br2": "ovs"},
        expected=lambda name: want,
        clock=lambda: float(next(clock)),
    )


def test_probes_follow_a_switch_down_hung_back_empty_and_resynced() -> None:
    async def main() -> list[tuple[State, State]]:
        switch = Switch(RULES)
        devices = tracker(switch)
        seen: list[Transition] = []
        devices.subscribe(seen.append)
        assert (await devices.probe("br2")).state is State.UP
        switch.fault = DeviceUnreachable("br2", "connection refused")
        down = await devices.probe("br2")
        assert (down.state, down.error) == (State.DOWN, "connection refused")
        assert [s.name for s in devices.not_up()] == ["br2"]
        switch.fault, switch.hang = None, True
        assert (await devices.probe("br2")).state is State.HUNG  # within its 0.2 s
        switch.hang, switch.rules = False, RULES[:1]  # back, with one rule of ours left
        lacking = await devices.probe("br2")
        assert lacking.state is State.OUT_OF_SYNC
        assert f"{len(RULES) - 1} of the {len(RULES)} rules" in lacking.error
        assert (await devices.probe("br2")).state is State.OUT_OF_SYNC  # checked again
        switch.rules = list(RULES)  # resynced
        assert (await devices.probe("br2")).state is State.UP and devices.not_up() == []
        return [(t.old, t.new) for t in seen]

    assert asyncio.run(main()) == [
        (State.UNKNOWN, State.UP),
        (State.UP, State.DOWN),
        (State.DOWN, State.HUNG),
        (State.HUNG, State.OUT_OF_SYNC),
        (State.OUT_OF_SYNC, State.UP),
    ]


def test_a_restart_between_two_probes_is_found_by_the_drivers_new_connection() -> None:
    """The switch restarted cold and its driver reconnected within one probe's request:
    the probe never failed, but the driver's ``connections`` grew, so the rules are read."""

    async def main() -> tuple[State, State]:
        switch = Switch(RULES)
        devices = tracker(switch)
        await devices.probe("br2")
        switch.rules = []  # emptied; the same connection: not read again (cheap probes)
        quiet = (await devices.probe("br2")).state
        switch.connections += 1
        return quiet, (await devices.probe("br2")).state

    assert asyncio.run(main()) == (State.UP, State.OUT_OF_SYNC)


def test_a_device_with_more_of_our_rules_than_expected_is_not_out_of_sync() -> None:
    """Only rules the journal expects and the device lacks count (a reroute adds before it
    removes: more is a reroute under way, or debt the reconciler cleans)."""

    async def main() -> State:
        extra = replace(RULES[0], priority=RULES[0].priority + 7)
        return (await tracker(Switch([*RULES, extra])).probe("br2")).state

    assert asyncio.run(main()) is State.UP


def test_listeners_are_called_awaited_and_the_periodic_probes_find_a_change() -> None:
    async def main() -> list[str]:
        switch = Switch(RULES)
        devices = tracker(switch)
        calls: list[str] = []

        async def on_change(moved: Transition) -> None:
            await asyncio.sleep(0)
            calls.append(f"{moved.old}>{moved.new}")

        devices.subscribe(on_change)
        devices.start()
        try:
            await devices.wait_for("br2", [State.UP], timeout=2)
            switch.fault = DeviceUnreachable("br2", "refused")
            await devices.wait_for("br2", [State.DOWN], timeout=2)  # probed every 0.1 s
            switch.fault = None
            await devices.wait_for("br2", [State.UP], timeout=2)
            await asyncio.sleep(0.05)
        finally:
            await devices.stop()
        return calls

    assert asyncio.run(main()) == ["unknown>up", "up>down", "down>up"]


def test_rules_on_another_path_are_not_missing_but_a_lost_table_is() -> None:
    topo = TOPO
    on = {"long": (host_flow(topo.paths["long"]),)}
    there = {"temporary": on["long"]}
    want, other = wanted(topo, on)["br2"], wanted(topo, there)["br2"]
    assert missing(want, want.values()) == 0
    assert missing(want, []) == len(want)
    ingress = [k for k in want if k in other]  # the same flow's ingress, tagged otherwise
    assert ingress and missing({k: want[k] for k in ingress}, other.values()) == 0


def test_a_journal_that_cannot_be_read_leaves_the_rules_to_the_next_probe() -> None:
    """Found by the chaos test: a replica restarting while etcd had no quorum died in its
    first probe (reading what the journal expects raised). Now the device is up, its rules
    unjudged, and the next probe, with the journal back, finds them missing."""

    async def main() -> tuple[State, State]:
        switch = Switch([])  # restarted cold: none of our rules
        journal_down = True
        want = tables_from({"br2": RULES})["br2"]

        def expected(name: str) -> dict[RuleKey, FlowRule]:
            if journal_down:
                raise JournalError("etcd cannot be used: no quorum")
            return want

        devices = DeviceTracker(
            {"br2": switch},  # type: ignore[dict-item]
            timeouts={"br2": 0.2},
            kinds={"br2": "ovs"},
            expected=expected,
        )
        first = (await devices.probe("br2")).state
        journal_down = False
        return first, (await devices.probe("br2")).state

    assert asyncio.run(main()) == (State.UP, State.OUT_OF_SYNC)
