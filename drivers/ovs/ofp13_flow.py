"""OpenFlow 1.3 flow entries: OXM match, APPLY_ACTIONS, FLOW_MOD and flow stats.

``drivers.base.FlowRule`` <-> wire, both ways, so that a rule read back from the switch
equals the rule applied. The mapping:

- match: ``in_port``, ``eth_type``, ``vlan_vid`` (sent with OFPVID_PRESENT), ``ipv4_src`` /
  ``ipv4_dst`` (masked unless /32; a /0 network is a wildcard and reads back as ``None``),
  ``ip_proto``, and ``l4_src`` / ``l4_dst`` as UDP ports when ``ip_proto`` is 17, else as TCP
  ports. Prerequisites are *not* added: the switch judges the match as given.
- actions, all in one APPLY_ACTIONS instruction (none for a drop rule): ``Output`` ->
  OUTPUT, ``PushVlan(vid)`` -> PUSH_VLAN(0x8100) + SET_FIELD(vlan_vid), ``PopVlan`` ->
  POP_VLAN.

Entries the model cannot express (other match fields, other instructions or actions) raise
``UnsupportedEntry`` when read: a read never silently drops part of an entry.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from ipaddress import IPv4Address
from typing import Any

from drivers.base import Action, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from drivers.ovs.ofp13 import (
    OFP_NO_BUFFER,
    OFPG_ANY,
    OFPP_ANY,
    OFPTT_ALL,
    VERSION,
    CodecError,
    MsgType,
    MultipartType,
    encode_multipart_request,
)


class UnsupportedEntry(CodecError):
    """A well-formed flow entry that ``FlowRule`` cannot represent."""


class FlowModCommand(IntEnum):
    ADD = 0
    MODIFY = 1
    MODIFY_STRICT = 2
    DELETE = 3
    DELETE_STRICT = 4


OFPFF_SEND_FLOW_REM = 1 << 0
OFPFF_CHECK_OVERLAP = 1 << 1
OFPFF_RESET_COUNTS = 1 << 2

OFPVID_PRESENT = 0x1000
ETH_VLAN = 0x8100
IPPROTO_UDP = 17
_CONTROLLER = 0xFFFFFFFD
_MAX_LEN_NO_BUFFER = 0xFFFF

# --------------------------------------------------------------------------------------
# OXM

_OXM_BASIC = 0x8000


def _oxm(field: int, length: int, masked: bool = False) -> int:
    size = length * 2 if masked else length
    return _OXM_BASIC << 16 | field << 9 | int(masked) << 8 | size


OXM_IN_PORT = _oxm(0, 4)
OXM_ETH_TYPE = _oxm(5, 2)
OXM_VLAN_VID = _oxm(6, 2)
OXM_IP_PROTO = _oxm(10, 1)
OXM_IPV4_SRC = _oxm(11, 4)
OXM_IPV4_SRC_W = _oxm(11, 4, masked=True)
OXM_IPV4_DST = _oxm(12, 4)
OXM_IPV4_DST_W = _oxm(12, 4, masked=True)
OXM_TCP_SRC = _oxm(13, 2)
OXM_TCP_DST = _oxm(14, 2)
OXM_UDP_SRC = _oxm(15, 2)
OXM_UDP_DST = _oxm(16, 2)

_U8 = struct.Struct("!IB")
_U16 = struct.Struct("!IH")
_U32 = struct.Struct("!II")
_U32_W = struct.Struct("!III")
_MATCH_HEAD = struct.Struct("!HH")
_OFPMT_OXM = 1
_PAD = (b"", b"\0" * 7, b"\0" * 6, b"\0" * 5, b"\0" * 4, b"\0" * 3, b"\0" * 2, b"\0")


def encode_match(m: FlowMatch) -> bytes:
    """``ofp_match`` (type OXM), padded to a multiple of 8 bytes. The fields in the order
    Open vSwitch writes them back (so a read-back compares as bytes: ``entry_key``)."""
    parts: list[bytes] = []
    if m.in_port is not None:
        parts.append(_U32.pack(OXM_IN_PORT, m.in_port))
    if m.eth_type is not None:
        parts.append(_U16.pack(OXM_ETH_TYPE, m.eth_type))
    if m.vlan_vid is not None:
        parts.append(_U16.pack(OXM_VLAN_VID, _vid(m.vlan_vid)))
    if m.ipv4_src is not None:
        parts.append(_ipv4(m.ipv4_src, OXM_IPV4_SRC, OXM_IPV4_SRC_W))
    if m.ipv4_dst is not None:
        parts.append(_ipv4(m.ipv4_dst, OXM_IPV4_DST, OXM_IPV4_DST_W))
    if m.ip_proto is not None:
        parts.append(_U8.pack(OXM_IP_PROTO, m.ip_proto))
    udp = m.ip_proto == IPPROTO_UDP
    if m.l4_src is not None:
        parts.append(_U16.pack(OXM_UDP_SRC if udp else OXM_TCP_SRC, m.l4_src))
    if m.l4_dst is not None:
        parts.append(_U16.pack(OXM_UDP_DST if udp else OXM_TCP_DST, m.l4_dst))
    oxms = b"".join(parts)
    length = 4 + len(oxms)
    return _MATCH_HEAD.pack(_OFPMT_OXM, length) + oxms + _PAD[length & 7]


def _vid(vid: int) -> int:
    """The OXM VLAN_VID value of a VLAN id: the id with OFPVID_PRESENT set."""
    if not 0 <= vid <= 0x0FFF:
        raise CodecError(f"VLAN id {vid} is not in 0..4095")
    return OFPVID_PRESENT | vid


def _ipv4(net: Prefix, exact: int, masked: int) -> bytes:
    if net.plen == 32:
        return _U32.pack(exact, net.addr)
    if net.plen == 0:
        return b""
    return _U32_W.pack(masked, net.addr, net.mask)


def decode_match(buf: bytes, offset: int) -> tuple[FlowMatch, int]:
    """The match at ``offset``; returns it and the offset just past its padding."""
    match_type, length = _MATCH_HEAD.unpack_from(buf, offset)
    if match_type != _OFPMT_OXM or length < 4 or offset + length > len(buf):
        raise CodecError(f"match of type {match_type}, length {length} at offset {offset}")
    fields: dict[str, Any] = {}
    pos, end = offset + 4, offset + length
    while pos < end:
        (head,) = struct.unpack_from("!I", buf, pos)
        size = head & 0xFF
        _decode_oxm(head, buf, pos + 4, fields)
        pos += 4 + size
    if pos != end:
        raise CodecError(f"OXM fields overrun the match at offset {offset}")
    return FlowMatch(**fields), offset + (length + 7) // 8 * 8


def _decode_oxm(head: int, buf: bytes, pos: int, fields: dict[str, Any]) -> None:
    if head == OXM_IN_PORT:
        fields["in_port"] = _U32.unpack_from(buf, pos - 4)[1]
    elif head == OXM_ETH_TYPE:
        fields["eth_type"] = _U16.unpack_from(buf, pos - 4)[1]
    elif head == OXM_VLAN_VID:
        vid = _U16.unpack_from(buf, pos - 4)[1]
        if not vid & OFPVID_PRESENT:
            raise UnsupportedEntry("match on untagged packets (vlan_vid=0)")
        fields["vlan_vid"] = vid & 0x0FFF
    elif head == OXM_IP_PROTO:
        fields["ip_proto"] = buf[pos]
    elif head in _IPV4_FIELDS:
        name, masked = _IPV4_FIELDS[head]
        fields[name] = _decode_ipv4(buf, pos, masked)
    elif head in _L4_FIELDS:
        fields[_L4_FIELDS[head]] = _U16.unpack_from(buf, pos - 4)[1]
    else:
        raise UnsupportedEntry(f"match field OXM {head:#010x}")


_IPV4_FIELDS = {
    OXM_IPV4_SRC: ("ipv4_src", False),
    OXM_IPV4_SRC_W: ("ipv4_src", True),
    OXM_IPV4_DST: ("ipv4_dst", False),
    OXM_IPV4_DST_W: ("ipv4_dst", True),
}
_L4_FIELDS = {
    OXM_TCP_SRC: "l4_src",
    OXM_UDP_SRC: "l4_src",
    OXM_TCP_DST: "l4_dst",
    OXM_UDP_DST: "l4_dst",
}


def _decode_ipv4(buf: bytes, pos: int, masked: bool) -> Prefix:
    if not masked:
        return Prefix(_U32.unpack_from(buf, pos - 4)[1], 32)
    addr, mask = struct.unpack_from("!II", buf, pos)
    prefix = mask.bit_count()
    if mask != (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF or addr & ~mask:
        raise UnsupportedEntry(f"IPv4 match {IPv4Address(addr)}/{IPv4Address(mask)}")
    return Prefix(addr, prefix)


# --------------------------------------------------------------------------------------
# instructions and actions

_OFPIT_APPLY_ACTIONS = 4
_OFPAT_OUTPUT, _OFPAT_PUSH_VLAN, _OFPAT_POP_VLAN, _OFPAT_SET_FIELD = 0, 17, 18, 25
_INSTR = struct.Struct("!HH4x")
_OUTPUT = struct.Struct("!HHIH6x")
_PUSH = struct.Struct("!HHH2x")
_SET_VID = struct.Struct("!HHIH6x")
_POP = _INSTR.pack(_OFPAT_POP_VLAN, 8)
_ACT_HEAD = struct.Struct("!HH")


@lru_cache(maxsize=4096)
def encode_instructions(actions: tuple[Action, ...]) -> bytes:
    """One APPLY_ACTIONS instruction with the actions; nothing for a drop rule."""
    if not actions:
        return b""
    body = b"".join(_encode_action(a) for a in actions)
    return _INSTR.pack(_OFPIT_APPLY_ACTIONS, 8 + len(body)) + body


def _encode_action(action: Action) -> bytes:
    if isinstance(action, Output):
        max_len = _MAX_LEN_NO_BUFFER if action.port == _CONTROLLER else 0
        return _OUTPUT.pack(_OFPAT_OUTPUT, 16, action.port, max_len)
    if isinstance(action, PushVlan):
        vid = _SET_VID.pack(_OFPAT_SET_FIELD, 16, OXM_VLAN_VID, _vid(action.vid))
        return _PUSH.pack(_OFPAT_PUSH_VLAN, 8, ETH_VLAN) + vid
    return _POP


def decode_instructions(buf: bytes, pos: int, end: int) -> tuple[Action, ...]:
    """The actions of the instructions in ``buf[pos:end]`` (memoised: a table of thousands of
    flows has a handful of distinct action lists)."""
    return _instructions(buf[pos:end])


@lru_cache(maxsize=4096)
def _instructions(buf: bytes) -> tuple[Action, ...]:
    pos, end = 0, len(buf)
    actions: list[Action] = []
    while pos < end:
        kind, length = _ACT_HEAD.unpack_from(buf, pos)
        if length < 8 or pos + length > end:
            raise CodecError(f"instruction of length {length} at offset {pos}")
        if kind != _OFPIT_APPLY_ACTIONS:
            raise UnsupportedEntry(f"instruction type {kind}")
        actions += decode_actions(buf, pos + 8, pos + length)
        pos += length
    return tuple(actions)


def decode_actions(buf: bytes, pos: int, end: int) -> list[Action]:
    """The actions in ``buf[pos:end]`` (UnsupportedEntry for those we never write)."""
    actions: list[Action] = []
    pushed = False  # the previous action was PUSH_VLAN: a vlan_vid SET_FIELD completes it
    while pos < end:
        kind, length = _ACT_HEAD.unpack_from(buf, pos)
        if length < 8 or pos + length > end:
            raise CodecError(f"action of length {length} at offset {pos}")
        if kind == _OFPAT_OUTPUT and not pushed:
            actions.append(Output(_OUTPUT.unpack_from(buf, pos)[2]))
        elif kind == _OFPAT_PUSH_VLAN and not pushed:
            if _PUSH.unpack_from(buf, pos)[2] != ETH_VLAN:
                raise UnsupportedEntry("push_vlan with an ethertype other than 0x8100")
            pushed = True
            pos += length
            continue
        elif kind == _OFPAT_SET_FIELD and pushed and length == 16:
            _, _, oxm, vid = _SET_VID.unpack_from(buf, pos)
            if oxm != OXM_VLAN_VID or not vid & OFPVID_PRESENT:
                raise UnsupportedEntry(f"push_vlan followed by set_field OXM {oxm:#010x}")
            actions.append(PushVlan(vid & 0x0FFF))
        elif kind == _OFPAT_POP_VLAN and not pushed:
            actions.append(PopVlan())
        else:
            what = "push_vlan without set_field(vlan_vid)" if pushed else f"action type {kind}"
            raise UnsupportedEntry(what)
        pushed = False
        pos += length
    if pushed:
        raise UnsupportedEntry("push_vlan without set_field(vlan_vid)")
    return actions


# --------------------------------------------------------------------------------------
# FLOW_MOD

_FLOW_MOD = struct.Struct("!BBHIQQBBHHHIIIH2x")


def encode_flow_mod(
    rule: FlowRule,
    xid: int,
    command: FlowModCommand = FlowModCommand.ADD,
    *,
    flags: int = 0,
    cookie_mask: int = 0,
) -> bytes:
    """A FLOW_MOD for ``rule``; deletes carry no instructions and leave the cookie unmasked."""
    try:
        match = encode_match(rule.match)
        instructions = encode_instructions(rule.actions) if command <= 2 else b""
        length = 48 + len(match) + len(instructions)
        head = _FLOW_MOD.pack(
            VERSION, MsgType.FLOW_MOD, length, xid, rule.cookie, cookie_mask, rule.table,
            command, 0, 0, rule.priority, OFP_NO_BUFFER, OFPP_ANY, OFPG_ANY, flags,
        )  # fmt: skip
    except struct.error as exc:
        raise CodecError(f"{rule}: {exc}") from exc
    return head + match + instructions


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowMod:
    xid: int
    command: FlowModCommand
    rule: FlowRule
    flags: int
    cookie_mask: int


def decode_flow_mod(msg: bytes) -> FlowMod:
    """A whole FLOW_MOD message (header included), e.g. one taken out of a bundle."""
    if len(msg) < _FLOW_MOD.size + 8:
        raise CodecError(f"FLOW_MOD of {len(msg)} bytes")
    fields = _FLOW_MOD.unpack_from(msg)
    _, msg_type, length, xid, cookie, cookie_mask, table, command = fields[:8]
    priority, flags = fields[10], fields[14]
    if msg_type != MsgType.FLOW_MOD or length > len(msg):
        raise CodecError(f"not a FLOW_MOD: type {msg_type}, length {length}")
    match, pos = decode_match(msg, _FLOW_MOD.size)
    actions = decode_instructions(msg, pos, length)
    rule = FlowRule(match=match, priority=priority, actions=actions, cookie=cookie, table=table)
    return FlowMod(
        xid=xid, command=FlowModCommand(command), rule=rule, flags=flags, cookie_mask=cookie_mask
    )


# --------------------------------------------------------------------------------------
# flow stats

_FLOW_STATS_REQ = struct.Struct("!B3xII4xQQ")
_EMPTY_MATCH = _MATCH_HEAD.pack(_OFPMT_OXM, 4) + b"\0" * 4
_FLOW_STATS = struct.Struct("!HBxIIHHHH4xQQQ")


def encode_flow_stats_request(xid: int, cookie: int = 0, cookie_mask: int = 0) -> bytes:
    """All tables, any match, entries whose cookie matches ``cookie`` under ``cookie_mask``."""
    body = _FLOW_STATS_REQ.pack(OFPTT_ALL, OFPP_ANY, OFPG_ANY, cookie, cookie_mask)
    return encode_multipart_request(xid, MultipartType.FLOW, body + _EMPTY_MATCH)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowStats:
    rule: FlowRule
    flags: int
    duration_sec: int
    packet_count: int
    byte_count: int


def decode_flow_stats(body: bytes) -> Iterator[FlowStats]:
    """The entries of one flow stats reply part."""
    pos, unpack = 0, _FLOW_STATS.unpack_from
    while pos < len(body):
        if pos + _FLOW_STATS.size > len(body):
            raise CodecError(f"truncated flow stats entry at offset {pos}")
        length, table, dur, _, prio, _, _, flags, cookie, packets, octets = unpack(body, pos)
        end = pos + length
        if length < _FLOW_STATS.size or end > len(body):
            raise CodecError(f"flow stats entry of length {length} at offset {pos}")
        match, at = decode_match(body, pos + _FLOW_STATS.size)
        actions = decode_instructions(body, at, end)
        rule = FlowRule(match=match, priority=prio, actions=actions, cookie=cookie, table=table)
        yield FlowStats(
            rule=rule, flags=flags, duration_sec=dur, packet_count=packets, byte_count=octets
        )
        pos = end


# --------------------------------------------------------------------------------------
# entries as bytes: verifying a read-back without decoding it

_ENTRY_HEAD = struct.Struct("!BHQ")  # table, priority, cookie
_ENTRY_LEN = struct.Struct("!H")


def entry_key(rule: FlowRule) -> bytes:
    """``rule`` as the bytes ``flow_entry_keys`` gives for its entry read back: table,
    priority, cookie, then the match and instructions as encoded in a FLOW_MOD."""
    head = _ENTRY_HEAD.pack(rule.table, rule.priority, rule.cookie)
    return head + encode_match(rule.match) + encode_instructions(rule.actions)


def flow_mod_entry_key(flow_mod: bytes) -> bytes:
    """``entry_key`` of the rule an ADD ``encode_flow_mod`` made ``flow_mod`` of, cut out of
    it (the match and instructions are the same bytes) instead of encoded again."""
    return flow_mod[24:25] + flow_mod[30:32] + flow_mod[8:16] + flow_mod[_FLOW_MOD.size :]


def flow_entry_keys(body: bytes) -> Iterator[bytes]:
    """The entries of one flow stats reply part as ``entry_key`` bytes (counters left out).
    A switch may write an entry back in another, equivalent form (e.g. match fields in its
    own order): a key that is not found is not proof that the rule is missing."""
    pos, end, size = 0, len(body), _FLOW_STATS.size
    while pos < end:
        (length,) = _ENTRY_LEN.unpack_from(body, pos)
        if length < size or pos + length > end:
            raise CodecError(f"flow stats entry of length {length} at offset {pos}")
        yield (
            body[pos + 2 : pos + 3] + body[pos + 12 : pos + 14] + body[pos + 24 : pos + 32]
            + body[pos + size : pos + length]
        )  # fmt: skip
        pos += length
