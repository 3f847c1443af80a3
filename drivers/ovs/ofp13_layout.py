"""Flow stats entries decoded by match layout: the fast path of ``decode_flow_stats``.

A table of 100,000 flows has a handful of match layouts (the sequence of OXM headers), and
walking each entry's fields one by one in Python was most of a read's time. Here the first
entry of a layout is walked once (``ofp13_flow.decode_match``, the reference) and the
layout compiled to one ``struct`` format covering the whole match, headers included; later
entries of the same match length are unpacked in one call, and used only if every header
read equals the layout's (the headers fix every field's offset, so equal headers mean the
same walk). Anything else (a new layout, an unsupported field) goes the reference way,
which raises what it raises. Same rules, same errors: ``tests/drivers/test_ofp13_layout``
compares both on generated entries.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from drivers.base import FlowMatch, FlowRule, Prefix, new_match, new_rule
from drivers.ovs.ofp13 import CodecError
from drivers.ovs.ofp13_flow import (
    _FLOW_STATS,
    _IPV4_FIELDS,
    _L4_FIELDS,
    OFPVID_PRESENT,
    OXM_ETH_TYPE,
    OXM_IN_PORT,
    OXM_IP_PROTO,
    OXM_VLAN_VID,
    UnsupportedEntry,
    decode_instructions,
    decode_match,
)

Skip = Callable[[int, UnsupportedEntry], None]  # (offset of the entry, why)
_FORMATS = {1: "B", 2: "H", 4: "I", 8: "II"}  # OXM value size -> struct codes
_PLAIN = {OXM_IN_PORT: "in_port", OXM_ETH_TYPE: "eth_type", OXM_IP_PROTO: "ip_proto"}
_PLAIN |= _L4_FIELDS
_MATCH_LEN = struct.Struct("!H")
_ALL_ONES = 0xFFFFFFFF
_MAX_LAYOUTS = 32  # per match length: beyond, a table of odd matches is walked as before


@dataclass(frozen=True, slots=True)
class _Layout:
    """One OXM header sequence: unpack a whole match at once, check its headers, convert."""

    unpack: Callable[[bytes, int], tuple[Any, ...]]
    heads: Callable[[tuple[Any, ...]], Any]  # the headers read (type and length first)
    want: Any  # what ``heads`` must give
    pick: Callable[[tuple[Any, ...]], Any]  # the values, absent None, in ``FlowMatch`` order
    fields: tuple[tuple[int, int, int], ...]  # those to convert: (place, index of value, kind)


_INT, _VID, _IP32, _IPW = range(4)
_PLACE = {name: i for i, name in enumerate(FlowMatch.__slots__)}  # new_match's arguments


def _compile(buf: bytes, at: int) -> _Layout | None:
    """The layout of the match at ``at``, or None when it has a field we do not convert."""
    mtype, length = struct.unpack_from("!HH", buf, at)
    fmt, want, fields = ["!HH"], [mtype, length], []
    pos, end, index = at + 4, at + length, 2
    while pos < end:
        (head,) = struct.unpack_from("!I", buf, pos)
        size, name = head & 0xFF, _name(head)
        if size not in _FORMATS or name is None:
            return None
        fmt.append("I" + _FORMATS[size])
        want.append(head)
        fields.append((_PLACE[name], index + 1, _kind(head)))
        index += 1 + len(_FORMATS[size])
        pos += 4 + size
    places = [place for place, _, _ in fields]
    if pos != end or len(set(places)) != len(places):  # a field twice: walked, as before
        return None
    heads = [0, 1] + [i - 1 for _, i, _ in fields]
    source = dict.fromkeys(range(len(_PLACE)), index) | {p: i for p, i, _ in fields}
    return _Layout(
        unpack=struct.Struct("".join(fmt)).unpack_from,
        heads=itemgetter(*heads),
        want=tuple(want),
        pick=itemgetter(*source.values()),  # ``index``: the None appended to the values
        fields=tuple(f for f in fields if f[2] != _INT),
    )


def _name(head: int) -> str | None:
    if head in _PLAIN:
        return _PLAIN[head]
    if head in _IPV4_FIELDS:
        return _IPV4_FIELDS[head][0]
    return "vlan_vid" if head == OXM_VLAN_VID else None


def _kind(head: int) -> int:
    if head == OXM_VLAN_VID:
        return _VID
    if head in _IPV4_FIELDS:
        return _IPW if _IPV4_FIELDS[head][1] else _IP32
    return _INT


class MatchDecoder:
    """``decode_match`` with layouts remembered (one per reader: ``decode_flow_rules``)."""

    def __init__(self) -> None:
        self._layouts: dict[int, list[_Layout]] = {}

    def decode(self, buf: bytes, at: int) -> tuple[FlowMatch, int]:
        """The match at ``at`` and the offset past its padding, as ``decode_match``."""
        (length,) = _MATCH_LEN.unpack_from(buf, at + 2)
        for layout in self._layouts.get(length, ()):
            try:
                values = layout.unpack(buf, at)
            except struct.error:
                break
            if layout.heads(values) == layout.want:
                match = _match(layout, values)
                if match is not None:
                    return match, at + (length + 7) // 8 * 8
                break
        match, after = decode_match(buf, at)  # the reference: raises what it raises
        known = self._layouts.setdefault(length, [])
        if len(known) < _MAX_LAYOUTS and (learnt := _compile(buf, at)) is not None:
            known.append(learnt)
        return match, after


def _match(layout: _Layout, values: tuple[Any, ...]) -> FlowMatch | None:
    """The match, or None for a value the reference rejects (it says why)."""
    fields = layout.pick((*values, None))
    if layout.fields:
        fields = list(fields)
        for place, i, kind in layout.fields:
            value = values[i]
            if kind == _IP32:
                fields[place] = Prefix(value, 32)
            elif kind == _VID:
                if not value & OFPVID_PRESENT:
                    return None
                fields[place] = value & 0x0FFF
            else:
                mask = values[i + 1]
                plen = mask.bit_count()
                if mask != (_ALL_ONES << (32 - plen)) & _ALL_ONES or value & ~mask:
                    return None
                fields[place] = Prefix(value, plen)
    return new_match(*fields)


def decode_flow_rules(
    body: bytes, matches: MatchDecoder | None = None, skip: Skip | None = None
) -> list[FlowRule]:
    """The rules of one flow stats reply part (``decode_flow_stats`` without the counters).
    An entry a ``FlowRule`` cannot say raises ``UnsupportedEntry``, or with ``skip`` is
    handed to it (its offset and the error) and left out."""
    matches = matches or MatchDecoder()
    rules, pos, end, size = [], 0, len(body), _FLOW_STATS.size
    unpack, decode = _FLOW_STATS.unpack_from, matches.decode
    while pos < end:
        if pos + size > end:
            raise CodecError(f"truncated flow stats entry at offset {pos}")
        length, table, _, _, prio, _, _, _, cookie, _, _ = unpack(body, pos)
        stop = pos + length
        if length < size or stop > end:
            raise CodecError(f"flow stats entry of length {length} at offset {pos}")
        try:
            match, at = decode(body, pos + size)
            actions = decode_instructions(body, at, stop)
        except UnsupportedEntry as exc:
            if skip is None:
                raise
            skip(pos, exc)
        else:
            rules.append(new_rule(match, prio, actions, cookie, table))
        pos = stop
    return rules


def split_flow_rules(
    body: bytes, matches: MatchDecoder, cookie: int, mask: int
) -> tuple[list[FlowRule], list[int]]:
    """The rules of the entries whose cookie matches ``cookie`` under ``mask`` (ours: one
    that a FlowRule cannot say raises ``UnsupportedEntry``), and the offsets of the others."""
    ours: list[int] = []
    others: list[int] = []
    pos, end, size = 0, len(body), _FLOW_STATS.size
    want = cookie & mask
    while pos < end:
        if pos + size > end:
            raise CodecError(f"truncated flow stats entry at offset {pos}")
        length = _LENGTH.unpack_from(body, pos)[0]
        if length < size or pos + length > end:
            raise CodecError(f"flow stats entry of length {length} at offset {pos}")
        (ours if _COOKIE.unpack_from(body, pos + 24)[0] & mask == want else others).append(pos)
        pos += length
    if not others:
        return decode_flow_rules(body, matches), []
    mine = b"".join(body[p : p + _LENGTH.unpack_from(body, p)[0]] for p in ours)
    return decode_flow_rules(mine, matches), others


_LENGTH = struct.Struct("!H")
_COOKIE = struct.Struct("!Q")
