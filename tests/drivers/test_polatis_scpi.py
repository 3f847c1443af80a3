"""PolatisScpiDriver: the pure SCPI codec, then the driver against the Polatis EMULATOR.

The emulator server runs in the test's event loop on an ephemeral port and records every
line it receives, so the exact bytes the driver sends are checked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import pytest

from drivers.base import (
    Capabilities,
    CrossConnectSwitch,
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    PortMonitor,
    PortState,
    ProtocolError,
    lookup,
)
from drivers.polatis_scpi import PolatisScpiDriver, WireLine, scpi, socket_resource
from drivers.polatis_scpi.driver import RECONNECTS, ScpiDeviceError
from drivers.polatis_scpi.scpi import Identity
from emulators.polatis import EmulatorConfig, EmulatorServer, FixedLock, serve

T = TypeVar("T")
ADD = b":OXC:SWIT:CONN:ADD "
ERR = b"SYST:ERR?\n"

# --------------------------------------------------------------------------------------
# the codec


def test_port_lists_format_and_parse() -> None:
    assert scpi.port_list([1, 2, 3]) == "(@1,2,3)"
    assert scpi.port_list([]) == "(@)"
    assert scpi.parse_port_list("(@1,2,3)") == [1, 2, 3]
    assert scpi.parse_port_list(" (@) ") == []
    assert scpi.parse_port_list("(@1, 4:6)") == [1, 4, 5, 6]


def test_commands_are_formatted_exactly() -> None:
    assert scpi.add_command([(1, 17), (2, 18)]) == ":OXC:SWIT:CONN:ADD (@1,2),(@17,18)"
    assert scpi.sub_command([1]) == ":OXC:SWIT:CONN:SUB (@1),(@)"
    assert scpi.peer_query(2) == ":OXC:SWIT:CONN:PORT? 2"
    assert scpi.power_query([17, 18]) == ":PMON:POW? (@17,18)"


def test_parse_connections() -> None:
    assert scpi.parse_connections("(@1,2,3),(@19,18,22)") == {1: 19, 2: 18, 3: 22}
    assert scpi.parse_connections("(@),(@)") == {}


def test_parse_peer_identity_size_power() -> None:
    assert scpi.parse_peer('"18"') == 18
    assert scpi.parse_peer('""') is None
    assert scpi.parse_identity("Polatis,N-VST-192x192-LA1-DMHNV-701,001705,6.5.1.7") == Identity(
        vendor="Polatis",
        product="N-VST-192x192-LA1-DMHNV-701",
        serial="001705",
        firmware="6.5.1.7",
        size=(192, 192),
    )
    assert scpi.parse_identity("Polatis,SERIES6000,1,2").size is None
    assert str(scpi.parse_identity("Polatis,N-VST-16x16-LA1,001705,6.5.1.7")) == (
        "Polatis N-VST-16x16-LA1, serial 001705, firmware 6.5.1.7"  # inventory check's line
    )
    assert scpi.parse_size("16,16") == (16, 16)
    assert scpi.parse_size("48,96") == (48, 96)
    assert scpi.parse_powers([17, 18], "(-2.31,-55.00)") == {17: -2.31, 18: -55.0}
    assert scpi.parse_powers([17], "-2.31") == {17: -2.31}


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        ('-222,"Data out of range"', (-222, "Data out of range")),
        ('-222, "Data out of range"', (-222, "Data out of range")),
        ('0,"No error"', (0, "No error")),
        ("+0,No error", (0, "No error")),
        ('1001,"Ingress already connected;2 -> 17"', (1001, "Ingress already connected;2 -> 17")),
    ],
)
def test_parse_error_loosely(reply: str, want: tuple[int, str]) -> None:
    assert scpi.parse_error(reply) == want


@pytest.mark.parametrize(
    ("parse", "reply"),
    [
        (scpi.parse_port_list, "1,2,3"),
        (scpi.parse_port_list, "(@1,x)"),
        (scpi.parse_port_list, "(@0)"),
        (scpi.parse_connections, "(@1,2),(@17)"),
        (scpi.parse_connections, "(@1)"),
        (scpi.parse_connections, "(@1,1),(@17,18)"),
        (scpi.parse_connections, "(@1),(@17),(@3)"),
        (scpi.parse_connections, "junk(@1),(@17)"),
        (scpi.parse_peer, "18"),
        (scpi.parse_peer, '"x"'),
        (scpi.parse_identity, "Polatis,N-VST"),
        (scpi.parse_size, "16"),
        (scpi.parse_size, "16,x"),
        (scpi.parse_size, "0,16"),
        (scpi.parse_error, "No error"),
        (scpi.parse_error, ""),
    ],
)
def test_malformed_replies_raise_protocol_error_with_the_reply(
    parse: Callable[[str], object], reply: str
) -> None:
    with pytest.raises(ProtocolError) as err:
        parse(reply)
    assert repr(reply) in str(err.value)


@pytest.mark.parametrize(
    ("reply", "queued"),
    [('-113,"Undefined header"', True), ('0, "No error"', True), ('+1001,"x"', True),
     ("16,16", False), ('"18"', False), ("(-2.31,-55.00)", False), ("(@1),(@17)", False),
     ("Polatis,N-VST-16x16-LA1-X-701,1,6.5.1.7", False)],
)  # fmt: skip
def test_an_error_queue_reply_is_told_from_every_query_reply(reply: str, queued: bool) -> None:
    assert scpi.is_error_reply(reply) is queued


def test_malformed_power_reply() -> None:
    with pytest.raises(ProtocolError, match=r"-2\.31"):
        scpi.parse_powers([17, 18], "(-2.31)")
    with pytest.raises(ProtocolError, match="abc"):
        scpi.parse_powers([17], "(abc)")


# --------------------------------------------------------------------------------------
# the driver against the emulator

Body = Callable[[PolatisScpiDriver, EmulatorServer], Awaitable[T]]


def run(body: Body[T], config: EmulatorConfig | None = None, timeout: float = 2.0) -> T:
    """Run ``body`` with an open driver on a fresh emulator; ``received`` starts empty."""
    config = config or EmulatorConfig(connections=((1, 17),), lock=FixedLock(ms=0), switch_ms=0)

    async def main() -> T:
        server = await serve(config, record=True)
        try:
            resource = socket_resource("127.0.0.1", server.port)
            async with PolatisScpiDriver("sw1", resource, timeout=timeout) as driver:
                received(server).clear()
                return await body(driver, server)
        finally:
            await server.close()

    return asyncio.run(main())


def received(server: EmulatorServer) -> list[bytes]:
    assert server.received is not None
    return server.received


def test_registered_and_implements_the_protocols() -> None:
    assert lookup("polatis_scpi") is PolatisScpiDriver
    driver = PolatisScpiDriver("sw1", socket_resource("127.0.0.1"))
    assert isinstance(driver, CrossConnectSwitch)
    assert isinstance(driver, PortMonitor)
    caps = driver.capabilities
    # a circuit change is SUB then ADD: two commands, not atomic
    assert (caps.atomic_batch, caps.read_back, caps.port_state, caps.optical_power) == (
        False,
        True,
        True,
        True,
    )
    assert caps.max_batch == 0


def test_open_reads_identity_and_size_and_drops_stale_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[Identity, tuple[int, int], list[bytes], int]:
        server = await serve(EmulatorConfig(ingress=8, egress=4), record=True)
        server.emulator.state.fault(-113, "Undefined header")  # another client's mistake
        try:
            async with PolatisScpiDriver("sw1", socket_resource("127.0.0.1", server.port)) as d:
                return d.identity, d.size, received(server), len(server.emulator.state.errors)
        finally:
            await server.close()

    with caplog.at_level(logging.WARNING, "reroute.drivers.polatis"):
        identity, size, sent, queued = asyncio.run(main())
    assert identity.product == "N-VST-8x4-LA1-EMUL-701"
    assert identity.size == size == (8, 4)
    probe = b":PMON:POW? (@9)\n"  # one egress port: are there power monitors?
    assert sent == [ERR, ERR, b"*IDN?\n", ERR, b":OXC:SWIT:SIZE?\n", ERR, probe, ERR]
    assert queued == 0
    assert "Undefined header" in caplog.text


def test_a_switch_of_another_size_is_refused_before_any_change() -> None:
    async def main() -> tuple[DeviceRejected, list[bytes], dict[int, int]]:
        config = EmulatorConfig(ingress=8, egress=8, connections=((1, 9),))
        server = await serve(config, record=True)
        try:
            resource = socket_resource("127.0.0.1", server.port)
            with pytest.raises(DeviceRejected) as info:
                await PolatisScpiDriver("ost1", resource, size=(16, 16)).open()
            async with PolatisScpiDriver("ost1", resource, size=(8, 8)) as right:
                table = await right.connections()
            return info.value, received(server), table
        finally:
            await server.close()

    error, sent, table = asyncio.run(main())
    assert error.code == "SIZE_MISMATCH" and error.device == "ost1"
    assert "8x8" in str(error) and "16x16" in str(error) and "nothing was changed" in str(error)
    assert not any(b"CONN:ADD" in line or b"CONN:SUB" in line for line in sent)
    assert table == {1: 9}


def test_connect_sends_one_add_then_drains_errors() -> None:
    async def body(
        d: PolatisScpiDriver, server: EmulatorServer
    ) -> tuple[list[bytes], dict[int, int]]:
        await d.connect([(2, 19), (3, 18)])
        sent = list(received(server))
        return sent, await d.connections()

    sent, table = run(body)
    assert sent == [b":OXC:SWIT:CONN:ADD (@2,3),(@19,18)\n", ERR]
    assert table == {1: 17, 2: 19, 3: 18}


def test_disconnect_sends_sub_with_an_empty_egress_list() -> None:
    async def body(
        d: PolatisScpiDriver, server: EmulatorServer
    ) -> tuple[list[bytes], dict[int, int]]:
        await d.connect([(2, 19)])
        received(server).clear()
        await d.disconnect([1, 2, 5])
        sent = list(received(server))
        return sent, await d.connections()

    sent, table = run(body)
    assert sent == [b":OXC:SWIT:CONN:SUB (@1,2,5),(@)\n", ERR]
    assert table == {}


def test_empty_changes_send_nothing() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> list[bytes]:
        await d.connect([])
        await d.disconnect([])
        return received(server)

    assert run(body) == []


def test_the_driver_never_sends_only_or_rst() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> list[bytes]:
        await d.connect([(2, 18), (3, 19)])
        await d.disconnect([2])
        await d.connections()
        await d.port_states()
        await d.peer(3)
        with pytest.raises(DeviceRejected):
            await d.connect([(3, 20)])
        return received(server)

    sent = b"".join(run(body)).upper()
    assert b"ONLY" not in sent
    assert b"*RST" not in sent


def test_device_error_raises_rejected_with_code_and_changes_nothing() -> None:
    async def body(
        d: PolatisScpiDriver, server: EmulatorServer
    ) -> tuple[DeviceRejected, DeviceRejected, dict[int, int], list[bytes]]:
        with pytest.raises(DeviceRejected) as ingress_busy:
            await d.connect([(2, 18), (1, 19)])  # 1 is connected to 17
        with pytest.raises(DeviceRejected) as egress_busy:
            await d.connect([(2, 18), (3, 17)])  # 17 is in use
        return ingress_busy.value, egress_busy.value, await d.connections(), received(server)

    ingress_busy, egress_busy, table, sent = run(body)
    assert ingress_busy.code == "1001"
    assert "Ingress already connected" in str(ingress_busy)
    assert isinstance(ingress_busy.__cause__, ScpiDeviceError)
    assert ingress_busy.__cause__.errors == ((1001, "Ingress already connected;1 -> 17"),)
    assert egress_busy.code == "1002"
    assert table == {1: 17}
    # the error queue was drained: one SYST:ERR? for the error, one for the 0
    assert sent[:3] == [b":OXC:SWIT:CONN:ADD (@2,1),(@18,19)\n", ERR, ERR]


def test_every_queued_error_is_drained_and_reported() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> DeviceRejected:
        server.emulator.state.fault(-300, "Device-specific error;layer 1: boom")
        with pytest.raises(DeviceRejected) as err:
            await d.connect([(1, 18)])  # 1001: ingress 1 is connected
        assert not server.emulator.state.errors
        return err.value

    err = run(body)
    assert err.code == "-300"
    assert "and 1 more" in str(err)
    assert isinstance(err.__cause__, ScpiDeviceError)
    assert [code for code, _ in err.__cause__.errors] == [-300, 1001]


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda d: d.connect([(17, 18)]), "out-of-range"),  # 17 is an egress port
        (lambda d: d.connect([(0, 18)]), "out-of-range"),
        (lambda d: d.connect([(2, 5)]), "out-of-range"),  # 5 is an ingress port
        (lambda d: d.connect([(2, 33)]), "out-of-range"),
        (lambda d: d.connect([(2, 18), (2, 19)]), "duplicate"),
        (lambda d: d.connect([(2, 18), (3, 18)]), "duplicate"),
        (lambda d: d.disconnect([18]), "out-of-range"),
        (lambda d: d.disconnect([2, 2]), "duplicate"),
        (lambda d: d.power([40]), "out-of-range"),
        (lambda d: d.peer(0), "out-of-range"),
    ],
)
def test_local_validation_raises_before_anything_is_sent(
    call: Callable[[PolatisScpiDriver], Awaitable[object]], code: str
) -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> tuple[str, list[bytes]]:
        with pytest.raises(DeviceRejected) as err:
            await call(d)
        return err.value.code, received(server)

    assert run(body) == (code, [])


def test_port_states_and_power_follow_the_light() -> None:
    async def body(
        d: PolatisScpiDriver, server: EmulatorServer
    ) -> tuple[dict[int, PortState], dict[int, float], dict[int, PortState], list[bytes]]:
        await server.emulator.execute(":EMUL:HOLD (@18)")  # port 2's receiver stays dark
        await d.connect([(2, 18)])
        dark = await d.port_states()
        power = await d.power([17, 18, 1, 3])
        await server.emulator.execute(":EMUL:REL (@)")
        received(server).clear()
        lit = await d.port_states()
        return dark, power, lit, received(server)

    dark, power, lit, sent = run(body)
    assert set(dark) == set(range(1, 17))
    assert dark[1] is PortState.UP
    assert dark[2] is PortState.DOWN
    assert all(dark[i] is PortState.DOWN for i in range(3, 17))
    assert power[17] == pytest.approx(-2.5, abs=0.2)
    assert power[18] == -60.0
    assert power[1] == pytest.approx(-2.5, abs=0.2)  # a connected ingress
    assert power[3] == -60.0
    assert lit[2] is PortState.UP
    ports = b",".join(b"%d" % p for p in range(17, 33))
    assert sent == [b":PMON:POW? (@" + ports + b")\n", ERR]  # the error queue drained too


def test_a_model_without_power_monitors_declares_it_and_is_never_asked_for_power() -> None:
    """An I-OST (its ``*IDN?`` says so) has no ``:PMON:POW?``: the session declares no port
    state and no optical power, and a port-state or power read raises without a query."""

    async def body(
        d: PolatisScpiDriver, server: EmulatorServer
    ) -> tuple[Capabilities, str, list[DeviceRejected], list[bytes]]:
        errors = []
        for read in (d.port_states(), d.power([17])):
            with pytest.raises(DeviceRejected) as info:
                await read
            errors.append(info.value)
        await d.connect([(2, 18)])  # its cross-connects work as any unit's
        return d.capabilities, (await d.identify()).summary, errors, received(server)

    config = EmulatorConfig(model="I-OST", lock=FixedLock(ms=0), switch_ms=0)
    caps, summary, errors, sent = run(body, config)
    assert (caps.port_state, caps.optical_power) == (False, False)
    assert "no power monitors" in summary and "I-OST-16x16" in summary
    assert {e.code for e in errors} == {"NO_POWER_MONITORS"}
    assert not any(b"PMON" in line for line in sent), sent
    assert PolatisScpiDriver.capabilities.port_state  # the class keeps its declaration


@pytest.mark.parametrize("monitors", [True, False], ids=["with monitors", "without"])
def test_power_monitors_are_found_by_a_probe_whose_refusal_is_drained(monitors: bool) -> None:
    """A unit whose family has monitors (N-VST), with or without them: ``open`` asks one
    egress port's power; answered, the unit gates on power; refused (-113, no reply), it
    declares no port state and the error is drained: nothing left for the next command."""

    async def main() -> tuple[Capabilities, list[bytes], int, list[bytes]]:
        config = EmulatorConfig(monitors=monitors, lock=FixedLock(ms=0), switch_ms=0)
        server = await serve(config, record=True)
        try:
            resource = socket_resource("127.0.0.1", server.port)
            async with PolatisScpiDriver("sw1", resource, timeout=1.0) as d:
                opened = list(received(server))
                queued = len(server.emulator.state.errors)
                received(server).clear()
                await d.connect([(2, 18)])  # its drain finds no error of the probe's
                return d.capabilities, opened, queued, received(server)
        finally:
            await server.close()

    caps, opened, queued, sent = asyncio.run(main())
    probe = b":PMON:POW? (@17)\n"
    # answered: the reply, then SYST:ERR?'s 0; refused: SYST:ERR? answers -113, again 0
    assert opened[opened.index(probe) :] == [probe, ERR, *([] if monitors else [ERR])]
    assert (caps.port_state, caps.optical_power) == (monitors, monitors)
    assert queued == 0
    assert sent == [b":OXC:SWIT:CONN:ADD (@2),(@18)\n", ERR]


def test_a_refused_query_raises_its_code_and_leaves_the_queue_empty() -> None:
    """The inventory says ``yes``, the unit has none: a power read is refused by the
    device (-113, no reply), the error drained with it, and the session goes on."""

    async def main() -> tuple[DeviceRejected, int, dict[int, int]]:
        config = EmulatorConfig(monitors=False, connections=((1, 17),), switch_ms=0)
        server = await serve(config)
        try:
            resource = socket_resource("127.0.0.1", server.port)
            driver = PolatisScpiDriver("sw1", resource, timeout=1.0, power_monitors=True)
            async with driver as d:
                with pytest.raises(DeviceRejected) as info:
                    await d.power([17])
                return info.value, len(server.emulator.state.errors), await d.connections()
        finally:
            await server.close()

    refused, queued, table = asyncio.run(main())
    assert refused.code == "-113" and "Undefined header" in str(refused)
    assert queued == 0 and table == {1: 17}


def test_the_emulated_i_ost_has_no_power_query() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> list[str]:
        return await server.emulator.execute(":PMON:POW? (@17);:SYST:ERR?")

    config = EmulatorConfig(model="I-OST", lock=FixedLock(ms=0), switch_ms=0)
    assert run(body, config) == ['-113,"Undefined header;:PMON:POWer? (no power monitors)"']


def test_power_queries_are_split_at_256_ports() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> tuple[int, list[bytes]]:
        power = await d.power(list(range(1, 301)))
        return len(power), received(server)

    count, sent = run(body, EmulatorConfig(ingress=150, egress=150))
    assert count == 300
    assert [len(line.split(b",")) for line in sent if line != ERR] == [256, 44]


def test_peer() -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> list[int | None]:
        return [await d.peer(1), await d.peer(17), await d.peer(2), await d.peer(18)]

    assert run(body) == [17, 1, None, None]


def test_wire_log_keeps_and_logs_every_line(caplog: pytest.LogCaptureFixture) -> None:
    async def body(d: PolatisScpiDriver, server: EmulatorServer) -> list[WireLine]:
        before = len(d.wire_log)
        await d.connect([(2, 18)])
        return d.wire_log[before:]

    with caplog.at_level(logging.DEBUG, "reroute.wire.polatis.sw1"):
        lines = run(body)
    assert lines == [
        WireLine(direction=">", text=":OXC:SWIT:CONN:ADD (@2),(@18)"),
        WireLine(direction=">", text="SYST:ERR?"),
        WireLine(direction="<", text='0,"No error"'),
    ]
    wire = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.polatis.sw1"]
    assert "> :OXC:SWIT:CONN:ADD (@2),(@18)" in wire
    assert '< 0,"No error"' in wire


def test_wire_log_is_bounded() -> None:
    driver = PolatisScpiDriver("sw1", socket_resource("127.0.0.1"), wire_log=2)
    assert driver.wire_log == []
    assert driver._keep.maxlen == 2


# --------------------------------------------------------------------------------------
# failures


async def _scripted(
    answers: Mapping[bytes, bytes], sessions: list[int] | None = None
) -> asyncio.Server:
    """A server that answers the lines it knows and hangs at the first it does not, silent
    from then on (``sessions`` gets one entry per connection)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if sessions is not None:
            sessions.append(len(sessions))
        hung = False
        while line := await reader.readline():
            hung = hung or line.strip() not in answers
            if not hung:
                writer.write(answers[line.strip()] + b"\r\n")
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


