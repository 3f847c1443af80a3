"""The Polatis EMULATOR: state machine, lock timing through Layer 1, TCP server, CLI.

No root and no fabric needed. Timers are driven by hand (``ManualSchedule``) except in the
one test that checks a real timer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulators.polatis import (
    EmulatorConfig,
    EmulatorServer,
    FixedLock,
    PolatisEmulator,
    QuantileLock,
    SwitchState,
    serve,
)
from emulators.polatis.__main__ import main
from emulators.polatis.emulator import (
    STATE_QUERY,
    TABLE_4_3_KNOTS,
    ArmLock,
    Patch,
    Signal,
    Unpatch,
    quantile,
    read_connections,
)

ROOT = Path(__file__).resolve().parents[4]
LOCK_MS = 500.0


def switch(*connections: tuple[int, int], **kw: Any) -> SwitchState:
    return SwitchState(EmulatorConfig(connections=connections, lock=FixedLock(ms=LOCK_MS), **kw))


def ask(state: SwitchState, command: str) -> str | None:
    replies = state.execute(command).replies
    return replies[0] if replies else None


def next_error(state: SwitchState) -> int:
    reply = ask(state, "SYST:ERR?")
    assert reply is not None
    return int(reply.split(",")[0])


# --------------------------------------------------------------------------------------
# the state machine


@pytest.mark.parametrize("connections", [(), ((1, 19), (2, 18)), ((1, 17), (2, 18), (3, 19))])
def test_the_fabric_reads_back_the_cross_connects_the_emulator_states(
    connections: tuple[tuple[int, int], ...],
) -> None:
    reply = ask(switch(*connections), STATE_QUERY)
    assert reply is not None and read_connections(reply) == dict(connections)


def test_identity_and_size_come_from_the_config() -> None:
    state = switch(ingress=8, egress=4)
    assert ask(state, "*IDN?") == "Polatis,N-VST-8x4-LA1-EMUL-701,EMU0001,6.5.1.7"
    assert ask(state, ":OXC:SWIT:SIZE?") == "8,4"
    assert ask(state, "*OPC?") == "1"


@pytest.mark.parametrize(
    "command",
    [
        ":OXC:SWITch:CONNect:ADD (@2),(@18)",
        ":OXC:SWIT:CONN:ADD (@2),(@18)",
        "OXC:SWIT:CONN:ADD (@2),(@18)",
        ":oxc:switch:connect:add (@2),(@18)",
        ":OXC:SWIT:CONN:ADD (@2), (@18)",
        ":OXC:SWIT:CONN:ADD\t(@2),(@18)",
    ],
)
def test_header_forms(command: str) -> None:
    state = switch()
    state.execute(command)
    assert state.connections() == {2: 18}
    assert next_error(state) == 0


def test_error_query_forms_and_empty_queue() -> None:
    state = switch()
    for form in ("SYST:ERR?", ":SYSTem:ERRor?", "syst:err:next?", ":SYSTEM:ERROR:NEXT?"):
        assert ask(state, form) == '0,"No error"'


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("BOGUS:CMD", -113),
        (":OXC:SWITC:CONN:ADD (@2),(@18)", -113),  # neither the short nor the long form
        (":OXC:SWIT:CONN:ADD? (@2),(@18)", -113),
        (":OXC:SWIT:CONN:ADD (@2,x),(@18,19)", -102),
        (":OXC:SWIT:CONN:ADD 2,18", -102),
        (":OXC:SWIT:CONN:ADD (@2)", -109),
        (":OXC:SWIT:CONN:ADD (@2),(@18),(@19)", -108),
        (":OXC:SWIT:CONN:ADD (@2,3),(@18)", -220),
        (":OXC:SWIT:CONN:ADD (@2),(@33)", -222),
        (":OXC:SWIT:CONN:ADD (@17),(@18)", -222),  # 17 is an egress port
        (":OXC:SWIT:CONN:ADD (@0),(@18)", -222),
        (":OXC:SWIT:CONN:ADD (@2,2),(@18,19)", -224),
        (":OXC:SWIT:CONN:ADD (@2,3),(@18,18)", -224),
        (":OXC:SWIT:CONN:ADD (@2,1),(@18,19)", 1001),  # 1 is connected to 17
        (":OXC:SWIT:CONN:ADD (@2,3),(@18,17)", 1002),  # 17 is in use
        (":OXC:SWIT:CONN:SUB (@2),(@18)", 1003),
        (":OXC:SWIT:CONN:SUB (@1,2),(@17,18)", 1003),
        (":OXC:SWIT:CONN:SUB (@99),(@)", -222),
        (":OXC:SWIT:CONN:SUB (@1)", -109),
        (":OXC:SWIT:CONN:ONLY (@2,2),(@18,19)", -224),
        (":OXC:SWIT:CONN:ONLY (@2),(@40)", -222),
        ("*RST 1", -108),
        (":EMUL:HOLD (@2)", -222),
        (":EMUL:LOCK abc", -104),
        (":EMUL:LOCK -5", -222),
    ],
)
def test_a_rejected_command_queues_its_error_and_changes_nothing(command: str, code: int) -> None:
    state = switch((1, 17))
    result = state.execute(command)
    assert result.effects == ()
    assert result.replies == ()
    assert state.connections() == {1: 17}
    assert next_error(state) == code
    assert next_error(state) == 0


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("*IDN? 1", -108),
        (":OXC:SWIT:CONN:PORT? x", -102),
        (":OXC:SWIT:CONN:PORT?", -109),
        (":OXC:SWIT:CONN:PORT? 99", -222),
        (":PMON:POW? (@1,33)", -222),
        (":PMON:POW? 17", -102),
    ],
)
def test_a_failing_query_sends_no_reply(query: str, code: int) -> None:
    state = switch()
    assert ask(state, query) is None
    assert next_error(state) == code


def test_power_query_of_more_than_256_ports_is_too_much_data() -> None:
    state = switch(ingress=200, egress=200)
    assert ask(state, ":PMON:POW? (@1:257)") is None
    assert next_error(state) == -223
    reply = ask(state, ":PMON:POW? (@1:256)")
    assert reply is not None
    assert reply.count(",") == 255


def test_error_messages_and_the_queue_cap() -> None:
    state = switch((1, 17))
    state.execute(":OXC:SWIT:CONN:ADD (@2),(@40)")
    assert ask(state, "SYST:ERR?") == '-222,"Data out of range;port 40"'
    for _ in range(40):
        state.execute("BOGUS")
    assert len(state.errors) == 32
    assert state.errors[-1] == (-350, "Queue overflow")
    state.execute("*CLS")
    assert next_error(state) == 0


def test_state_and_port_queries() -> None:
    state = switch()
    assert ask(state, ":OXC:SWIT:CONN:STAT?") == "(@),(@)"
    state.execute(":OXC:SWIT:CONN:ADD (@3,1,2),(@22,19,18)")
    assert ask(state, ":OXC:SWITch:CONNect:STATe?") == "(@1,2,3),(@19,18,22)"
    assert ask(state, ":OXC:SWIT:CONN:PORT? 2") == '"18"'
    assert ask(state, ":OXC:SWIT:CONN:PORT? 18") == '"2"'
    assert ask(state, ":OXC:SWIT:CONN:PORT? 4") == '""'


def test_sub_with_an_empty_egress_list_removes_every_connection_of_those_ingresses() -> None:
    state = switch((1, 17), (2, 18), (3, 19))
    result = state.execute(":OXC:SWIT:CONN:SUB (@1,3,5),(@)")  # 5 is not connected: no error
    assert state.connections() == {2: 18}
    assert result.effects == (  # the light goes off at the command, the patches follow
        Signal(egress=17, lit=False),
        Signal(egress=19, lit=False),
        Unpatch(ingress=1, egress=17),
        Unpatch(ingress=3, egress=19),
    )
    assert next_error(state) == 0


def test_sub_of_named_pairs() -> None:
    state = switch((1, 17), (2, 18))
    state.execute(":OXC:SWIT:CONN:SUBtract (@2),(@18)")
    assert state.connections() == {1: 17}


def test_only_replaces_every_connection_and_keeps_unchanged_ones_lit() -> None:
    state = switch((1, 17), (2, 18))
    result = state.execute(":OXC:SWIT:CONN:ONLY (@2,3),(@18,19)")
    assert state.connections() == {2: 18, 3: 19}
    assert state.lit(18)
    assert not state.lit(19)
    assert result.effects == (
        Signal(egress=17, lit=False),
        Signal(egress=19, lit=False),
        Unpatch(ingress=1, egress=17),
        Patch(ingress=3, egress=19),
        ArmLock(egress=19, token=3, delay_ms=25.0 + LOCK_MS),
    )
    state.execute(":OXC:SWIT:CONN:ONLY (@),(@)")
    assert state.connections() == {}


def test_rst_drops_every_connection_but_not_the_error_queue() -> None:
    state = switch((1, 17), (2, 18))
    state.execute("BOGUS")
    state.execute("*RST")
    assert state.connections() == {}
    assert next_error(state) == -113


def test_add_goes_dark_patches_and_arms_the_lock() -> None:
    state = switch(switch_ms=10.0)
    result = state.execute(":OXC:SWIT:CONN:ADD (@2,3),(@18,19)")
    assert result.effects == (
        Signal(egress=18, lit=False),
        Signal(egress=19, lit=False),
        Patch(ingress=2, egress=18),
        ArmLock(egress=18, token=1, delay_ms=10.0 + LOCK_MS),
        Patch(ingress=3, egress=19),
        ArmLock(egress=19, token=2, delay_ms=10.0 + LOCK_MS),
    )
    assert ask(state, ":PMON:POW? (@18)") == "(-60.00)"
    assert state.lock_done(18, 1) == (Signal(egress=18, lit=True),)
    assert str(ask(state, ":PMON:POW? (@18,19)")).startswith("(-2.")


def test_a_stale_lock_timer_does_nothing() -> None:
    state = switch()
    state.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
    state.execute(":OXC:SWIT:CONN:SUB (@2),(@)")
    state.execute(":OXC:SWIT:CONN:ADD (@3),(@18)")  # token 2
    assert state.lock_done(18, 1) == ()
    assert not state.lit(18)


def test_power_levels() -> None:
    state = switch((1, 17))
    reply = ask(state, ":PMON:POWer? (@17,18,1,2)")
    assert reply is not None
    lit17, dark18, lit1, dark2 = (float(v) for v in reply.strip("()").split(","))
    assert -2.65 <= lit17 <= -2.35
    assert -2.65 <= lit1 <= -2.35  # a connected ingress reads lit (simplification)
    assert dark18 == dark2 == -60.0


def test_holddark_and_release() -> None:
    state = switch((1, 17))
    assert state.execute(":EMUL:HOLD (@17,18)").effects == (Signal(egress=17, lit=False),)
    state.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
    assert state.lock_done(18, 2) == ()  # held: the lock never comes
    assert ask(state, ":PMON:POW? (@17,18)") == "(-60.00,-60.00)"
    assert state.execute(":EMULator:RELease (@17)").effects == (Signal(egress=17, lit=True),)
    assert state.execute(":EMUL:REL (@)").effects == (Signal(egress=18, lit=True),)
    assert state.held == set()


def test_lock_control_and_query() -> None:
    state = switch()
    assert ask(state, ":EMUL:LOCK?") == "(@),()"
    state.execute(":EMUL:LOCK 612")
    state.execute(":OXC:SWIT:CONN:ADD (@3),(@19)")
    state.execute(":EMULator:LOCK 531")
    state.execute(":OXC:SWIT:CONN:ADD (@4),(@18)")
    assert ask(state, ":EMUL:LOCK?") == "(@19,18),(612,531)"
    state.execute(":EMUL:LOCK DEFault")
    assert state.lock_model == QuantileLock()
    state.execute(":EMUL:LOCK def")
    assert next_error(state) == 0


def test_lock_draws_are_reproducible_from_the_seed() -> None:
    def draws(seed: int) -> str | None:
        state = SwitchState(EmulatorConfig(seed=seed))
        state.execute(":OXC:SWIT:CONN:ADD (@1,2,3,4),(@17,18,19,20)")
        return ask(state, ":EMUL:LOCK?")

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_quantile_function_passes_through_the_knots() -> None:
    for u, ms in TABLE_4_3_KNOTS:
        assert quantile(TABLE_4_3_KNOTS, u) == pytest.approx(ms)
    assert quantile(TABLE_4_3_KNOTS, 0.74) == pytest.approx(663.0)


def test_lock_times_follow_table_4_3() -> None:
    """Seed 003 Table 4.3: mean 605, std 115, min 529, p50 532, p75 786, max 834 ms."""
    rng = __import__("random").Random(3)
    sample = [QuantileLock().draw(rng) for _ in range(2000)]
    assert 529 <= min(sample) < 531
    assert 830 < max(sample) <= 834
    assert statistics.median(sample) == pytest.approx(532, abs=2)
    assert statistics.mean(sample) == pytest.approx(605, abs=12)
    assert statistics.stdev(sample) == pytest.approx(115, abs=15)
    assert statistics.quantiles(sample, n=4)[2] == pytest.approx(786, abs=8)


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        EmulatorConfig(connections=((1, 40),))
    with pytest.raises(ValueError, match="twice"):
        EmulatorConfig(connections=((1, 17), (2, 17)))
    with pytest.raises(ValueError, match="positive"):
        EmulatorConfig(ingress=0)


# --------------------------------------------------------------------------------------
# the running emulator: Layer 1 and the lock timers


@dataclass
class RecordingLayer1:
    calls: list[tuple[object, ...]] = field(default_factory=list)
    fail_on: str = ""
    lit: asyncio.Event = field(default_factory=asyncio.Event)

    async def patch(self, ingress: int, egress: int) -> None:
        self._record("patch", ingress, egress)

    async def unpatch(self, ingress: int, egress: int) -> None:
        self._record("unpatch", ingress, egress)

    async def signal(self, egress: int, lit: bool) -> None:
        self._record("signal", egress, lit)
        if lit:
            self.lit.set()

    def _record(self, *call: object) -> None:
        if call[0] == self.fail_on:
            raise RuntimeError(f"{call[0]} failed")
        self.calls.append(call)


@dataclass
class ManualTimer:
    delay: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class ManualSchedule:
    timers: list[ManualTimer] = field(default_factory=list)

    def __call__(self, delay: float, callback: Callable[[], None]) -> ManualTimer:
        self.timers.append(ManualTimer(delay, callback))
        return self.timers[-1]

    def fire_all(self) -> None:
        for timer in self.timers:
            if not timer.cancelled:
                timer.callback()
        self.timers.clear()


def emulated(
    *connections: tuple[int, int], fail_on: str = ""
) -> tuple[PolatisEmulator, RecordingLayer1, ManualSchedule]:
    layer1 = RecordingLayer1(fail_on=fail_on)
    schedule = ManualSchedule()
    config = EmulatorConfig(connections=connections, lock=FixedLock(ms=LOCK_MS))
    return PolatisEmulator(config, layer1, schedule=schedule), layer1, schedule


def test_start_patches_and_lights_the_initial_connections() -> None:
    async def main() -> list[tuple[object, ...]]:
        emu, layer1, _ = emulated((2, 17), (1, 18))
        await emu.start()
        return layer1.calls

    assert asyncio.run(main()) == [
        ("patch", 2, 17),
        ("signal", 17, True),
        ("patch", 1, 18),
        ("signal", 18, True),
    ]


def test_add_is_dark_then_lit_after_switch_and_lock() -> None:
    async def main() -> tuple[list[tuple[object, ...]], list[float], list[tuple[object, ...]]]:
        emu, layer1, schedule = emulated()
        await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
        await emu.settle()
        before = list(layer1.calls)
        delays = [t.delay for t in schedule.timers]
        assert emu.pending_locks == [18]
        assert await emu.execute(":PMON:POW? (@18)") == ["(-60.00)"]
        schedule.fire_all()
        await emu.settle()
        assert (await emu.execute(":PMON:POW? (@18)"))[0].startswith("(-2.")
        return before, delays, layer1.calls[len(before) :]

    before, delays, after = asyncio.run(main())
    assert before == [("signal", 18, False), ("patch", 2, 18)]
    assert delays == [pytest.approx((25.0 + LOCK_MS) / 1000)]
    assert after == [("signal", 18, True)]


@dataclass
class SlowLayer1(RecordingLayer1):
    """Its Layer-1 calls wait until ``go`` is set; ``busy`` counts those waiting."""

    go: asyncio.Event = field(default_factory=asyncio.Event)
    busy: int = 0

    async def patch(self, ingress: int, egress: int) -> None:
        await self._slow()
        await super().patch(ingress, egress)

    async def unpatch(self, ingress: int, egress: int) -> None:
        await self._slow()
        await super().unpatch(ingress, egress)

    async def _slow(self) -> None:
        self.busy += 1
        await self.go.wait()
        self.busy -= 1


def test_the_lock_timer_runs_from_the_command_not_from_the_end_of_layer1_work() -> None:
    async def main() -> tuple[list[float], list[tuple[object, ...]]]:
        layer1, schedule = SlowLayer1(), ManualSchedule()
        config = EmulatorConfig(lock=FixedLock(ms=LOCK_MS))
        emu = PolatisEmulator(config, layer1, schedule=schedule)
        add = asyncio.create_task(emu.execute(":OXC:SWIT:CONN:ADD (@2,3),(@18,19)"))
        for _ in range(100):
            if layer1.busy:
                break
            await asyncio.sleep(0)
        armed = [t.delay for t in schedule.timers]  # the first patch still under way
        layer1.go.set()
        await add
        await emu.settle()
        return armed, layer1.calls

    armed, calls = asyncio.run(main())
    assert armed == [pytest.approx((25.0 + LOCK_MS) / 1000)] * 2
    assert calls == [("signal", 18, False), ("signal", 19, False), ("patch", 2, 18),
                     ("patch", 3, 19)]  # fmt: skip


def test_held_dark_stays_dark_until_released() -> None:
    async def main() -> list[tuple[object, ...]]:
        emu, layer1, schedule = emulated()
        await emu.execute(":EMUL:HOLDdark (@18)")
        await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
        schedule.fire_all()
        await emu.settle()
        assert ("signal", 18, True) not in layer1.calls
        assert await emu.execute(":PMON:POW? (@18)") == ["(-60.00)"]
        await emu.execute(":EMUL:REL (@18)")
        return layer1.calls

    assert asyncio.run(main())[-1] == ("signal", 18, True)


def test_removal_darkens_unpatches_and_cancels_the_lock_timer() -> None:
    async def main() -> tuple[list[tuple[object, ...]], bool]:
        emu, layer1, schedule = emulated()
        await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18);:OXC:SWIT:CONN:SUB (@2),(@)")
        cancelled = schedule.timers[0].cancelled
        schedule.timers[0].callback()  # a timer that fires anyway changes nothing
        await emu.settle()
        return layer1.calls, cancelled

    calls, cancelled = asyncio.run(main())
    assert cancelled
    assert calls == [
        ("signal", 18, False),
        ("patch", 2, 18),
        ("signal", 18, False),  # dark at the command; the emulator's patch work after
        ("unpatch", 2, 18),
    ]


def test_a_layer1_failure_is_queued_not_fatal() -> None:
    """Layer-1 work is overlapped: the error is in the queue once ``*OPC?`` says the
    operation is complete."""

    async def main() -> list[str]:
        emu, _, _ = emulated(fail_on="patch")
        replies = await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18);*OPC?;SYST:ERR?")
        return replies + await emu.execute(":OXC:SWIT:CONN:STAT?")

    assert asyncio.run(main()) == [
        "1",
        '-300,"Device-specific error;layer 1: patch failed"',
        "(@2),(@18)",
    ]


def test_commands_do_not_wait_for_layer1_work_but_opc_does() -> None:
    """The next command (a query of the new state, an error query) is answered while the
    emulator's own Layer-1 work for the last one is under way; ``*OPC?`` waits for it."""

    async def main() -> tuple[list[str], int, list[tuple[object, ...]], bool]:
        layer1 = SlowLayer1()
        emu = PolatisEmulator(EmulatorConfig(lock=FixedLock(ms=LOCK_MS)), layer1)
        replies = await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18);:OXC:SWIT:CONN:STAT?;SYST:ERR?")
        for _ in range(100):
            if layer1.busy:
                break
            await asyncio.sleep(0)
        busy = layer1.busy
        opc = asyncio.create_task(emu.execute("*OPC?"))
        await asyncio.sleep(0.01)
        waiting = not opc.done()
        layer1.go.set()
        replies += await opc
        await emu.close()
        return replies, busy, layer1.calls, waiting

    replies, busy, calls, waiting = asyncio.run(main())
    assert replies == ["(@2),(@18)", '0,"No error"', "1"]
    assert busy == 1 and waiting  # the patch was still under way; *OPC? waited for it
    assert calls == [("signal", 18, False), ("patch", 2, 18)]


