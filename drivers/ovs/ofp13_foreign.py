"""Flow stats entries of other writers: read as far as the model can, and written as text.

``foreign_entry(body, pos)`` reads the entry at ``pos`` of a flow stats reply part as a
``ForeignEntry``: the match fields ``FlowMatch`` can say (an untagged-only or masked VLAN
match, a non-prefix IPv4 mask and every other OXM field set ``more``), its table and
priority, and its text in ``ovs-ofctl``'s words (``table=0, priority=65535, cookie=0x0,
eth_type=0x88cc,eth_dst=01:80:c2:00:00:0e actions=output:CONTROLLER``). Its instructions
(``goto_table``, ``write_actions``, anything) are only written, never modelled: what an
entry does is not what decides whether it shadows ours. A malformed entry raises
``CodecError`` (the driver skips it and counts it).
"""

from __future__ import annotations

import struct
from ipaddress import IPv4Address
from typing import Any

from drivers.base import FlowMatch, ForeignEntry, Prefix
from drivers.ovs.ofp13 import CodecError
from drivers.ovs.ofp13_flow import _FLOW_STATS, OFPVID_PRESENT

_OXM_BASIC = 0x8000
OXM_NAMES = (  # OpenFlow 1.3 section 7.2.3.7, by field number
    "in_port", "in_phy_port", "metadata", "eth_dst", "eth_src", "eth_type", "vlan_vid",
    "vlan_pcp", "ip_dscp", "ip_ecn", "ip_proto", "ipv4_src", "ipv4_dst", "tcp_src", "tcp_dst",
    "udp_src", "udp_dst", "sctp_src", "sctp_dst", "icmpv4_type", "icmpv4_code", "arp_op",
    "arp_spa", "arp_tpa", "arp_sha", "arp_tha", "ipv6_src", "ipv6_dst", "ipv6_flabel",
    "icmpv6_type", "icmpv6_code", "ipv6_nd_target", "ipv6_nd_sll", "ipv6_nd_tll", "mpls_label",
    "mpls_tc", "mpls_bos", "pbb_isid", "tunnel_id", "ipv6_exthdr",
)  # fmt: skip
_MODELLED = {0: "in_port", 5: "eth_type", 10: "ip_proto", 13: "l4_src", 14: "l4_dst",
             15: "l4_src", 16: "l4_dst"}  # fmt: skip
_MACS = {3, 4, 24, 25, 32, 33}
_IPV4 = {11, 12, 22, 23}
PORTS = {0xFFFFFFF8: "IN_PORT", 0xFFFFFFF9: "TABLE", 0xFFFFFFFA: "NORMAL",
         0xFFFFFFFB: "FLOOD", 0xFFFFFFFC: "ALL", 0xFFFFFFFD: "CONTROLLER",
         0xFFFFFFFE: "LOCAL", 0xFFFFFFFF: "ANY"}  # fmt: skip
_INSTRUCTIONS = {1: "goto_table", 2: "write_metadata", 3: "write_actions", 4: "apply_actions",
                 5: "clear_actions", 6: "meter"}  # fmt: skip
_ACTIONS = {0: "output", 11: "copy_ttl_out", 12: "copy_ttl_in", 15: "set_mpls_ttl",
            16: "dec_mpls_ttl", 17: "push_vlan", 18: "pop_vlan", 19: "push_mpls",
            20: "pop_mpls", 21: "set_queue", 22: "group", 23: "set_nw_ttl", 24: "dec_nw_ttl",
            25: "set_field", 26: "push_pbb", 27: "pop_pbb", 0xFFFF: "experimenter"}  # fmt: skip
_HEAD = struct.Struct("!HH")


def foreign_entry(body: bytes, pos: int) -> tuple[ForeignEntry, int]:
    """The entry at ``pos`` and the offset of the next one."""
    if pos + _FLOW_STATS.size > len(body):
        raise CodecError(f"truncated flow stats entry at offset {pos}")
    length, table, _, _, priority, _, _, _, cookie, _, _ = _FLOW_STATS.unpack_from(body, pos)
    stop = pos + length
    if length < _FLOW_STATS.size or stop > len(body):
        raise CodecError(f"flow stats entry of length {length} at offset {pos}")
    fields, more, texts, after = _match(body, pos + _FLOW_STATS.size)
    head = f"table={table}, priority={priority}, cookie={cookie:#x}"
    text = f"{head}, {','.join(texts) or 'any'} actions={_instructions(body, after, stop)}"
    entry = ForeignEntry(
        table=table, priority=priority, match=FlowMatch(**fields), more=more, text=text
    )
    return entry, stop


