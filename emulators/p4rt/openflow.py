"""The EMULATOR's OpenFlow 1.3 channel to its bridge, for writes: one connection kept open
(HELLO once), each batch one ONF bundle (open, a flow mod per change, commit: all or
nothing). The messages are its own (``ofwire``), not the OVS driver's codec; the replies
need only their headers and error codes, read here, and a refusal is named with
``protocols.openflow13.errors``.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Sequence

from emulators.p4rt import ofwire
from emulators.p4rt.flow import BridgeError, BridgeRefused, Change
from protocols.openflow13.errors import code_name

ERROR = struct.Struct("!HH")  # type, code
EXPERIMENTER_ERROR = struct.Struct("!HHI")  # 0xFFFF, exp_type, experimenter
OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 1, 2, 3
OFPET_EXPERIMENTER = 0xFFFF
TIMEOUT_S = 10.0
Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


class Channel:
    """The bridge's management socket (``unix:PATH`` or ``tcp:HOST:PORT``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._xids = itertools.count(1)
        self._bundles = itertools.count(1)
        self._stream: tuple[Reader, Writer] | None = None
        self._lock = asyncio.Lock()

    async def apply(self, changes: Sequence[Change]) -> None:
        """The changes as one atomic bundle (BridgeRefused: none applied)."""
        async with self._lock:
            try:
                await asyncio.wait_for(self._bundle(changes), TIMEOUT_S)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                await self.close()
                raise BridgeError(f"{self.target}: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        """Close the connection (the next ``apply`` opens another)."""
        if self._stream is not None:
            _, writer = self._stream
            self._stream = None
            writer.close()

    async def _bundle(self, changes: Sequence[Change]) -> None:
        reader, writer = await self._connected()
        bundle = next(self._bundles)
        writer.write(ofwire.bundle_control(bundle, ofwire.OPEN_REQUEST, next(self._xids)))
        adds = []
        for change in changes:
            xid = next(self._xids)  # the inner message's xid is the bundle add's
            inner = ofwire.flow_mod(change.flow, xid, delete=change.delete)
            adds.append(ofwire.bundle_add(bundle, inner, xid))
        writer.write(b"".join(adds))
        commit = next(self._xids)
        writer.write(ofwire.bundle_control(bundle, ofwire.COMMIT_REQUEST, commit))
        await writer.drain()
        added = range(commit - len(changes), commit)
        refusals, failed = await self._replies(reader, writer, added, commit)
        if failed is not None:
            code = refusals[0] if refusals else failed
            raise BridgeRefused(f"{self.target} refused the bundle: {code}", code=code)

    async def _replies(
        self, reader: Reader, writer: Writer, added: range, commit: int
    ) -> tuple[list[str], str | None]:
        """Read up to the commit's answer: the refused adds' codes, and the commit's error
        (None: committed)."""
        refusals: list[str] = []
        while True:
            kind, xid, body = await _read(reader)
            if kind == OFPT_ECHO_REQUEST:
                writer.write(ofwire.message(OFPT_ECHO_REPLY, xid, body))
            elif kind == OFPT_ERROR and xid in added:
                refusals.append(_error(body))
            elif xid == commit:
                return refusals, _error(body) if kind == OFPT_ERROR else None

    async def _connected(self) -> tuple[Reader, Writer]:
        if self._stream is None:
            scheme, _, rest = self.target.partition(":")
            if scheme == "unix":
                reader, writer = await asyncio.open_unix_connection(rest)
            else:
                host, _, port = rest.rpartition(":")
                reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(ofwire.hello(next(self._xids)))
            await writer.drain()
            await _read(reader)  # the switch's HELLO (OVS agrees on 1.3 if the bridge has it)
            self._stream = reader, writer
        return self._stream


async def _read(reader: Reader) -> tuple[int, int, bytes]:
    """One message: (type, xid, body)."""
    _, kind, length, xid = ofwire.HEADER.unpack(await reader.readexactly(ofwire.HEADER.size))
    return kind, xid, await reader.readexactly(length - ofwire.HEADER.size)


def _error(body: bytes) -> str:
    """The name of an error message's code (``OFPFMFC_TABLE_FULL``, ``OFPBFC_MSG_FAILED``)."""
    err_type, code = ERROR.unpack_from(body)
    if err_type == OFPET_EXPERIMENTER:
        _, exp_type, experimenter = EXPERIMENTER_ERROR.unpack_from(body)
        return code_name(err_type, exp_type, experimenter)
    return code_name(err_type, code)
