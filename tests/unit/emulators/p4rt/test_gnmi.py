"""gNMI port state: the P4Runtime EMULATOR's gNMI service (``emulators.p4rt.gnmi``) on a
real gRPC port, read by the driver's subscription (``drivers.p4runtime.gnmi``) and by
pygnmi's own client; the ports are fed to the emulator's ``PortWatch`` as its bridge
connection would, and its reading of OpenFlow port messages is checked on bytes laid out
by os-ken's formats."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from pygnmi.client import gNMIclient
from pygnmi.spec.v080 import gnmi_pb2 as G
from pygnmi.spec.v080 import gnmi_pb2_grpc

from drivers.base import PortState
from drivers.errors import DeviceTimeout
from drivers.p4runtime.gnmi import GnmiPorts, subscription
from emulators.p4rt.gnmi import GnmiEmulator, add_to_server
from emulators.p4rt.ports import Port, PortWatch

ETH1 = Port(number=1, name="br1-eth1", up=True)
ETH2 = Port(number=2, name="br1-eth2", up=False)
Served = tuple[PortWatch, str]


async def _serve(watch: PortWatch) -> tuple[Any, str]:
    server = grpc.aio.server()
    add_to_server(GnmiEmulator(watch), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def run(test: Callable[[Served], Awaitable[None]], *ports: Port, ready: bool = True) -> None:
    """``test`` against a served watch holding ``ports``."""

    async def main() -> None:
        watch = PortWatch("unix:/nonexistent")  # never started: the test feeds it
        for port in ports:
            watch.note(port)
        if ready:
            watch.ready.set()
        server, address = await _serve(watch)
        try:
            await test((watch, address))
        finally:
            await server.stop(0)

    asyncio.run(main())


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not check():
            await asyncio.sleep(0.005)


def test_the_subscription_reports_oper_status_by_ifindex_and_every_change() -> None:
    async def test(served: Served) -> None:
        watch, address = served
        ports = GnmiPorts("br1", address, timeout=2.0)
        await ports.open()
        try:
            assert await ports.port_states() == {1: PortState.UP, 2: PortState.DOWN}
            heard: list[tuple[int, PortState]] = []
            async with ports.port_events(lambda n, s: heard.append((n, s))):
                watch.note(Port(number=2, name="br1-eth2", up=True))
                watch.note(Port(number=1, name="br1-eth1", up=False))
                await _until(lambda: len(heard) >= 2)
            assert heard == [(2, PortState.UP), (1, PortState.DOWN)]
            assert await ports.port_states() == {1: PortState.DOWN, 2: PortState.UP}
            watch.note(ETH2, deleted=True)
            async with asyncio.timeout(5):
                while await ports.port_states() != {1: PortState.DOWN}:
                    await asyncio.sleep(0.005)
        finally:
            await ports.close()

    run(test, ETH1, ETH2)


def test_a_subscription_that_ended_is_made_again_on_the_next_read() -> None:
    async def main() -> None:
        watch = PortWatch("unix:/nonexistent")
        watch.note(ETH1)
        watch.ready.set()
        server, address = await _serve(watch)
        ports = GnmiPorts("br1", address, timeout=2.0)
        await ports.open()
        try:
            await server.stop(0)  # the switch's agent restarts: the stream ends
            await _until(lambda: ports._task is not None and ports._task.done())
            watch.note(Port(number=1, name="br1-eth1", up=False))  # changed meanwhile
            host, port = address.rsplit(":", 1)
            again = grpc.aio.server()
            add_to_server(GnmiEmulator(watch), again)
            again.add_insecure_port(f"{host}:{port}")
            await again.start()
            try:
                assert await ports.port_states() == {1: PortState.DOWN}
            finally:
                await again.stop(0)
        finally:
            await ports.close()

    asyncio.run(main())


def test_a_server_that_never_syncs_is_a_timeout() -> None:
    async def test(served: Served) -> None:
        ports = GnmiPorts("br1", served[1], timeout=0.3)
        with pytest.raises(DeviceTimeout, match="sync_response"):
            await ports.open()
        assert ports._client.stub is None  # closed again

    run(test, ETH1, ready=False)


async def _subscribe(address: str, request: Any) -> list[Any]:
    """What the server streams for ``request`` until the sync (or an error)."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = gnmi_pb2_grpc.gNMIStub(channel).Subscribe()
        await call.write(request)
        got = []
        while (reply := await asyncio.wait_for(call.read(), 2)) is not grpc.aio.EOF:
            got.append(reply)
            if reply.sync_response:
                break
        call.cancel()
        return got


