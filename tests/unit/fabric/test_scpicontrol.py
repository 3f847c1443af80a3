"""The fabric's SCPI control of its Polatis emulators, against a real emulator on a TCP port
(its own event loop in a thread), and against a server that answers nothing useful."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from emulators.polatis import EmulatorConfig, FixedLock, serve
from fabric.errors import FabricError
from fabric.kinds.polatis_scpi import control as scpicontrol


@pytest.fixture
def port() -> Iterator[int]:
    """A Polatis emulator with 2 -> 17 and 4 -> 19 lit, 40 ms locks."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    config = EmulatorConfig(connections=((2, 17), (4, 19)), lock=FixedLock(ms=40.0))
    server = asyncio.run_coroutine_threadsafe(serve(config), loop).result(timeout=5)
    try:
        yield server.port
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()


def test_the_cross_connects_and_the_lock_model_are_read_and_set(port: int) -> None:
    assert scpicontrol.connections(port) == {2: 17, 4: 19}
    assert scpicontrol.drawn_locks(port) == {}
    scpicontrol.set_lock(port, 612)
    assert scpicontrol.ask(port, ":OXC:SWIT:CONN:ADD (@3),(@18)\n*OPC?") == "1"
    assert scpicontrol.connections(port) == {2: 17, 3: 18, 4: 19}
    assert scpicontrol.drawn_locks(port) == {18: 612.0}
    scpicontrol.set_lock(port, None)  # Table 4.3's draws: not a fixed time any more
    scpicontrol.ask(port, ":OXC:SWIT:CONN:ADD (@5),(@20)\n*OPC?")
    assert scpicontrol.drawn_locks(port)[20] != 612.0
    assert scpicontrol.ask(port, "SYST:ERR?") == '0,"No error"'


def test_a_closed_port_is_a_fabric_error_naming_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(FabricError, match=f"port {free}: ':EMUL:LOCK\\?'"):
        scpicontrol.drawn_locks(free)


@pytest.mark.parametrize(
    ("answer", "call"),
    [
        (b"-100,Command error\r\n", scpicontrol.drawn_locks),
        (b"(@1,2),(@17)\r\n", scpicontrol.connections),
        (b"0\r\n", lambda port: scpicontrol.set_lock(port, 5)),
        (b"", scpicontrol.connections),  # closed without an answer
    ],
)
def test_an_answer_of_another_shape_is_a_fabric_error(answer: bytes, call: object) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:

        def answer_once() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(answer)

        thread = threading.Thread(target=answer_once, daemon=True)
        thread.start()
        port = server.getsockname()[1]
        with pytest.raises(FabricError, match=f"port {port}"):
            call(port)  # type: ignore[operator]
        thread.join(timeout=5)


def test_the_lock_reply_is_read_by_egress_port() -> None:
    assert scpicontrol.parse_lock_reply("(@19,18),(612,531)\n") == {19: 612.0, 18: 531.0}
    assert scpicontrol.parse_lock_reply("(@),()") == {}
    assert scpicontrol.parse_lock_reply("(@17),(INF)") == {17: float("inf")}
    with pytest.raises(ValueError):
        scpicontrol.parse_lock_reply("-100,Command error")