def test_a_real_timer_lights_after_switch_plus_lock() -> None:
    async def main() -> float:
        layer1 = RecordingLayer1()
        config = EmulatorConfig(lock=FixedLock(ms=30), switch_ms=20)
        emu = PolatisEmulator(config, layer1)
        start = time.perf_counter()
        await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")
        await asyncio.wait_for(layer1.lit.wait(), 5)
        elapsed = time.perf_counter() - start
        await emu.close()
        return elapsed

    assert 0.050 <= asyncio.run(main()) < 1.0


# --------------------------------------------------------------------------------------
# the TCP server


async def _exchange(port: int, data: bytes, lines: int) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = [await asyncio.wait_for(reader.readline(), 2) for _ in range(lines)]
    writer.close()
    return got


def test_server_answers_queries_one_line_each_and_survives_errors() -> None:
    async def main() -> tuple[list[bytes], list[bytes], list[bytes] | None]:
        server = await serve(EmulatorConfig(connections=((2, 17),)), record=True)
        try:
            first = await _exchange(
                server.port, b"*IDN?\r\nBOGUS\n:OXC:SWIT:SIZE?;*OPC?\nSYST:ERR?\n", 4
            )
            other_client = await _exchange(server.port, b":OXC:SWIT:CONN:STAT?\n", 1)
            return first, other_client, server.received
        finally:
            await server.close()

    first, other, received = asyncio.run(main())
    assert first == [
        b"Polatis,N-VST-16x16-LA1-EMUL-701,EMU0001,6.5.1.7\r\n",
        b"16,16\r\n",
        b"1\r\n",
        b'-113,"Undefined header;BOGUS"\r\n',
    ]
    assert other == [b"(@2),(@17)\r\n"]
    assert received is not None
    assert received[:2] == [b"*IDN?\r\n", b"BOGUS\n"]


