"""Liveness of the drivers that keep a connection (issue 29, part 2): a quiet OpenFlow
channel is kept by ECHO and dropped when the switch stops answering it; a P4Runtime
server paused (SIGSTOP) is reported not up by the device tracker and up again once it
continues; one that comes back without its program is refused PIPELINE_MISMATCH on every
request (never the program it ran before) until the program is put back."""

from __future__ import annotations

import asyncio

import pytest

from drivers.base import FlowChange, FlowOp, FlowRule
from drivers.errors import DeviceRejected, DeviceUnreachable
from drivers.ovs.channel import Channel
from drivers.p4runtime import P4RuntimeDriver
from emulators.p4rt.program import DEFAULT_P4INFO, Pipeline, load
from emulators.p4rt.server import P4RuntimeEmulator, serve
from emulators.p4rt.table import Table
from services.reroute.devicestate import DeviceTracker, State
from tests.drivers.conftest import OvsSite
from tests.drivers.p4rt_site import P4rtSite
from tests.drivers.test_p4runtime import RULE, FakeBridge
from tests.e2e.faults.harness import paused

TIMEOUT_S = 0.3
PATIENCE_S = 10.0  # how long a test waits for what must happen (no timing is asserted)


@pytest.mark.fabric
def test_a_quiet_openflow_channel_lives_on_echo_and_is_dropped_when_the_switch_stops(
    ovs_site: OvsSite,
) -> None:
    pid = int((ovs_site.ovs.rundir / "ovs-vswitchd.pid").read_text().strip())

    async def main() -> tuple[bool, bool, str]:
        chan = await Channel.open("br13", ovs_site.ovs.mgmt("br13"), timeout=TIMEOUT_S)
        try:
            await asyncio.sleep(5 * TIMEOUT_S)  # quiet: only ECHOs, which OVS answers
            quiet_alive = chan.alive
            with paused(pid):
                async with asyncio.timeout(PATIENCE_S):
                    while chan.alive:
                        await asyncio.sleep(0.02)
            with pytest.raises(DeviceUnreachable) as lost:
                chan.send([b""])
            return quiet_alive, chan.alive, str(lost.value)
        finally:
            await chan.close()

    quiet_alive, alive, error = asyncio.run(main())
    assert quiet_alive and not alive
    assert "no answer to ECHO_REQUEST" in error, error


@pytest.mark.fabric
def test_a_paused_p4runtime_server_is_reported_not_up_then_up_again(p4rt: P4rtSite) -> None:
    """SIGSTOP: its TCP connections stay open, nothing answers. The tracker probing the
    driver reports it hung (or down, once the driver gave the connection up); after SIGCONT
    it is up, and the driver writes again on the same session."""
    p4rt.reset()

    async def main() -> tuple[State, State, State, list[FlowRule]]:
        driver = P4RuntimeDriver(
            "p4sw", p4rt.emulator.address, device_id=1, election_id=91, timeout=TIMEOUT_S
        )
        async with driver:
            devices = DeviceTracker({"p4sw": driver}, timeouts={"p4sw": TIMEOUT_S})
            first = (await devices.probe("p4sw")).state
            devices.start()
            try:
                with paused(p4rt.emulator.process.pid):
                    stopped = await devices.wait_for("p4sw", [State.HUNG, State.DOWN], PATIENCE_S)
                back = await devices.wait_for("p4sw", [State.UP], PATIENCE_S)
            finally:
                await devices.stop()
            await driver.apply([FlowChange(op=FlowOp.ADD, rule=RULE)])
            read = await driver.read()
            await driver.apply([FlowChange(op=FlowOp.DELETE, rule=RULE)])
            return first, stopped.state, back.state, read

    first, stopped, back, read = asyncio.run(main())
    assert first is State.UP and stopped in (State.HUNG, State.DOWN) and back is State.UP
    assert read == [RULE]


def test_a_server_back_without_its_program_is_refused_until_it_is_put_back() -> None:
    """The server restarts cold on the same address without a pipeline: the session is
    never handed out with the program it ran before; every request is refused
    PIPELINE_MISMATCH (asked again each time), the device is down since the loss and the
    tracker says no_pipeline; ``install_program`` puts the inventory's program back (the
    device had no tables to reset), after which it is written and read, up again."""

    async def main() -> tuple[list[str], float | None, State, int, list[FlowRule], State, bool]:
        pipeline = Pipeline.of(load(DEFAULT_P4INFO))
        server, port = await serve(
            P4RuntimeEmulator(1, Table(FakeBridge(), pipeline)), "127.0.0.1:0"
        )
        address = f"127.0.0.1:{port}"
        driver = P4RuntimeDriver(
            "p4sw", address, device_id=1, election_id=5, timeout=1.0, p4info=DEFAULT_P4INFO
        )
        try:
            async with driver:
                devices = DeviceTracker({"p4sw": driver}, timeouts={"p4sw": 1.0})
                await driver.apply([FlowChange(op=FlowOp.ADD, rule=RULE)])
                await server.stop(None)
                cold = P4RuntimeEmulator(1, Table(FakeBridge(), pipeline), installed=False)
                server, _ = await serve(cold, address)
                codes: list[str] = []  # a read before the stream's end is seen: its own code
                while codes[-2:] != ["PIPELINE_MISMATCH"] * 2 and len(codes) < 5:
                    with pytest.raises(DeviceRejected) as refused:
                        await driver.read()
                    codes.append(refused.value.code)
                down_since = driver.down_since
                state = (await devices.probe("p4sw")).state
                before = cold.pipelines_set
                await driver.install_program()
                installs = cold.pipelines_set - before
                read = await driver.read()
                after = (await devices.probe("p4sw")).state
                return codes, down_since, state, installs, read, after, driver.down_since is None
        finally:
            await server.stop(None)

    codes, down_since, state, installs, read, after, cleared = asyncio.run(main())
    assert codes[-2:] == ["PIPELINE_MISMATCH"] * 2, codes
    assert set(codes) <= {"PIPELINE_MISMATCH", "FAILED_PRECONDITION"}, codes  # never served
    assert down_since is not None and state is State.NO_PIPELINE
    assert installs == 1 and read == [] and after is State.UP  # the tables were lost
    assert cleared  # down_since cleared by the new session


def test_without_a_p4info_file_the_program_cannot_be_put_back() -> None:
    async def main() -> str:
        pipeline = Pipeline.of(load(DEFAULT_P4INFO))
        server, port = await serve(
            P4RuntimeEmulator(1, Table(FakeBridge(), pipeline)), "127.0.0.1:0"
        )
        try:
            async with P4RuntimeDriver("p4sw", f"127.0.0.1:{port}", device_id=1) as driver:
                with pytest.raises(DeviceRejected) as refused:
                    await driver.install_program()
                return f"{refused.value.code}: {refused.value}"
        finally:
            await server.stop(None)

    assert asyncio.run(main()).startswith("PIPELINE_MISMATCH: p4sw: device 1 runs no P4")
