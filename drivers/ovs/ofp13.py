"""OpenFlow 1.3 framing and the control messages the OVS driver needs (encode + parse).

Covered: HELLO (version 4, with a version bitmap), ECHO, ERROR, BARRIER, FEATURES,
MULTIPART framing (flow stats request, PORT_DESC) and the ONF bundle extension that Open
vSwitch speaks on OpenFlow 1.3 (experimenter ``0x4F4E4600``: ``ONFT_BUNDLE_CONTROL`` 2300,
``ONFT_BUNDLE_ADD_MESSAGE`` 2301). Flow entries (match, instructions, flow-mod, flow stats)
live in ``ofp13_flow``; error names in ``protocols.openflow13.errors``.

Encoders return ``bytes`` ready for the wire; the caller chooses the xid. Parsers take the
message body (the bytes after the 8-byte header) and return frozen dataclasses; they raise
``CodecError`` on malformed input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

from protocols.openflow13.errors import ONF_EXPERIMENTER, error_name

VERSION = 0x04
HEADER = struct.Struct("!BBHI")
OFP_NO_BUFFER = 0xFFFFFFFF
OFPP_MAX = 0xFFFFFF00
OFPP_ANY = 0xFFFFFFFF
OFPG_ANY = 0xFFFFFFFF
OFPTT_ALL = 0xFF

ONFT_BUNDLE_CONTROL = 2300
ONFT_BUNDLE_ADD_MESSAGE = 2301
OFPBF_ATOMIC = 1 << 0
OFPBF_ORDERED = 1 << 1

OFPMPF_REPLY_MORE = 1 << 0
OFPPS_LINK_DOWN = 1 << 0
OFPPC_PORT_DOWN = 1 << 0

_HELLO_ELEM_VERSIONBITMAP = 1


class CodecError(ValueError):
    """Bytes that do not decode as the OpenFlow 1.3 message they claim to be."""


class MsgType(IntEnum):
    """``ofp_type`` values of OpenFlow 1.3 used here (others are logged by number)."""

    HELLO = 0
    ERROR = 1
    ECHO_REQUEST = 2
    ECHO_REPLY = 3
    EXPERIMENTER = 4
    FEATURES_REQUEST = 5
    FEATURES_REPLY = 6
    GET_CONFIG_REQUEST = 7
    GET_CONFIG_REPLY = 8
    SET_CONFIG = 9
    FLOW_REMOVED = 11
    PORT_STATUS = 12
    FLOW_MOD = 14
    MULTIPART_REQUEST = 18
    MULTIPART_REPLY = 19
    BARRIER_REQUEST = 20
    BARRIER_REPLY = 21
    ROLE_REQUEST = 24
    ROLE_REPLY = 25
    SET_ASYNC = 28


class MultipartType(IntEnum):
    FLOW = 1
    PORT_STATS = 4
    PORT_DESC = 13


class BundleCtrlType(IntEnum):
    OPEN_REQUEST = 0
    OPEN_REPLY = 1
    CLOSE_REQUEST = 2
    CLOSE_REPLY = 3
    COMMIT_REQUEST = 4
    COMMIT_REPLY = 5
    DISCARD_REQUEST = 6
    DISCARD_REPLY = 7


def type_name(msg_type: int, body: bytes = b"") -> str:
    """A readable name for the wire log, e.g. ``FLOW_MOD`` or ``ONFT_BUNDLE_ADD_MESSAGE``."""
    if msg_type == MsgType.EXPERIMENTER and len(body) >= 8:
        experimenter, exp_type = struct.unpack_from("!II", body)
        if experimenter == ONF_EXPERIMENTER and exp_type == ONFT_BUNDLE_CONTROL:
            return "ONFT_BUNDLE_CONTROL"
        if experimenter == ONF_EXPERIMENTER and exp_type == ONFT_BUNDLE_ADD_MESSAGE:
            return "ONFT_BUNDLE_ADD_MESSAGE"
    try:
        return MsgType(msg_type).name
    except ValueError:
        return f"OFPT_{msg_type}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One received message: its type, xid and the bytes after the header."""

    type: int
    xid: int
    body: bytes


# --------------------------------------------------------------------------------------
# header-only and simple messages


def header(msg_type: int, length: int, xid: int) -> bytes:
    """The OpenFlow 1.3 header."""
    return HEADER.pack(VERSION, msg_type, length, xid)