def _match(buf: bytes, at: int) -> tuple[dict[str, Any], bool, list[str], int]:
    """(FlowMatch fields, more, the fields as text, offset past the padded match)."""
    kind, length = _HEAD.unpack_from(buf, at)
    if kind != 1 or length < 4 or at + length > len(buf):
        raise CodecError(f"match of type {kind}, length {length} at offset {at}")
    fields: dict[str, Any] = {}
    texts: list[str] = []
    more = False
    pos, end = at + 4, at + length
    while pos < end:
        (head,) = struct.unpack_from("!I", buf, pos)
        size = head & 0xFF
        if pos + 4 + size > end:
            raise CodecError(f"OXM field of {size} bytes overruns the match at offset {at}")
        value = buf[pos + 4 : pos + 4 + size]
        texts.append(_oxm_text(head, value))
        more |= not _model(head, value, fields)
        pos += 4 + size
    return fields, more, texts, at + (length + 7) // 8 * 8


def _model(head: int, value: bytes, fields: dict[str, Any]) -> bool:
    """Put an OXM field into ``fields`` when FlowMatch can say it; False when not."""
    oxm_class, field, masked = head >> 16, head >> 9 & 0x7F, bool(head & 0x100)
    if oxm_class != _OXM_BASIC:
        return False
    number = int.from_bytes(value, "big")
    if field in _MODELLED and not masked:
        fields[_MODELLED[field]] = number
    elif field == 6 and not masked and number & OFPVID_PRESENT:
        fields["vlan_vid"] = number & 0x0FFF
    elif field in (11, 12) and len(value) in (4, 8):
        addr = int.from_bytes(value[:4], "big")
        mask = int.from_bytes(value[4:], "big") if masked else 0xFFFFFFFF
        plen = mask.bit_count()
        if mask != (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF or addr & ~mask:
            return False
        if plen:
            fields["ipv4_src" if field == 11 else "ipv4_dst"] = Prefix(addr, plen)
    else:
        return False
    return True


def _oxm_text(head: int, value: bytes) -> str:
    oxm_class, field, masked = head >> 16, head >> 9 & 0x7F, bool(head & 0x100)
    if oxm_class != _OXM_BASIC or field >= len(OXM_NAMES):
        return f"oxm{head:#010x}={value.hex()}"
    half = len(value) // 2 if masked else len(value)
    text = _value(field, value[:half])
    if masked:
        text += "/" + _value(field, value[half:])
    return f"{OXM_NAMES[field]}={text}"


def _value(field: int, raw: bytes) -> str:
    if field in _MACS and len(raw) == 6:
        return ":".join(f"{b:02x}" for b in raw)
    if field in _IPV4 and len(raw) == 4:
        return str(IPv4Address(raw))
    number = int.from_bytes(raw, "big")
    if field == 0:
        return PORTS.get(number, str(number))
    return f"{number:#x}" if field in (2, 5, 6, 38) else str(number)


def _instructions(buf: bytes, pos: int, end: int) -> str:
    parts = []
    while pos + 8 <= end:
        kind, length = _HEAD.unpack_from(buf, pos)
        if length < 8 or pos + length > end:
            raise CodecError(f"instruction of length {length} at offset {pos}")
        name = _INSTRUCTIONS.get(kind, f"instruction{kind}")
        if kind == 1:
            parts.append(f"goto_table:{buf[pos + 4]}")
        elif kind in (3, 4):
            actions = _actions(buf, pos + 8, pos + length)
            parts.append(actions if kind == 4 else f"write_actions({actions})")
        else:
            parts.append(name)
        pos += length
    return ",".join(parts) or "drop"


def _actions(buf: bytes, pos: int, end: int) -> str:
    parts = []
    while pos + 4 <= end:
        kind, length = _HEAD.unpack_from(buf, pos)
        if length < 8 or pos + length > end:
            raise CodecError(f"action of length {length} at offset {pos}")
        if kind == 0:
            (port,) = struct.unpack_from("!I", buf, pos + 4)
            parts.append(f"output:{PORTS.get(port, str(port))}")
        elif kind == 25:
            (head,) = struct.unpack_from("!I", buf, pos + 4)
            value = buf[pos + 8 : pos + 8 + (head & 0xFF)]
            parts.append(f"set_field:{_oxm_text(head, value)}")
        else:
            parts.append(_ACTIONS.get(kind, f"action{kind}"))
        pos += length
    return ",".join(parts)
