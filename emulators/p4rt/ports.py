"""The EMULATOR's ports: the real ports of its Open vSwitch bridge, as OpenFlow 1.3 reports
them on a connection of their own to the bridge's management socket, for its gNMI server
(``emulators.p4rt.gnmi``).

The connection asks for port status (GET_CONFIG, then SET_CONFIG with the bridge's own
flags and a miss_send_len: Open vSwitch sends a service connection such as its management
socket no asynchronous messages without one; SET_ASYNC: port status only), reads every
port (PORT_DESC), then follows PORT_STATUS. A port is up unless its link is down
(OFPPS_LINK_DOWN) or it is administratively down (OFPPC_PORT_DOWN); reserved ports (LOCAL)
are left out. A lost connection is made again (every ``RETRY_S``), and every port read
again (a port no longer described is deleted). Its own small codec, as ``ofwire``:
nothing of the drivers'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from emulators.p4rt import ofwire

log = logging.getLogger("reroute.emulators.p4rt")
OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 2, 3
OFPT_GET_CONFIG_REQUEST, OFPT_GET_CONFIG_REPLY, OFPT_SET_CONFIG = 7, 8, 9
OFPT_PORT_STATUS, OFPT_MULTIPART_REQUEST, OFPT_MULTIPART_REPLY = 12, 18, 19
OFPT_SET_ASYNC = 28
OFPMP_PORT_DESC, OFPMPF_REPLY_MORE = 13, 1
OFPPR_DELETE = 1
LINK_DOWN = PORT_DOWN = 1  # OFPPS_LINK_DOWN (state), OFPPC_PORT_DOWN (config)
MAX_PORT = 0xFFFFFF00  # OFPP_MAX: numbers above are reserved (LOCAL, CONTROLLER, ...)
MISS_SEND_LEN = 128
ALL_REASONS = 0b111  # port status: add, delete, modify
PORT = struct.Struct("!I4x6s2x16sII24x")  # port_no, hw_addr, name, config, state (64 bytes)
MULTIPART = struct.Struct("!HH4x")  # type, flags
RETRY_S = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Port:
    """One port of the bridge: its OpenFlow number, name, and whether it is up."""

    number: int
    name: str
    up: bool


Listener = Callable[[Port, bool], None]  # (port, deleted)


def parse_port(body: bytes, offset: int = 0) -> Port:
    """An ``ofp_port`` (OpenFlow 1.3, 64 bytes) at ``offset``."""
    number, _, name, config, state = PORT.unpack_from(body, offset)
    up = not (state & LINK_DOWN or config & PORT_DOWN)
    return Port(number=number, name=name.rstrip(b"\0").decode(errors="replace"), up=up)


def parse_port_desc(body: bytes) -> tuple[list[Port], bool]:
    """The ports of one PORT_DESC multipart reply, and whether more replies follow."""
    kind, flags = MULTIPART.unpack_from(body)
    if kind != OFPMP_PORT_DESC:
        return [], True
    start = MULTIPART.size
    ports = [parse_port(body, at) for at in range(start, len(body) - PORT.size + 1, PORT.size)]
    return ports, bool(flags & OFPMPF_REPLY_MORE)


class PortWatch:
    """The bridge's ports at ``target`` (``unix:PATH`` or ``tcp:HOST:PORT``), kept current
    by a task (``start`` / ``stop``); ``listen`` is told every change."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.ports: dict[int, Port] = {}
        self.ready = asyncio.Event()  # every port read at least once
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._described: set[int] = set()  # ports of the PORT_DESC being read

    def start(self) -> None:
        """Follow the bridge's ports (in the background)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop following them."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @contextlib.contextmanager
    def listen(self, listener: Listener) -> Iterator[None]:
        """Inside, ``listener(port, deleted)`` is called for every change."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    def note(self, port: Port, deleted: bool = False) -> None:
        """A port read or reported now (``deleted``: gone); listeners hear of a change."""
        if port.number >= MAX_PORT:
            return
        old = self.ports.pop(port.number, None) if deleted else self.ports.get(port.number)
        if not deleted:
            self.ports[port.number] = port
        if old != port or deleted:
            for listener in list(self._listeners):
                listener(port, deleted)

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except (OSError, asyncio.IncompleteReadError, struct.error) as exc:
                log.warning("ports of %s: %s; connecting again", self.target, exc)
            await asyncio.sleep(RETRY_S)

    async def _follow(self) -> None:
        reader, writer = await _connect(self.target)
        try:
            writer.write(ofwire.hello(1) + ofwire.message(OFPT_GET_CONFIG_REQUEST, 2, b""))
            await writer.drain()
            await _read(reader)  # HELLO
            await self._ask(reader, writer)
            while True:
                kind, xid, body = await _read(reader)
                self._handle(writer, kind, xid, body)
        finally:
            writer.close()

    async def _ask(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """SET_CONFIG (the bridge's flags), SET_ASYNC, PORT_DESC, once GET_CONFIG answers."""
        while (got := await _read(reader))[0] != OFPT_GET_CONFIG_REPLY:
            self._handle(writer, *got)
        (flags,) = struct.unpack_from("!H", got[2])
        async_masks = struct.pack("!IIIIII", 0, 0, ALL_REASONS, ALL_REASONS, 0, 0)
        writer.write(
            ofwire.message(OFPT_SET_CONFIG, 3, struct.pack("!HH", flags, MISS_SEND_LEN))
            + ofwire.message(OFPT_SET_ASYNC, 4, async_masks)
            + ofwire.message(OFPT_MULTIPART_REQUEST, 5, MULTIPART.pack(OFPMP_PORT_DESC, 0))
        )
        await writer.drain()

    def _handle(self, writer: asyncio.StreamWriter, kind: int, xid: int, body: bytes) -> None:
        if kind == OFPT_ECHO_REQUEST:
            writer.write(ofwire.message(OFPT_ECHO_REPLY, xid, body))
        elif kind == OFPT_PORT_STATUS:
            self.note(parse_port(body, 8), deleted=body[0] == OFPPR_DELETE)
        elif kind == OFPT_MULTIPART_REPLY:
            ports, more = parse_port_desc(body)
            for port in ports:
                self._described.add(port.number)
                self.note(port)
            if not more:  # every port read: those not described are gone
                for gone in [p for n, p in self.ports.items() if n not in self._described]:
                    self.note(gone, deleted=True)
                self._described.clear()
                self.ready.set()


async def _connect(target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    scheme, _, rest = target.partition(":")
    if scheme == "unix":
        return await asyncio.open_unix_connection(rest)
    host, _, port = rest.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def _read(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """One message: (type, xid, body)."""
    _, kind, length, xid = ofwire.HEADER.unpack(await reader.readexactly(ofwire.HEADER.size))
    return kind, xid, await reader.readexactly(length - ofwire.HEADER.size)
