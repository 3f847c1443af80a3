"""The EMULATOR's OpenFlow 1.3 channel to its bridge, for writes: one connection kept open
(HELLO once), each batch one ONF bundle (open, a flow mod per change, commit: all or
nothing). The messages are encoded with os-ken's OpenFlow library, not the OVS driver's
codec; the replies need only their headers and error codes, read here, and a refusal is
named with ``protocols.openflow13.errors``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import struct
from collections.abc import Sequence
from typing import Any

from os_ken.ofproto import ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from emulators.p4rt.flow import VID_PRESENT, BridgeError, BridgeRefused, Change, Flow
from protocols.openflow13.errors import code_name

HEADER = struct.Struct("!BBHI")  # version, type, length, xid
ERROR = struct.Struct("!HH")  # type, code
EXPERIMENTER_ERROR = struct.Struct("!HHI")  # 0xFFFF, exp_type, experimenter
OFPT_ERROR, OFPT_ECHO_REQUEST = 1, 2
OFPET_EXPERIMENTER = 0xFFFF
DATAPATH = ofproto_protocol.ProtocolDesc(version=ofp.OFP_VERSION)
TIMEOUT_S = 10.0
Reader, Writer = asyncio.StreamReader, asyncio.StreamWriter
L4 = {6: ("tcp_src", "tcp_dst"), 17: ("udp_src", "udp_dst")}


class Channel:
    """The bridge's management socket (``unix:PATH`` or ``tcp:HOST:PORT``)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._xids = itertools.count(1)
        self._bundles = itertools.count(1)
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
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
        self._send(writer, _control(bundle, ofp.ONF_BCT_OPEN_REQUEST))
        adds = set()
        for change in changes:
            xid = next(self._xids)
            mod = flow_mod(change.flow, delete=change.delete)
            mod.set_xid(xid)  # the inner message's xid is the bundle add's
            self._send(
                writer, parser.ONFBundleAddMsg(DATAPATH, bundle, ofp.ONF_BF_ATOMIC, mod, []), xid
            )
            adds.add(xid)
        commit = self._send(writer, _control(bundle, ofp.ONF_BCT_COMMIT_REQUEST))
        await writer.drain()
        refusals, failed = await self._replies(reader, writer, adds, commit)
        if failed is not None:
            code = refusals[0] if refusals else failed
            raise BridgeRefused(f"{self.target} refused the bundle: {code}", code=code)

    async def _replies(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        adds: set[int],
        commit: int,
    ) -> tuple[list[str], str | None]:
        """Read up to the commit's answer: the refused adds' codes, and the commit's error
        (None: committed)."""
        refusals: list[str] = []
        while True:
            kind, xid, body = await _read(reader)
            if kind == OFPT_ECHO_REQUEST:
                writer.write(HEADER.pack(ofp.OFP_VERSION, 3, HEADER.size + len(body), xid) + body)
            elif kind == OFPT_ERROR and xid in adds:
                refusals.append(_error(body))
            elif xid == commit:
                return refusals, _error(body) if kind == OFPT_ERROR else None

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._stream is None:
            scheme, _, rest = self.target.partition(":")
            if scheme == "unix":
                reader, writer = await asyncio.open_unix_connection(rest)
            else:
                host, _, port = rest.rpartition(":")
                reader, writer = await asyncio.open_connection(host, int(port))
            self._send(writer, parser.OFPHello(DATAPATH))
            await writer.drain()
            await _read(reader)  # the switch's HELLO (OVS agrees on 1.3 if the bridge has it)
            self._stream = reader, writer
        return self._stream

    def _send(self, writer: asyncio.StreamWriter, msg: Any, xid: int | None = None) -> int:
        xid = next(self._xids) if xid is None else xid
        msg.set_xid(xid)
        msg.serialize()
        writer.write(bytes(msg.buf))
        return xid


def _control(bundle: int, kind: int) -> Any:
    return parser.ONFBundleCtrlMsg(DATAPATH, bundle, kind, ofp.ONF_BF_ATOMIC, [])


async def _read(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """One message: (type, xid, body)."""
    _, kind, length, xid = HEADER.unpack(await reader.readexactly(HEADER.size))
    return kind, xid, await reader.readexactly(length - HEADER.size)


def _error(body: bytes) -> str:
    """The name of an error message's code (``OFPFMFC_TABLE_FULL``, ``OFPBFC_MSG_FAILED``)."""
    err_type, code = ERROR.unpack_from(body)
    if err_type == OFPET_EXPERIMENTER:
        _, exp_type, experimenter = EXPERIMENTER_ERROR.unpack_from(body)
        return code_name(err_type, exp_type, experimenter)
    return code_name(err_type, code)


def flow_mod(flow: Flow, *, delete: bool) -> Any:
    """The flow mod that adds (or replaces) ``flow``, or deletes the one with its key."""
    actions = _actions(flow)
    return parser.OFPFlowMod(
        DATAPATH,
        cookie=flow.cookie,
        table_id=0,
        command=ofp.OFPFC_DELETE_STRICT if delete else ofp.OFPFC_ADD,
        priority=flow.priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**_match(flow)),
        instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        if actions
        else [],
    )


def _match(flow: Flow) -> dict[str, Any]:
    fields = {name: (v, mask) for name, v, mask in flow.match}
    ports = L4.get(fields.get("nw_proto", (0, 0))[0], ("", ""))
    out: dict[str, Any] = {}
    for name, (v, mask) in fields.items():
        if name in ("nw_src", "nw_dst"):
            addr = (str(ipaddress.IPv4Address(v)), str(ipaddress.IPv4Address(mask)))
            out["ipv4_src" if name == "nw_src" else "ipv4_dst"] = addr
        elif name in ("tp_src", "tp_dst"):
            out[ports[name == "tp_dst"]] = v
        else:
            key = {"in_port": "in_port", "dl_vlan": "vlan_vid", "dl_type": "eth_type"}
            out[key.get(name, "ip_proto")] = v | VID_PRESENT if name == "dl_vlan" else v
    return out


def _actions(flow: Flow) -> list[Any]:
    actions: list[Any] = []
    for name, arg in flow.actions:
        if name == "push_vlan":
            actions.append(parser.OFPActionPushVlan(0x8100))
            actions.append(parser.OFPActionSetField(vlan_vid=arg | VID_PRESENT))
        elif name == "pop_vlan":
            actions.append(parser.OFPActionPopVlan())
        else:
            actions.append(parser.OFPActionOutput(arg))
    return actions