def test_server_close_with_a_client_and_a_pending_lock() -> None:
    async def main() -> tuple[list[int], list[int]]:
        server = await serve(EmulatorConfig())
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b":OXC:SWIT:CONN:ADD (@1),(@17)\n*OPC?\n")
        assert await asyncio.wait_for(reader.readline(), 2) == b"1\r\n"  # the ADD is done
        pending = server.emulator.pending_locks
        await server.close()
        writer.close()
        return pending, server.emulator.pending_locks

    assert asyncio.run(main()) == ([17], [])


def test_server_start_returns_the_bound_port() -> None:
    async def main() -> int:
        server = EmulatorServer(PolatisEmulator())
        port = await server.start("127.0.0.1", 0)
        await server.close()
        return port

    assert asyncio.run(main()) > 0


# --------------------------------------------------------------------------------------
# python -m emulators.polatis


def test_the_module_runs_until_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "port"
    args = ["--listen", "127.0.0.1:0", "--size", "8x8", "--connect", "2:10,1:9"]
    args += ["--lock-ms", "5", "--seed", "1", "--ready-file", str(ready)]
    cmd = [sys.executable, "-m", "emulators.polatis", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        port = int(ready.read_text())
        got = asyncio.run(_exchange(port, b":OXC:SWIT:CONN:STAT?\n:OXC:SWIT:SIZE?\n", 2))
        assert got == [b"(@1,2),(@9,10)\r\n", b"8,8\r\n"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def test_main_uses_the_layer1_factory_and_a_callers_options(tmp_path: Path) -> None:
    layer1 = RecordingLayer1()
    seen: list[str] = []
    parser = argparse.ArgumentParser()
    parser.add_argument("--fabric", required=True)

    def factory(args: argparse.Namespace) -> RecordingLayer1:
        seen.append(args.fabric)
        # SIGTERM ourselves once the loop runs: main() has installed its handlers by then
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
        return layer1

    argv = ["--listen", "127.0.0.1:0", "--connect", "3:20", "--ready-file", str(tmp_path / "p")]
    assert main([*argv, "--fabric", "ngncs"], factory, parser=parser) == 0
    assert seen == ["ngncs"]
    assert layer1.calls == [("patch", 3, 20), ("signal", 20, True)]
    assert int((tmp_path / "p").read_text()) > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--size", "0x4"],
        ["--listen", "nohost"],
        ["--connect", "2-17"],
        ["--lock-ms", "soon"],
        ["--connect", "1:40"],  # out of range for 16x16
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(argv)
    assert err.value.code == 2


def test_the_light_of_a_connection_removed_meanwhile_never_shows() -> None:
    """A connection locks (its timer fires) while Layer 1 still works on earlier commands,
    and is removed before that work reaches its light: the light is not turned on late
    for a connection that is gone (stop 49: the fabric's OCS lit a receiver for a few ms
    after a reroute had removed its connection, and the reroute's lock gate took that
    light for its new circuit's)."""

    async def main() -> list[tuple[object, ...]]:
        layer1, schedule = SlowLayer1(), ManualSchedule()
        emu = PolatisEmulator(EmulatorConfig(lock=FixedLock(ms=LOCK_MS)), layer1, schedule=schedule)
        await emu.execute(":OXC:SWIT:CONN:ADD (@2),(@18)")  # its patch waits for `go`
        schedule.fire_all()  # locked, in the emulated time
        await asyncio.sleep(0)
        await emu.execute(":OXC:SWIT:CONN:SUB (@2),(@18)")
        layer1.go.set()
        await emu.settle()
        return layer1.calls

    calls = asyncio.run(main())
    assert ("signal", 18, True) not in calls, calls
    assert calls == [("signal", 18, False), ("patch", 2, 18), ("signal", 18, False),
                     ("unpatch", 2, 18)]  # fmt: skip