def encode_hello(xid: int) -> bytes:
    """HELLO for version 4 with a version-bitmap element naming only OpenFlow 1.3."""
    element = struct.pack("!HHI", _HELLO_ELEM_VERSIONBITMAP, 8, 1 << VERSION)
    return header(MsgType.HELLO, 8 + len(element), xid) + element


def hello_versions(version: int, body: bytes) -> frozenset[int]:
    """Versions a peer's HELLO offers: its bitmap if it sent one, else just its version."""
    offset = 0
    while offset + 4 <= len(body):
        elem_type, elem_len = struct.unpack_from("!HH", body, offset)
        if elem_len < 4 or offset + elem_len > len(body):
            raise CodecError(f"HELLO element of length {elem_len} at offset {offset}")
        if elem_type == _HELLO_ELEM_VERSIONBITMAP:
            return _bitmap_versions(body[offset + 4 : offset + elem_len])
        offset += (elem_len + 7) // 8 * 8
    return frozenset({version})


def _bitmap_versions(words: bytes) -> frozenset[int]:
    found: set[int] = set()
    for index, (word,) in enumerate(struct.iter_unpack("!I", words[: len(words) // 4 * 4])):
        found.update(index * 32 + bit for bit in range(32) if word >> bit & 1)
    return frozenset(found)


def encode_echo_request(xid: int, data: bytes = b"") -> bytes:
    """ECHO_REQUEST carrying ``data``."""
    return header(MsgType.ECHO_REQUEST, 8 + len(data), xid) + data


def encode_echo_reply(xid: int, data: bytes = b"") -> bytes:
    """ECHO_REPLY carrying ``data`` (the request's)."""
    return header(MsgType.ECHO_REPLY, 8 + len(data), xid) + data


def encode_barrier_request(xid: int) -> bytes:
    """BARRIER_REQUEST."""
    return header(MsgType.BARRIER_REQUEST, 8, xid)


def encode_features_request(xid: int) -> bytes:
    """FEATURES_REQUEST."""
    return header(MsgType.FEATURES_REQUEST, 8, xid)


@dataclass(frozen=True, slots=True, kw_only=True)
class FeaturesReply:
    datapath_id: int
    n_buffers: int
    n_tables: int
    auxiliary_id: int
    capabilities: int


_FEATURES = struct.Struct("!QIBB2xI4x")


def parse_features_reply(body: bytes) -> FeaturesReply:
    """The datapath id and sizes of a FEATURES_REPLY body."""
    if len(body) < _FEATURES.size:
        raise CodecError(f"FEATURES_REPLY body of {len(body)} bytes")
    dpid, n_buffers, n_tables, aux, caps = _FEATURES.unpack_from(body)
    return FeaturesReply(
        datapath_id=dpid, n_buffers=n_buffers, n_tables=n_tables, auxiliary_id=aux,
        capabilities=caps,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# ERROR


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorMsg:
    """An OFPT_ERROR: ``type``/``code``, or for experimenter errors (type 0xFFFF)
    ``code`` holds the experimenter's error type and ``experimenter`` its id."""

    type: int
    code: int
    data: bytes
    experimenter: int | None = None

    @property
    def name(self) -> str:
        """The error's symbolic name."""
        return error_name(self.type, self.code, self.experimenter)


OFPET_EXPERIMENTER = 0xFFFF


def parse_error(body: bytes) -> ErrorMsg:
    """An ERROR message's type, code and data (experimenter errors too)."""
    if len(body) < 4:
        raise CodecError(f"ERROR body of {len(body)} bytes")
    err_type, code = struct.unpack_from("!HH", body)
    if err_type == OFPET_EXPERIMENTER:
        if len(body) < 8:
            raise CodecError("experimenter ERROR without experimenter id")
        (experimenter,) = struct.unpack_from("!I", body, 4)
        return ErrorMsg(type=err_type, code=code, experimenter=experimenter, data=body[8:])
    return ErrorMsg(type=err_type, code=code, data=body[4:])


# --------------------------------------------------------------------------------------
# MULTIPART framing, PORT_DESC

_MP_HEADER = struct.Struct("!HH4x")


def encode_multipart_request(xid: int, mp_type: int, body: bytes = b"") -> bytes:
    """MULTIPART_REQUEST of ``mp_type`` with ``body``."""
    length = 16 + len(body)
    return header(MsgType.MULTIPART_REQUEST, length, xid) + _MP_HEADER.pack(mp_type, 0) + body


@dataclass(frozen=True, slots=True, kw_only=True)
class MultipartReply:
    mp_type: int
    flags: int
    body: bytes

    @property
    def more(self) -> bool:
        """More parts of this reply follow."""
        return bool(self.flags & OFPMPF_REPLY_MORE)


def parse_multipart_reply(body: bytes) -> MultipartReply:
    """A MULTIPART_REPLY body's type, flags and payload."""
    if len(body) < _MP_HEADER.size:
        raise CodecError(f"MULTIPART_REPLY body of {len(body)} bytes")
    mp_type, flags = _MP_HEADER.unpack_from(body)
    return MultipartReply(mp_type=mp_type, flags=flags, body=body[_MP_HEADER.size :])


def encode_port_desc_request(xid: int) -> bytes:
    """The multipart PORT_DESC request."""
    return encode_multipart_request(xid, MultipartType.PORT_DESC)


@dataclass(frozen=True, slots=True, kw_only=True)
class PortDesc:
    port_no: int
    hw_addr: bytes
    name: str
    config: int
    state: int
    curr_speed: int

    @property
    def link_down(self) -> bool:
        """True when the link is down or the port is administratively down."""
        return bool(self.state & OFPPS_LINK_DOWN or self.config & OFPPC_PORT_DOWN)

    @property
    def reserved(self) -> bool:
        """OFPP_LOCAL and the other reserved port numbers."""
        return self.port_no > OFPP_MAX


_PORT = struct.Struct("!I4x6s2x16sII16xII")


def parse_port_desc(body: bytes) -> Iterator[PortDesc]:
    """The ``ofp_port`` entries of one PORT_DESC reply part."""
    if len(body) % _PORT.size:
        raise CodecError(f"PORT_DESC body of {len(body)} bytes is not a list of ports")
    for port_no, hw_addr, name, config, state, curr, _max in _PORT.iter_unpack(body):
        yield PortDesc(
            port_no=port_no, hw_addr=hw_addr, name=name.split(b"\0", 1)[0].decode(),
            config=config, state=state, curr_speed=curr,
        )  # fmt: skip


_PORT_STATS_REQUEST = struct.Struct("!I4x")
# ofp_port_stats: port_no, pad, rx/tx packets, rx/tx bytes, rx/tx dropped, rx/tx errors,
# frame, over, crc errors, collisions, duration (s, ns): 112 bytes
_PORT_STATS = struct.Struct("!I4xQQ88x")


def encode_port_stats_request(xid: int, port_no: int = OFPP_ANY) -> bytes:
    """The multipart PORT_STATS request of one port, or of every port (OFPP_ANY)."""
    return encode_multipart_request(
        xid, MultipartType.PORT_STATS, _PORT_STATS_REQUEST.pack(port_no)
    )


def parse_port_tx_packets(body: bytes) -> Iterator[tuple[int, int]]:
    """(port, packets sent) of each ``ofp_port_stats`` entry of one PORT_STATS reply part."""
    if len(body) % _PORT_STATS.size:
        raise CodecError(f"PORT_STATS body of {len(body)} bytes is not a list of port stats")
    for port_no, _rx, tx in _PORT_STATS.iter_unpack(body):
        yield port_no, tx


_PORT_STATUS_HEAD = struct.Struct("!B7x")
OFPPR_ADD, OFPPR_DELETE, OFPPR_MODIFY = 0, 1, 2
_SWITCH_CONFIG = struct.Struct("!BBHIHH")
_ASYNC = struct.Struct("!BBHIIIIIII")
OFPCML_NO_BUFFER = 0xFFFF


def parse_port_status(body: bytes) -> tuple[int, PortDesc]:
    """A PORT_STATUS message's reason (OFPPR_*) and port."""
    if len(body) != _PORT_STATUS_HEAD.size + _PORT.size:
        raise CodecError(f"PORT_STATUS body of {len(body)} bytes")
    (reason,) = _PORT_STATUS_HEAD.unpack_from(body)
    return reason, next(parse_port_desc(body[_PORT_STATUS_HEAD.size :]))


def encode_get_config_request(xid: int) -> bytes:
    """GET_CONFIG_REQUEST: the switch's configuration flags (fragment handling) come back."""
    return header(MsgType.GET_CONFIG_REQUEST, 8, xid)


def parse_switch_config(body: bytes) -> tuple[int, int]:
    """A GET_CONFIG_REPLY's body: (flags, miss_send_len)."""
    if len(body) < 4:
        raise CodecError(f"switch config of {len(body)} bytes")
    flags, miss_send_len = struct.unpack_from("!HH", body)
    return flags, miss_send_len


def encode_set_config(xid: int, miss_send_len: int = OFPCML_NO_BUFFER, flags: int = 0) -> bytes:
    """SET_CONFIG. OVS sends no asynchronous message (PORT_STATUS included) to a connection
    on its passive listeners until it sets a non-zero ``miss_send_len``. ``flags`` (the
    fragment handling) are the switch's, not the connection's: send those it has
    (``encode_get_config_request``), or another controller's setting is lost."""
    return _SWITCH_CONFIG.pack(
        VERSION, MsgType.SET_CONFIG, _SWITCH_CONFIG.size, xid, flags, miss_send_len
    )


ROLE_MASTER = 2  # OFPCR_ROLE_MASTER (NOCHANGE 0, EQUAL 1, SLAVE 3)
_ROLE = struct.Struct("!BBHII4xQ")  # header, role, pad, generation_id


def encode_role_request(xid: int, role: int, generation_id: int) -> bytes:
    """ROLE_REQUEST: this connection's role, with the generation id the switch compares
    with the highest it has seen (an older one is refused: OFPRRFC_STALE)."""
    return _ROLE.pack(
        VERSION, MsgType.ROLE_REQUEST, _ROLE.size, xid, role, generation_id & 0xFFFF_FFFF_FFFF_FFFF
    )


def parse_role_reply(body: bytes) -> tuple[int, int]:
    """A ROLE_REPLY's role and generation id."""
    if len(body) != _ROLE.size - HEADER.size:
        raise CodecError(f"ROLE_REPLY body of {len(body)} bytes")
    role, generation = struct.unpack("!I4xQ", body)
    return role, generation


def encode_set_async(
    xid: int, *, packet_in: int = 0, port_status: int = 0, flow_removed: int = 0
) -> bytes:
    """SET_ASYNC: which asynchronous messages (bit masks of reasons) this connection gets,
    the same for the master/equal and the slave role."""
    return _ASYNC.pack(
        VERSION, MsgType.SET_ASYNC, _ASYNC.size, xid,
        packet_in, packet_in, port_status, port_status, flow_removed, flow_removed,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# ONF bundles on OpenFlow 1.3

_BUNDLE_CTRL = struct.Struct("!BBHIIIIHH")  # + bundle_id, type, flags
_BUNDLE_ADD = struct.Struct("!BBHIIIIxxH")  # + bundle_id, pad, flags (inner message follows)


def encode_bundle_ctrl(xid: int, bundle_id: int, ctrl: BundleCtrlType, flags: int) -> bytes:
    """An ONF bundle control message (open, close, commit, discard)."""
    return _BUNDLE_CTRL.pack(
        VERSION, MsgType.EXPERIMENTER, _BUNDLE_CTRL.size, xid,
        ONF_EXPERIMENTER, ONFT_BUNDLE_CONTROL, bundle_id, ctrl, flags,
    )  # fmt: skip


def encode_bundle_add(bundle_id: int, flags: int, inner: bytes) -> bytes:
    """Wrap a complete message for a bundle; the outer xid is the inner message's xid."""
    xid = HEADER.unpack_from(inner)[3]
    head = _BUNDLE_ADD.pack(
        VERSION, MsgType.EXPERIMENTER, _BUNDLE_ADD.size + len(inner), xid,
        ONF_EXPERIMENTER, ONFT_BUNDLE_ADD_MESSAGE, bundle_id, flags,
    )  # fmt: skip
    return head + inner


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleCtrl:
    bundle_id: int
    type: BundleCtrlType
    flags: int


def parse_bundle_ctrl(body: bytes) -> BundleCtrl:
    """A bundle control reply (the body of an EXPERIMENTER message)."""
    size = _BUNDLE_CTRL.size - HEADER.size
    if len(body) < size:
        raise CodecError(f"bundle control body of {len(body)} bytes")
    experimenter, exp_type, bundle_id, ctrl, flags = struct.unpack_from("!IIIHH", body)
    if experimenter != ONF_EXPERIMENTER or exp_type != ONFT_BUNDLE_CONTROL:
        raise CodecError(f"experimenter {experimenter:#x}/{exp_type} is not a bundle control")
    try:
        return BundleCtrl(bundle_id=bundle_id, type=BundleCtrlType(ctrl), flags=flags)
    except ValueError:
        raise CodecError(f"unknown bundle control type {ctrl}") from None