HANDSHAKE = {
    b"*IDN?": b"Polatis,N-VST-16x16-LA1-X-701,1,6.5.1.7",
    b":OXC:SWIT:SIZE?": b"16,16",
    b":PMON:POW? (@17)": b"(-60.00)",
    b"SYST:ERR?": b'0,"No error"',
}


def _port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


def test_a_silent_device_times_out() -> None:
    async def main() -> DeviceTimeout:
        server = await _scripted({})
        try:
            driver = PolatisScpiDriver(
                "sw1", socket_resource("127.0.0.1", _port(server)), timeout=0.3
            )
            with pytest.raises(DeviceTimeout) as err:
                await driver.open()
            return err.value
        finally:
            server.close()

    err = asyncio.run(main())
    assert "sw1" in str(err)
    assert err.__cause__ is not None


def test_after_a_timeout_the_query_is_asked_again_on_a_new_session() -> None:
    """The session of a timeout is closed (a late reply would answer the next query); the
    query is asked again on new sessions, RECONNECTS times, then the timeout is raised."""
    sessions: list[int] = []

    async def main() -> DeviceTimeout:
        server = await _scripted(HANDSHAKE, sessions)
        try:
            resource = socket_resource("127.0.0.1", _port(server))
            async with PolatisScpiDriver("sw1", resource, timeout=0.3) as driver:
                with pytest.raises(DeviceTimeout) as err:
                    await driver.connections()
                return err.value
        finally:
            server.close()

    assert "no reply" in str(asyncio.run(main()))
    assert len(sessions) == 1 + RECONNECTS


