"""``FlowRule`` <-> Ryu ``ofctl_rest`` JSON, OpenFlow 1.3, as ``ryu.lib.ofctl_v1_3`` reads
and writes it (see CHECKED.md for what was checked against Ryu's source).

Written (``POST /stats/flowentry/add|delete_strict``), the OXM names of OpenFlow 1.3:

- match: ``in_port``, ``eth_type``, ``vlan_vid`` (a decimal int: Ryu adds OFPVID_PRESENT),
  ``ipv4_src``/``ipv4_dst`` (``a.b.c.d`` for a host, ``a.b.c.d/n`` for a prefix),
  ``ip_proto``, ``tcp_src``/``tcp_dst`` or ``udp_src``/``udp_dst``;
- actions, applied in order: ``Output(p)`` -> ``{"type": "OUTPUT", "port": p}``,
  ``PushVlan(v)`` -> ``PUSH_VLAN`` (ethertype 33024) + ``SET_FIELD`` ``vlan_vid`` with the
  OFPVID_PRESENT bit (Ryu passes SET_FIELD values through unchanged), ``PopVlan`` ->
  ``POP_VLAN``; a drop rule has none.

Ryu parses request bodies with ``ast.literal_eval``, not ``json.loads``: a body holds only
ints, strings, lists and objects (JSON ``true``/``false``/``null`` would be a 500).

Read (``GET /stats/flow/<dpid>``), ``ofctl_v1_3.match_to_str`` renames fields to their
OpenFlow 1.0 names (``dl_type``, ``dl_vlan`` as a string, ``nw_src``/``nw_dst`` with a
dotted mask ``a.b.c.d/255.255.255.0``, ``nw_proto``, ``tp_src``/``tp_dst``) and
``actions_to_str`` writes strings (``OUTPUT:2``, ``PUSH_VLAN:33024``,
``SET_FIELD: {vlan_vid:4106}``, ``POP_VLAN``); the OXM names are accepted too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from drivers import fieldtable
from drivers.base import (
    Action,
    FlowMatch,
    FlowRule,
    ForeignEntry,
    Output,
    PopVlan,
    Prefix,
    PushVlan,
)

Json = dict[str, Any]
ETH_VLAN = 0x8100
OFPVID_PRESENT = 0x1000
UDP = 17
RESERVED = {0xFFFFFFF8: "IN_PORT", 0xFFFFFFF9: "TABLE", 0xFFFFFFFA: "NORMAL",
            0xFFFFFFFB: "FLOOD", 0xFFFFFFFC: "ALL", 0xFFFFFFFD: "CONTROLLER",
            0xFFFFFFFE: "LOCAL", 0xFFFFFFFF: "ANY"}  # fmt: skip
NAMED = {v: k for k, v in RESERVED.items()}
MAX_PORT = 0xFFFFFF00
SET_FIELD = re.compile(r"^SET_FIELD:\s*\{\s*(?P<field>\w+)\s*:\s*(?P<value>\S+?)\s*\}$")


class MappingError(ValueError):
    """A flow entry this driver cannot read back as a FlowRule (the driver: ProtocolError)."""


# --------------------------------------------------------------------------------------
# FlowRule -> request bodies


def add_body(rule: FlowRule, dpid: int) -> Json:
    """The body of ``POST /stats/flowentry/add`` for ``rule``."""
    body = _key_body(rule, dpid)
    body |= {"cookie": rule.cookie, "idle_timeout": 0, "hard_timeout": 0, "flags": 0}
    body["actions"] = list(_actions_json(rule.actions))
    return body


def delete_body(rule: FlowRule, dpid: int) -> Json:
    """The body of ``POST /stats/flowentry/delete_strict`` for the entry of ``rule``'s key."""
    return _key_body(rule, dpid)


def _key_body(rule: FlowRule, dpid: int) -> Json:
    return {
        "dpid": dpid,
        "table_id": rule.table,
        "priority": rule.priority,
        "match": match_json(rule.match),
    }


