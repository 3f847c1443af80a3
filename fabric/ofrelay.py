"""An OpenFlow relay that makes a switch look like one without the bundle extension.

A real OpenFlow 1.3 switch need not implement ONF bundles (an OVS extension on 1.3, the
standard only from 1.4); Open vSwitch always does. ``BundlelessRelay`` sits between a client
and an OVS bridge's management socket and passes every message through both ways, except
bundle messages from the client: those it answers itself with the error a switch without
the extension sends (OpenFlow 1.3 spec, 7.4.4: ``OFPET_BAD_REQUEST`` with
``OFPBRC_BAD_EXPERIMENTER`` for an unknown experimenter, ``OFPBRC_BAD_TYPE`` for the 1.4
bundle message types), carrying the first 64 bytes of the refused message.

It parses only the 8-byte OpenFlow header and the experimenter id (its own code, not the
driver's), so everything else on the wire is the real switch's.

    relay = BundlelessRelay(upstream="/run/x/br0.mgmt")
    target = await relay.start()       # "tcp:127.0.0.1:PORT"
    ...
    await relay.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field

HEADER = struct.Struct("!BBHI")  # version, type, length, xid
OFPT_ERROR = 1
OFPT_EXPERIMENTER = 4
OFPT_BUNDLE_CONTROL = 33  # OpenFlow 1.4+
OFPT_BUNDLE_ADD_MESSAGE = 34
ONF_EXPERIMENTER = 0x4F4E4600
ONF_BUNDLE_TYPES = (2300, 2301)  # ONFT_BUNDLE_CONTROL, ONFT_BUNDLE_ADD_MESSAGE
OFPET_BAD_REQUEST = 1
OFPBRC_BAD_TYPE = 1
OFPBRC_BAD_EXPERIMENTER = 3


def refusal(msg: bytes) -> bytes | None:
    """The ERROR a switch without bundles answers ``msg`` with; None for other messages."""
    version, msg_type, _, xid = HEADER.unpack_from(msg)
    code: int | None = None
    if msg_type in (OFPT_BUNDLE_CONTROL, OFPT_BUNDLE_ADD_MESSAGE):
        code = OFPBRC_BAD_TYPE
    elif msg_type == OFPT_EXPERIMENTER and len(msg) >= 16:
        experimenter, exp_type = struct.unpack_from("!II", msg, 8)
        if experimenter == ONF_EXPERIMENTER and exp_type in ONF_BUNDLE_TYPES:
            code = OFPBRC_BAD_EXPERIMENTER
    if code is None:
        return None
    data = msg[:64]
    body = struct.pack("!HH", OFPET_BAD_REQUEST, code) + data
    return HEADER.pack(version, OFPT_ERROR, HEADER.size + len(body), xid) + body


async def read_message(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(HEADER.size)
    length = HEADER.unpack(head)[2]
    return head + (await reader.readexactly(length - HEADER.size) if length > 8 else b"")


@dataclass(slots=True)
class BundlelessRelay:
    """Relays clients on 127.0.0.1 to ``upstream`` (a bridge's unix management socket)."""

    upstream: str
    refused: int = 0  # bundle messages answered with an error so far
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> str:
        """Listen; returns the target to give a driver (``tcp:127.0.0.1:PORT``)."""
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"tcp:127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        down = asyncio.create_task(self._pipe(up_reader, writer, refuse=None))
        try:
            await self._pipe(reader, up_writer, refuse=writer)
        finally:
            down.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await down
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        refuse: asyncio.StreamWriter | None,
    ) -> None:
        """Copy messages until EOF; with ``refuse``, bundle messages are answered there."""
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
            while True:
                msg = await read_message(reader)
                error = refusal(msg) if refuse is not None else None
                if error is not None and refuse is not None:
                    self.refused += 1
                    refuse.write(error)
                    await refuse.drain()
                    continue
                writer.write(msg)
                await writer.drain()