def test_a_malformed_reply_is_a_protocol_error_naming_the_device() -> None:
    async def main() -> ProtocolError:
        server = await _scripted({**HANDSHAKE, b":OXC:SWIT:CONN:STAT?": b"garbage"})
        try:
            async with PolatisScpiDriver("sw1", socket_resource("127.0.0.1", _port(server))) as d:
                with pytest.raises(ProtocolError) as err:
                    await d.connections()
                return err.value
        finally:
            server.close()

    err = asyncio.run(main())
    assert str(err).startswith("sw1: ")
    assert "'garbage'" in str(err)


def test_a_refused_connection_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there

    async def main() -> DeviceUnreachable:
        driver = PolatisScpiDriver("sw1", socket_resource("127.0.0.1", port), timeout=0.5)
        with pytest.raises(DeviceUnreachable) as err:
            await driver.open()
        return err.value

    err = asyncio.run(main())
    assert isinstance(err.__cause__, ConnectionRefusedError)


def test_calls_before_open_are_unreachable() -> None:
    driver = PolatisScpiDriver("sw1", socket_resource("127.0.0.1"))
    with pytest.raises(DeviceUnreachable, match="not connected"):
        asyncio.run(driver.connections())
    with pytest.raises(DeviceUnreachable, match="not connected"):
        asyncio.run(driver.connect([(1, 17)]))
