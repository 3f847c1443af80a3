"""The EMULATORS' write log (``REROUTE_WRITE_LOG``): off by default; on, one line per
accepted change, naming the connection and the process that made it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulators.polatis.emulator import EmulatorConfig
from emulators.polatis.server import serve
from emulators.writelog import ENV, peer_pid


async def _session(port: int, lines: bytes) -> str:
    """Send ``lines`` then ``*OPC?``; the client's own address."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(lines + b"*OPC?\n")
    while not (await asyncio.wait_for(reader.readline(), 2)).startswith(b"1\r"):
        pass  # the replies of the queries in ``lines``
    host, client_port = writer.get_extra_info("sockname")[:2]
    writer.close()
    return f"{host}:{client_port}"


def _run(lines: bytes) -> tuple[int, str]:
    async def main() -> tuple[int, str]:
        server = await serve(EmulatorConfig(connections=((2, 17),)))
        try:
            return server.port, await _session(server.port, lines)
        finally:
            await server.close()

    return asyncio.run(main())


def test_the_polatis_emulator_logs_each_accepted_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "writes.jsonl"
    monkeypatch.setenv(ENV, str(log))
    add, conflict = b":OXC:SWIT:CONN:ADD (@1),(@18)\n", b":OXC:SWIT:CONN:ADD (@3),(@18)\n"
    port, client = _run(
        b":OXC:SWIT:CONN:STAT?\n" + add + conflict + b":OXC:SWIT:CONN:SUB (@2),(@17)\n"
    )
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["device"], e["peer"], e["pid"]) for e in lines] == [
        (f"polatis@127.0.0.1:{port}", client, os.getpid())
    ] * 2
    assert [e["what"] for e in lines] == [
        ":OXC:SWIT:CONN:ADD (@1),(@18)",
        ":OXC:SWIT:CONN:SUB (@2),(@17)",
    ]


def test_the_log_is_off_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    _run(b":OXC:SWIT:CONN:ADD (@1),(@18)\n")
    assert list(tmp_path.iterdir()) == []


def test_peer_pid_finds_this_process_and_not_a_closed_port() -> None:
    async def main() -> int | None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        host, mine = writer.get_extra_info("sockname")[:2]
        found = peer_pid(f"{host}:{mine}")
        writer.close()
        server.close()
        return found

    assert asyncio.run(main()) == os.getpid()
    assert peer_pid("127.0.0.1:1") is None


class _Datapath:
    """What ofctl's ``mod_flow_entry`` needs of an os-ken datapath: it sends, we keep."""

    def __init__(self) -> None:
        from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

        self.id = 1
        self.ofproto, self.ofproto_parser = ofproto_v1_3, ofproto_v1_3_parser
        self.sent: list[object] = []

    def set_xid(self, msg: Any) -> None:
        msg.set_xid(len(self.sent) + 1)

    def send_msg(self, msg: object) -> None:
        self.sent.append(msg)


class _Switches:
    def __init__(self) -> None:
        self.dp = _Datapath()

    def connected_dpids(self) -> list[int]:
        return [1]

    def datapath(self, dpid: int) -> _Datapath | None:
        return self.dp if dpid == 1 else None

    async def multipart(self, dpid: int, msg: object) -> list[object]:
        return []


def test_the_ryu_emulator_logs_flow_writes_not_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from emulators.ryu.rest import make_app

    log = tmp_path / "writes.jsonl"
    monkeypatch.setenv(ENV, str(log))
    switches = _Switches()

    async def main() -> tuple[list[int], str]:
        async with TestClient(TestServer(make_app(switches))) as client:
            flow = '{"dpid": 1, "priority": 7, "match": {"in_port": 1}}'
            statuses = [(await client.post("/stats/flowentry/add", data=flow)).status]
            statuses.append((await client.post("/stats/flow/1", data="{}")).status)  # a read
            statuses.append((await client.post("/stats/flowentry/bogus", data=flow)).status)
            return statuses, f"127.0.0.1:{client.port}"

    statuses, server = asyncio.run(main())
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert statuses == [200, 200, 404] and len(switches.dp.sent) == 1
    assert (entry["device"], entry["pid"]) == (f"ryu@{server}/1", os.getpid())
    assert entry["what"].startswith("POST /stats/flowentry/add {")


_OTHER = """
import socket, sys, time
server = socket.create_server(("127.0.0.1", 0))
client = socket.socket()
client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
client.bind(("127.0.0.1", int(sys.argv[1])))
client.connect(server.getsockname())
accepted = server.accept()
print("ready", flush=True)
time.sleep(30)
"""


def _client(port: int, server: socket.socket) -> tuple[socket.socket, socket.socket]:
    """A connection from ``127.0.0.1:port`` (shared: SO_REUSEADDR) to ``server``."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    client.bind(("127.0.0.1", port))
    client.connect(server.getsockname())
    return client, server.accept()[0]


@pytest.mark.parametrize("other_first", [True, False])
def test_peer_pid_tells_apart_two_connections_on_one_local_port(other_first: bool) -> None:
    """Linux gives one local port to connections with other destinations: the process is
    the one whose connection ends at a socket of ours, whichever was made first (four
    ports each: the order ``/proc/net/tcp`` lists them in is a hash's)."""
    for _ in range(4):
        assert _shared_port_owner(other_first) == os.getpid()


def _shared_port_owner(other_first: bool) -> int | None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = [server]
    if not other_first:
        held += _client(port, server)
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ready"
        if other_first:
            held += _client(port, server)
        return peer_pid(f"127.0.0.1:{port}")
    finally:
        other.kill()
        other.communicate()
        for s in held:
            s.close()