def match_json(m: FlowMatch) -> Json:
    """The match as ofctl_rest's JSON."""
    obj: Json = {}
    if m.in_port is not None:
        obj["in_port"] = m.in_port
    if m.eth_type is not None:
        obj["eth_type"] = m.eth_type
    if m.vlan_vid is not None:
        obj["vlan_vid"] = m.vlan_vid
    if m.ipv4_src is not None:
        obj["ipv4_src"] = _prefix(m.ipv4_src)
    if m.ipv4_dst is not None:
        obj["ipv4_dst"] = _prefix(m.ipv4_dst)
    if m.ip_proto is not None:
        obj["ip_proto"] = m.ip_proto
    l4 = "udp" if m.ip_proto == UDP else "tcp"
    if m.l4_src is not None:
        obj[f"{l4}_src"] = m.l4_src
    if m.l4_dst is not None:
        obj[f"{l4}_dst"] = m.l4_dst
    return obj


def _prefix(p: Prefix) -> str:
    return str(p).removesuffix("/32")


def _actions_json(actions: tuple[Action, ...]) -> Iterator[Json]:
    for action in actions:
        match action:
            case Output(port=port):
                yield {"type": "OUTPUT", "port": RESERVED.get(port, port)}
            case PushVlan(vid=vid):
                yield {"type": "PUSH_VLAN", "ethertype": ETH_VLAN}
                yield {"type": "SET_FIELD", "field": "vlan_vid", "value": vid | OFPVID_PRESENT}
            case PopVlan():
                yield {"type": "POP_VLAN"}


def unsupported(rule: FlowRule) -> str | None:
    """Why ``rule`` cannot be written through ofctl_rest here (None: it can)."""
    m = rule.match
    if any(p is not None and p.plen == 0 for p in (m.ipv4_src, m.ipv4_dst)):
        return "a /0 prefix: leave the field out (None) to match any address"
    if m.vlan_vid is not None and not 1 <= m.vlan_vid <= 4094:
        return f"vlan {m.vlan_vid} is not 1..4094"
    if (m.l4_src, m.l4_dst) != (None, None) and m.ip_proto not in (6, 17):
        return "an L4 port needs ip_proto 6 (TCP) or 17 (UDP)"
    for action in rule.actions:
        if isinstance(action, PushVlan) and not 1 <= action.vid <= 4094:
            return f"push_vlan:{action.vid} is not 1..4094"
    return None


# --------------------------------------------------------------------------------------
# /stats/flow entries -> FlowRule


def entries_of(body: object, dpid: int) -> list[Json]:
    """The entry list of ``{"<dpid>": [...]}`` (/stats/flow, /stats/portdesc; MappingError
    otherwise)."""
    if not isinstance(body, dict) or set(body) != {str(dpid)}:
        raise MappingError(f'expected {{"{dpid}": [...]}}, got {str(body)[:100]}')
    entries = body[str(dpid)]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise MappingError("expected a list of flow entries")
    return entries


