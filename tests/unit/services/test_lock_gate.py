"""The executor's lock gate: waits for port-status events where every device sends them
(reading port state once, then only as a safety net), polls where one does not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from drivers.base import Capabilities, PortListener, PortState
from services.reroute.engine.executor import Executor, LockTimeout
from services.reroute.planning.plan import Step, StepKind
from services.reroute.store.sqlite import Journal

CAPS = Capabilities(atomic_batch=True, read_back=True, max_batch=0, port_state=True)
LOCK = Step(kind=StepKind.AWAIT_LOCK, device="ost1", ports=(("br2", 2),), duration_s=2.0)


class PolledPort:
    """A switch whose port 2 comes up after ``up_after`` s; port state only by reading."""

    capabilities = CAPS

    def __init__(self, name: str, up_after: float) -> None:
        self.name = name
        self.reads = 0
        self.up_at = asyncio.get_running_loop().time() + up_after

    def state(self) -> PortState:
        return PortState.UP if asyncio.get_running_loop().time() >= self.up_at else PortState.DOWN

    async def port_states(self) -> dict[int, PortState]:
        self.reads += 1
        return {1: PortState.UP, 2: self.state()}


class EventPort(PolledPort):
    """The same switch, reporting the change as an event (as OVS sends PORT_STATUS)."""

    @asynccontextmanager
    async def port_events(self, listener: PortListener) -> AsyncIterator[None]:
        delay = self.up_at - asyncio.get_running_loop().time()
        task = asyncio.get_running_loop().call_later(delay, listener, 2, PortState.UP)
        try:
            yield
        finally:
            task.cancel()


async def gate(driver: PolledPort, *, lock_events: bool = True) -> None:
    executor = Executor({"br2": driver}, Journal(None), lock_events=lock_events)  # type: ignore[dict-item]
    await executor._await_lock(LOCK)


def test_with_events_the_gate_reads_once_and_opens_on_the_event() -> None:
    async def main() -> int:
        switch = EventPort("br2", up_after=0.03)
        await gate(switch)
        assert switch.state() is PortState.UP
        return switch.reads

    assert asyncio.run(main()) == 1  # no polling: the event opened the gate


def test_without_events_the_gate_polls() -> None:
    async def main() -> tuple[int, int]:
        polled = PolledPort("br2", up_after=0.03)
        await gate(polled)
        eventful = EventPort("br2", up_after=0.03)
        await gate(eventful, lock_events=False)
        return polled.reads, eventful.reads

    polled, forced = asyncio.run(main())
    assert polled > 3 and forced > 3


def test_no_event_and_no_lock_times_out_naming_the_port() -> None:
    async def main() -> None:
        switch = EventPort("br2", up_after=60.0)
        step = Step(kind=StepKind.AWAIT_LOCK, device="ost1", ports=(("br2", 2),), duration_s=0.12)
        executor = Executor({"br2": switch}, Journal(None))  # type: ignore[dict-item]
        with pytest.raises(LockTimeout, match="br2:p2 still down"):
            await executor._await_lock(step)
        assert 2 <= switch.reads <= 4  # the safety re-read every 50 ms, not a 2 ms poll

    asyncio.run(main())


class StalePort(EventPort):
    """Port 2 still reads up (lit by the old circuit, or its switch has not noticed the
    change yet) until ``down_after`` s, then down until ``up_after`` s: the new circuit's
    light."""

    def __init__(self, name: str, down_after: float, up_after: float) -> None:
        super().__init__(name, up_after)
        self.down_at = asyncio.get_running_loop().time() + down_after

    def state(self) -> PortState:
        now = asyncio.get_running_loop().time()
        return PortState.DOWN if self.down_at <= now < self.up_at else PortState.UP

    def went_down(self, listener: PortListener) -> None:
        """Report port 2 going down."""
        listener(2, PortState.DOWN)

    @asynccontextmanager
    async def port_events(self, listener: PortListener) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        down = loop.call_later(self.down_at - loop.time(), self.went_down, listener)
        up = loop.call_later(self.up_at - loop.time(), listener, 2, PortState.UP)
        try:
            yield
        finally:
            down.cancel()
            up.cancel()


@pytest.mark.parametrize("lock_events", [True, False], ids=["events", "polled"])
def test_a_port_still_up_from_the_old_circuit_is_not_the_lock(lock_events: bool) -> None:
    async def main() -> float:
        switch = StalePort("br2", down_after=0.03, up_after=0.09)
        loop = asyncio.get_running_loop()
        await gate(switch, lock_events=lock_events)
        return switch.up_at - loop.time()

    assert asyncio.run(main()) <= 0  # it opened once the port came up again, not before


def test_a_port_that_never_goes_down_times_out_saying_so() -> None:
    async def main() -> None:
        switch = StalePort("br2", down_after=60.0, up_after=61.0)
        step = Step(kind=StepKind.AWAIT_LOCK, device="ost1", ports=(("br2", 2),), duration_s=0.1)
        executor = Executor({"br2": switch}, Journal(None))  # type: ignore[dict-item]
        with pytest.raises(LockTimeout, match="br2:p2 never went down"):
            await executor._await_lock(step)

    asyncio.run(main())


class LateReply(StalePort):
    """A read's reply is the state when the switch answered it (the old light: up), and it
    reaches the gate after the switch's down event was already handed to the watch: OVS
    sends the reply, then PORT_STATUS, and the driver's reader passes both on before the
    gate's task resumes (under load, tens of ms)."""

    async def port_states(self) -> dict[int, PortState]:
        self.reads += 1
        answered = {1: PortState.UP, 2: self.state()}
        await asyncio.sleep(0.04)  # the down event (at 10 ms) is handed on meanwhile
        return answered


def test_a_read_answered_before_the_down_event_is_not_the_lock() -> None:
    """Stop 49's loss of 63 datagrams in eight reroutes at once: a gate that took the read's
    stale "up" for the lock, because the down event had arrived before the read's reply
    was looked at (and was set aside as "in the read"), opened 172 ms after the circuits
    changed and moved the traffic onto a circuit still dark for 375 ms."""

    async def main() -> float:
        switch = LateReply("br2", down_after=0.01, up_after=0.2)
        loop = asyncio.get_running_loop()
        await gate(switch)
        return switch.up_at - loop.time()

    assert asyncio.run(main()) <= 0  # it opened once the port came up again, not before


class UpThenDown(StalePort):
    """Port 2 reads up (the old light) until its switch notices the change, 20 ms in, and
    reports it as OVS does: an "up" (another of the port's attributes changed first) and a
    "down", handed to the watch at once; the new circuit's light comes at ``up_after``."""

    def __init__(self, name: str, up_after: float) -> None:
        super().__init__(name, down_after=0.02, up_after=up_after)

    def went_down(self, listener: PortListener) -> None:
        listener(2, PortState.UP)
        listener(2, PortState.DOWN)


def test_an_up_and_a_down_handed_on_together_are_taken_in_order() -> None:
    """Stop 49's losses of 71-89 datagrams in eight reroutes at once: the "down" was
    counted as soon as it was handed on, the "up" before it then read as the lock, and
    the gate opened ~450 ms before the new circuit locked."""

    async def main() -> float:
        switch = UpThenDown("br2", up_after=0.2)
        loop = asyncio.get_running_loop()
        await gate(switch)
        return switch.up_at - loop.time()

    assert asyncio.run(main()) <= 0  # it opened once the port came up again, not before