def test_the_paths_modes_and_encodings_not_served_are_refused() -> None:
    async def test(served: Served) -> None:
        _, address = served
        bad_path = subscription()
        bad_path.subscribe.subscription[0].path.elem[2].name = "config"
        sample = subscription()
        sample.subscribe.subscription[0].mode = G.SAMPLE
        as_json = subscription()
        as_json.subscribe.encoding = G.JSON
        for request, code in [
            (bad_path, grpc.StatusCode.INVALID_ARGUMENT),
            (sample, grpc.StatusCode.UNIMPLEMENTED),
            (as_json, grpc.StatusCode.UNIMPLEMENTED),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _subscribe(address, request)
            assert info.value.code() is code

    run(test, ETH1)


def test_once_sends_every_leaf_then_the_sync() -> None:
    async def test(served: Served) -> None:
        request = subscription()
        request.subscribe.mode = G.SubscriptionList.ONCE
        got = await _subscribe(served[1], request)
        leaves = {
            (u.path.elem[1].key["name"], u.path.elem[3].name): u.val
            for r in got[:-1]
            for u in r.update.update
        }
        assert got[-1].sync_response
        assert leaves[("br1-eth1", "oper-status")].string_val == "UP"
        assert leaves[("br1-eth2", "oper-status")].string_val == "DOWN"
        assert leaves[("br1-eth2", "ifindex")].uint_val == 2

    run(test, ETH1, ETH2)


def test_pygnmi_reads_the_oper_status_from_the_emulator() -> None:
    async def test(served: Served) -> None:
        host, port = served[1].rsplit(":", 1)

        def get() -> dict[str, Any]:
            with gNMIclient(target=(host, port), insecure=True) as client:
                reply: dict[str, Any] = client.get(
                    path=["openconfig-interfaces:interfaces/interface[name=br1-eth2]/state"],
                    encoding="proto",
                )
                return reply

        reply = await asyncio.to_thread(get)
        updates = reply["notification"][0]["update"]
        values = {u["path"].rsplit("/", 1)[-1]: u["val"] for u in updates}
        assert values == {"oper-status": "DOWN", "ifindex": 2}, reply

    run(test, ETH1, ETH2)


# --------------------------------------------------------------------------------------
# the bridge's ports as OpenFlow reports them (bytes laid out by os-ken's formats)


def _ofp_port(number: int, name: str, *, config: int = 0, state: int = 0) -> bytes:
    fields = (number, b"\x02" * 6, name.encode(), config, state, 0, 0, 0, 0, 0, 0)
    return struct.pack(ofp.OFP_PORT_PACK_STR, *fields)


def _desc(*ports: bytes, more: bool = False) -> bytes:
    head = struct.pack(ofp.OFP_MULTIPART_REPLY_PACK_STR, ofp.OFPMP_PORT_DESC, int(more))
    return head + b"".join(ports)


def test_the_port_watch_reads_port_desc_and_status_and_drops_ports_gone() -> None:
    watch = PortWatch("unix:/nonexistent")
    heard: list[tuple[str, bool, bool]] = []
    writer: Any = None  # no ECHO in this exchange: nothing is written
    with watch.listen(lambda port, deleted: heard.append((port.name, port.up, deleted))):
        eth1, eth2 = _ofp_port(1, "br1-eth1"), _ofp_port(2, "br1-eth2", state=ofp.OFPPS_LINK_DOWN)
        local = _ofp_port(ofp.OFPP_LOCAL, "br1")
        watch._handle(writer, ofp.OFPT_MULTIPART_REPLY, 5, _desc(eth1, local, more=True))
        assert not watch.ready.is_set()
        watch._handle(writer, ofp.OFPT_MULTIPART_REPLY, 5, _desc(eth2))
        assert watch.ready.is_set()
        assert {n: p.up for n, p in watch.ports.items()} == {1: True, 2: False}  # no LOCAL
        down = _ofp_port(1, "br1-eth1", config=ofp.OFPPC_PORT_DOWN)
        status = struct.pack("!B7x", ofp.OFPPR_MODIFY) + down
        watch._handle(writer, ofp.OFPT_PORT_STATUS, 0, status)
        watch._handle(writer, ofp.OFPT_MULTIPART_REPLY, 6, _desc(down))  # read again: 2 gone
    assert heard == [
        ("br1-eth1", True, False),
        ("br1-eth2", False, False),
        ("br1-eth1", False, False),
        ("br1-eth2", False, True),
    ]
    assert list(watch.ports) == [1]