def parse_flow(obj: Json) -> FlowRule:
    """One entry of ``/stats/flow`` as a FlowRule (MappingError when it says more than a
    FlowRule can: another instruction, another action, another match field)."""
    try:
        return FlowRule(
            match=parse_match(obj.get("match", {})),
            priority=_int(obj["priority"]),
            actions=tuple(parse_actions(obj.get("actions", []))),
            cookie=_int(obj.get("cookie", 0)),
            table=_int(obj.get("table_id", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow entry {obj}: {exc!r}") from exc


def _int(value: object) -> int:
    return fieldtable.integer(value, 0)  # ofctl_rest writes some as "0x..."


def _port(value: object) -> int:
    if isinstance(value, str) and value in NAMED:
        return NAMED[value]
    return _int(value)


def _vid(value: object) -> int:
    """``dl_vlan``: ``"10"`` (OFPVID_PRESENT set), an int vid, or ``"0x100a"`` (raw)."""
    if isinstance(value, str) and value.lower().startswith("0x"):
        raw = int(value, 16)
        if "/" in value or not raw & OFPVID_PRESENT:
            raise ValueError(f"vlan match {value!r} (masked, or no tag)")
        return raw & 0x0FFF
    return _int(value)


_MATCH: dict[str, fieldtable.FieldReader] = {
    "in_port": lambda v: ("in_port", _port(v)),
    "dl_type": lambda v: ("eth_type", _int(v)),
    "eth_type": lambda v: ("eth_type", _int(v)),
    "dl_vlan": lambda v: ("vlan_vid", _vid(v)),
    "vlan_vid": lambda v: ("vlan_vid", _vid(v)),
    "nw_src": lambda v: ("ipv4_src", Prefix.parse(v)),
    "ipv4_src": lambda v: ("ipv4_src", Prefix.parse(v)),
    "nw_dst": lambda v: ("ipv4_dst", Prefix.parse(v)),
    "ipv4_dst": lambda v: ("ipv4_dst", Prefix.parse(v)),
    "nw_proto": lambda v: ("ip_proto", _int(v)),
    "ip_proto": lambda v: ("ip_proto", _int(v)),
    "tp_src": lambda v: ("l4_src", _int(v)),
    "tcp_src": lambda v: ("l4_src", _int(v)),
    "udp_src": lambda v: ("l4_src", _int(v)),
    "tp_dst": lambda v: ("l4_dst", _int(v)),
    "tcp_dst": lambda v: ("l4_dst", _int(v)),
    "udp_dst": lambda v: ("l4_dst", _int(v)),
}


def parse_match(obj: Json) -> FlowMatch:
    """The match of ofctl_rest's JSON (UnsupportedEntry for fields we do not write)."""
    return fieldtable.strict_match(obj.items(), _MATCH)


def parse_actions(texts: list[Any]) -> Iterator[Action]:
    """The actions of ofctl_rest's action strings."""
    pending_push = False
    for text in texts:
        if not isinstance(text, str):
            raise ValueError(f"instruction {text!r}")
        kind, _, arg = text.partition(":")
        if pending_push and kind != "SET_FIELD":
            raise ValueError("PUSH_VLAN without a SET_FIELD of vlan_vid")
        if kind == "OUTPUT":
            yield Output(_port(arg.strip()))
        elif kind == "PUSH_VLAN" and _int(arg.strip()) == ETH_VLAN:
            pending_push = True
        elif kind == "SET_FIELD" and pending_push:
            yield PushVlan(_set_vid(text))
            pending_push = False
        elif kind == "POP_VLAN":
            yield PopVlan()
        else:
            raise ValueError(f"action {text!r}")
    if pending_push:
        raise ValueError("PUSH_VLAN without a SET_FIELD of vlan_vid")


def _set_vid(text: str) -> int:
    m = SET_FIELD.match(text)
    if m is None or m["field"] != "vlan_vid":
        raise ValueError(f"action {text!r} after PUSH_VLAN")
    return _int(m["value"]) & 0x0FFF


# --------------------------------------------------------------------------------------
# other writers' entries


def flow_cookie(obj: Json) -> int:
    """The cookie of a ``/stats/flow`` entry (ValueError when it has none readable)."""
    return _int(obj.get("cookie", 0))


def foreign_flow(obj: Json) -> ForeignEntry:
    """A ``/stats/flow`` entry of another writer as far as FlowMatch can say its match (the
    rest sets ``more``: ``dl_dst``, ``dl_src``, masked fields...); MappingError when not
    even its table and priority read."""
    try:
        match, more = lenient_match(obj.get("match", {}))
        return ForeignEntry(
            table=_int(obj.get("table_id", 0)),
            priority=_int(obj["priority"]),
            match=match,
            more=more,
            text=entry_text(obj),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow entry {entry_text(obj)}: {exc!r}") from exc


def lenient_match(obj: Json) -> tuple[FlowMatch, bool]:
    """The fields of ``obj`` FlowMatch can say, and whether it has others."""
    return fieldtable.lenient_match(obj.items(), _MATCH)


STATISTICS = ("byte_count", "packet_count", "duration_sec", "duration_nsec", "length")


def entry_text(obj: Json) -> str:
    """The entry as ofctl_rest wrote it, without its counters."""
    return json.dumps({k: v for k, v in obj.items() if k not in STATISTICS}, sort_keys=True)
