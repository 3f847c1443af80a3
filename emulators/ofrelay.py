"""An OpenFlow relay that makes an Open vSwitch bridge look like a switch without OVS's
extensions.

Open vSwitch answers more than many real switches: ONF bundles on OpenFlow 1.3 (an
extension there, standard only from 1.4), and on OpenFlow 1.0 the port-description stats
request (stats type 13, which OpenFlow 1.0 does not define; a real HP switch answers it
with BAD_STAT). ``Relay`` sits between a client and a bridge's listener (``unix:PATH`` or
``tcp:HOST:PORT``) and passes every message through both ways, except the client's
messages its ``refuse`` function picks: those it answers itself with the error such a
switch sends (OpenFlow 1.3 spec 7.4.4, 1.0 spec 5.4.4: ``OFPET_BAD_REQUEST`` with
``OFPBRC_BAD_EXPERIMENTER``, ``OFPBRC_BAD_TYPE`` or ``OFPBRC_BAD_STAT``), carrying the
first 64 bytes of the refused message.

- ``refuse_bundles``: ONF bundle messages (1.3) and the 1.4 bundle message types;
- ``ignore_bundles``: the same messages dropped, never answered (``SILENT``), as a switch
  that ignores unknown experimenter messages does;
- ``refuse_of10_port_desc``: OpenFlow 1.0 stats requests of type 13 (port description).

It parses only the 8-byte OpenFlow header and the experimenter or stats type (its own
code, not the driver's), so everything else on the wire is the real switch's.

    relay = Relay(upstream="unix:/run/x/br0.mgmt", refuse=refuse_bundles)
    target = await relay.start()       # "tcp:127.0.0.1:PORT"
    ...
    await relay.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
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
OFPBRC_BAD_STAT = 2
OFPBRC_BAD_EXPERIMENTER = 3
OF10 = 0x01
OFPT10_STATS_REQUEST = 16
OFPST_PORT_DESC = 13

SILENT = -1  # a ``Refuse`` code: drop the message, answer nothing
Refuse = Callable[[bytes], int | None]  # a client message -> the BAD_REQUEST code, or None


def refuse_bundles(msg: bytes) -> int | None:
    """Bundle messages, as a switch without the bundle extension refuses them."""
    msg_type = msg[1]
    if msg_type in (OFPT_BUNDLE_CONTROL, OFPT_BUNDLE_ADD_MESSAGE):
        return OFPBRC_BAD_TYPE
    if msg_type == OFPT_EXPERIMENTER and len(msg) >= 16:
        experimenter, exp_type = struct.unpack_from("!II", msg, 8)
        if experimenter == ONF_EXPERIMENTER and exp_type in ONF_BUNDLE_TYPES:
            return OFPBRC_BAD_EXPERIMENTER
    return None


def ignore_bundles(msg: bytes) -> int | None:
    """Bundle messages dropped without a word, as a switch that silently ignores unknown
    experimenter messages does (against the specification, which asks for an error)."""
    return None if refuse_bundles(msg) is None else SILENT


def refuse_of10_port_desc(msg: bytes) -> int | None:
    """OpenFlow 1.0 port-description stats requests, which 1.0 does not define."""
    if msg[0] == OF10 and msg[1] == OFPT10_STATS_REQUEST and len(msg) >= 10:
        (stats_type,) = struct.unpack_from("!H", msg, 8)
        if stats_type == OFPST_PORT_DESC:
            return OFPBRC_BAD_STAT
    return None


def refusal(msg: bytes, code: int) -> bytes:
    """The OFPT_ERROR (BAD_REQUEST, ``code``) answering ``msg``."""
    version, _, _, xid = HEADER.unpack_from(msg)
    data = msg[:64]
    body = struct.pack("!HH", OFPET_BAD_REQUEST, code) + data
    return HEADER.pack(version, OFPT_ERROR, HEADER.size + len(body), xid) + body


async def read_message(reader: asyncio.StreamReader) -> bytes:
    """One whole OpenFlow message from ``reader``."""
    head = await reader.readexactly(HEADER.size)
    length = HEADER.unpack(head)[2]
    return head + (await reader.readexactly(length - HEADER.size) if length > 8 else b"")


@dataclass(slots=True)
class Relay:
    """Relays clients on 127.0.0.1 to ``upstream`` (``unix:PATH`` or ``tcp:HOST:PORT``),
    answering what ``refuse`` picks with an error."""

    upstream: str
    refuse: Refuse
    refused: int = 0  # messages answered with an error so far
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, port: int = 0) -> str:
        """Listen (on ``port``, 0: any free one); returns the target to give a driver
        (``tcp:127.0.0.1:PORT``). A stopped relay may start again on its old port: a
        switch that restarts, to its clients."""
        self._server = await asyncio.start_server(self._client, "127.0.0.1", port)
        port = self._server.sockets[0].getsockname()[1]
        return f"tcp:127.0.0.1:{port}"

    async def stop(self) -> None:
        """Stop listening and close every relayed connection."""
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
            up_reader, up_writer = await self._connect()
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

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        kind, _, where = self.upstream.partition(":")
        if kind == "unix":
            return await asyncio.open_unix_connection(where)
        host, _, port = where.rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        refuse: asyncio.StreamWriter | None,
    ) -> None:
        """Copy messages until EOF; with ``refuse``, refused messages are answered there."""
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
            while True:
                msg = await read_message(reader)
                code = self.refuse(msg) if refuse is not None else None
                if code is not None and refuse is not None:
                    self.refused += 1
                    if code == SILENT:
                        continue
                    refuse.write(refusal(msg, code))
                    await refuse.drain()
                    continue
                writer.write(msg)
                await writer.drain()
