"""PolatisScpiDriver when the SCPI connection drops mid-command (the emulator's
``:EMULator:DROP``): it reconnects, reads the table to learn whether the interrupted
change took effect, and sends it again only when it did not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from drivers.base import DeviceUnreachable
from drivers.polatis_scpi import PolatisScpiDriver
from emulators.polatis import EmulatorConfig, EmulatorServer, FixedLock
from emulators.polatis.emulator import SwitchState
from tests.drivers.test_polatis_scpi import received
from tests.drivers.test_polatis_scpi import run as run_driver

T = TypeVar("T")
TIMEOUT = 0.3  # a dropped connection looks like silence to pyvisa-py: keep the wait short
STATE = b":OXC:SWIT:CONN:STAT?\n"
IDN = b"*IDN?\n"


def run(body: Callable[[PolatisScpiDriver, EmulatorServer], Awaitable[T]]) -> T:
    """``body`` with an open driver on a fresh emulator, with a short timeout."""
    return run_driver(body, timeout=TIMEOUT)


def commands(server: EmulatorServer, head: bytes) -> list[bytes]:
    return [line for line in received(server) if line.startswith(head)]


async def arm(server: EmulatorServer, when: str) -> None:
    await server.emulator.execute(f":EMUL:DROP {when}")


@pytest.mark.parametrize(("when", "sent"), [("AFTER", 1), ("BEFORE", 2)])
def test_a_connect_cut_mid_command_is_made_exactly_once(when: str, sent: int) -> None:
    """Made before the cut: the table says so, not sent again. Not made: sent again."""

    async def body(driver: PolatisScpiDriver, server: EmulatorServer) -> EmulatorServer:
        await arm(server, when)
        await driver.connect([(2, 18)])
        assert await driver.connections() == {1: 17, 2: 18}
        return server

    server = run(body)
    adds = commands(server, b":OXC:SWIT:CONN:ADD")
    assert adds == [b":OXC:SWIT:CONN:ADD (@2),(@18)\n"] * sent
    lines = received(server)
    first_add = lines.index(adds[0])
    assert IDN in lines[first_add:]  # a new session: the handshake again
    assert STATE in lines[first_add:]  # then the table, to settle the change's fate
    assert server.emulator.state.drop == "OFF"  # the fault fired once


def test_a_disconnect_cut_after_it_took_effect_is_not_sent_again() -> None:
    async def body(driver: PolatisScpiDriver, server: EmulatorServer) -> dict[int, int]:
        await arm(server, "AFTER")
        await driver.disconnect([1])
        assert commands(server, b":OXC:SWIT:CONN:SUB") == [b":OXC:SWIT:CONN:SUB (@1),(@)\n"]
        return await driver.connections()

    assert run(body) == {}


def test_a_device_that_stays_away_is_unreachable_after_bounded_reconnects() -> None:
    async def body(driver: PolatisScpiDriver, server: EmulatorServer) -> DeviceUnreachable:
        await arm(server, "BEFORE")
        assert server._server is not None
        server._server.close()  # nothing listens any more: every reconnect is refused
        with pytest.raises(DeviceUnreachable) as err:
            await driver.connect([(2, 18)])
        return err.value

    err = run(body)
    assert "reconnects failed" in str(err), err
    assert str(err).startswith("sw1: ")


@pytest.mark.parametrize(("when", "made"), [("BEFORE", False), ("AFTER", True)])
def test_the_emulator_hangs_up_once_on_the_next_change(when: str, made: bool) -> None:
    state = SwitchState(EmulatorConfig(lock=FixedLock(ms=0)))
    state.execute(f":EMUL:DROP {when}")
    assert state.execute(":EMUL:DROP?").replies == (when,)
    assert not state.execute(":OXC:SWIT:CONN:STAT?").hangup  # queries pass
    result = state.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
    assert result.hangup
    assert (state.connections() == {2: 18}) is made
    assert not state.execute(":OXC:SWIT:CONN:SUB (@2),(@)").hangup  # once
    assert state.execute(":EMUL:DROP?").replies == ("OFF",)
