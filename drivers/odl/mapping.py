"""``FlowRule`` <-> OpenDaylight bodies: the inventory model's JSON (RESTCONF) both ways,
Hydrogen's AD-SAL ``FlowConfig`` (written) and its statistics northbound's flows (read).

Inventory model, per field:

- match: ``in_port`` -> ``in-port: "openflow:<dpid>:<port>"``; ``eth_type`` ->
  ``ethernet-match.ethernet-type.type``; ``vlan_vid`` -> ``vlan-match.vlan-id`` with
  ``vlan-id-present: true``; ``ipv4_src``/``ipv4_dst`` -> ``ipv4-source``/
  ``ipv4-destination`` as ``a.b.c.d/n``; ``ip_proto`` -> ``ip-match.ip-protocol``;
  ``l4_src``/``l4_dst`` -> ``udp-source-port``/... when ``ip_proto`` is 17, else ``tcp-...``;
- actions, in one ``apply-actions`` instruction (none for a drop rule): ``Output(p)`` ->
  ``output-action`` (``output-node-connector: "p"``), ``PushVlan(v)`` ->
  ``push-vlan-action`` (ethernet-type 33024) + ``set-field`` ``vlan-match`` v,
  ``PopVlan`` -> ``pop-vlan-action``.

A flow's id is derived from its key (table, priority, match), so the same rule always
has the same id and a re-applied batch rewrites the same entries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from drivers import fieldtable
from drivers.base import (
    ETH_IPV4,
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
UDP = 17
L4_PROTOS = (6, 17)
MAX_PORT = 0xFFFFFF00
RESERVED = {0xFFFFFFF8: "INPORT", 0xFFFFFFFB: "FLOOD", 0xFFFFFFFC: "ALL",
            0xFFFFFFFD: "CONTROLLER", 0xFFFFFFFE: "LOCAL"}  # fmt: skip
NAMED = {v: k for k, v in RESERVED.items()} | {"IN_PORT": 0xFFFFFFF8}


class MappingError(ValueError):
    """A body this driver cannot read back as a FlowRule (the driver: ProtocolError)."""


def flow_id(rule: FlowRule) -> str:
    """The rule's flow id (and AD-SAL name): ``rr-`` and 16 hex digits of its key."""
    text = f"{rule.table}/{rule.priority}/{rule.match!r}"
    return "rr-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def dpid_of(node: str) -> int:
    """``openflow:1`` -> 1 (ValueError otherwise)."""
    kind, _, dpid = node.partition(":")
    if kind != "openflow" or not dpid.isdigit():
        raise ValueError(f"bad node {node!r}: expected openflow:<datapath id>")
    return int(dpid)


# --------------------------------------------------------------------------------------
# FlowRule -> inventory JSON


def flow_json(rule: FlowRule, dpid: int) -> Json:
    """The ``flow-node-inventory:flow`` object of ``rule``."""
    obj: Json = {
        "id": flow_id(rule), "table_id": rule.table, "priority": rule.priority,
        "cookie": rule.cookie, "idle-timeout": 0, "hard-timeout": 0,
        "match": match_json(rule.match, dpid),
    }  # fmt: skip
    if rule.actions:
        actions = [{"order": i, **a} for i, a in enumerate(_actions_json(rule.actions))]
        obj["instructions"] = {"instruction": [{"order": 0, "apply-actions": {"action": actions}}]}
    return obj


def match_json(m: FlowMatch, dpid: int) -> Json:
    """The match as OpenDaylight's JSON (``dpid`` names the in-port node connector)."""
    obj: Json = {}
    if m.in_port is not None:
        obj["in-port"] = f"openflow:{dpid}:{m.in_port}"
    if m.eth_type is not None:
        obj["ethernet-match"] = {"ethernet-type": {"type": m.eth_type}}
    if m.vlan_vid is not None:
        obj["vlan-match"] = _vlan(m.vlan_vid)
    if m.ipv4_src is not None:
        obj["ipv4-source"] = str(m.ipv4_src)
    if m.ipv4_dst is not None:
        obj["ipv4-destination"] = str(m.ipv4_dst)
    if m.ip_proto is not None:
        obj["ip-match"] = {"ip-protocol": m.ip_proto}
    l4 = "udp" if m.ip_proto == UDP else "tcp"
    if m.l4_src is not None:
        obj[f"{l4}-source-port"] = m.l4_src
    if m.l4_dst is not None:
        obj[f"{l4}-destination-port"] = m.l4_dst
    return obj


def _vlan(vid: int) -> Json:
    return {"vlan-id": {"vlan-id": vid, "vlan-id-present": True}}


def _actions_json(actions: tuple[Action, ...]) -> Iterator[Json]:
    for action in actions:
        match action:
            case Output(port=port):
                connector = RESERVED.get(port, str(port))
                yield {"output-action": {"output-node-connector": connector, "max-length": 65535}}
            case PushVlan(vid=vid):
                yield {"push-vlan-action": {"ethernet-type": ETH_VLAN}}
                yield {"set-field": {"vlan-match": _vlan(vid)}}
            case PopVlan():
                yield {"pop-vlan-action": {}}


# --------------------------------------------------------------------------------------
# inventory JSON -> FlowRule


def parse_flow(obj: Json) -> FlowRule:
    """A flow of the operational datastore as a FlowRule (MappingError when it says more
    than a FlowRule can)."""
    try:
        return FlowRule(
            match=parse_match(obj.get("match", {})),
            priority=_int(obj.get("priority", 0x8000)),
            actions=parse_actions(obj.get("instructions", {})),
            cookie=_int(obj.get("cookie", 0)),
            table=_int(obj["table_id"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow {obj.get('id')!r}: {exc!r}") from exc


_int = fieldtable.integer


def _port(text: object) -> int:
    last = str(text).rsplit(":", 1)[-1]
    return NAMED[last] if last in NAMED else int(last)


_MATCH: dict[str, fieldtable.FieldReader] = {
    "in-port": lambda v: ("in_port", _port(v)),
    "ethernet-match": lambda v: ("eth_type", _int(v["ethernet-type"]["type"])),
    "vlan-match": lambda v: ("vlan_vid", _vlan_id(v)),
    "ipv4-source": lambda v: ("ipv4_src", Prefix.parse(v)),
    "ipv4-destination": lambda v: ("ipv4_dst", Prefix.parse(v)),
    "ip-match": lambda v: ("ip_proto", _int(v["ip-protocol"])),
    "tcp-source-port": lambda v: ("l4_src", _int(v)),
    "udp-source-port": lambda v: ("l4_src", _int(v)),
    "tcp-destination-port": lambda v: ("l4_dst", _int(v)),
    "udp-destination-port": lambda v: ("l4_dst", _int(v)),
}


def parse_match(obj: Json) -> FlowMatch:
    """The match of OpenDaylight's JSON (UnsupportedEntry for fields we do not write)."""
    if "ethernet-match" in obj and set(obj["ethernet-match"]) != {"ethernet-type"}:
        raise ValueError("ethernet-match fields other than ethernet-type")
    return fieldtable.strict_match(obj.items(), _MATCH)


def _vlan_id(obj: Json) -> int:
    vid = obj["vlan-id"]
    if vid.get("vlan-id-present") is False or set(obj) != {"vlan-id"}:
        raise ValueError(f"vlan-match {obj}")
    return _int(vid["vlan-id"])


def parse_actions(obj: Json) -> tuple[Action, ...]:
    """The actions of OpenDaylight's JSON instructions, in order."""
    actions: list[Json] = []
    for inst in sorted(obj.get("instruction", []), key=lambda i: _int(i["order"])):
        if set(inst) != {"order", "apply-actions"}:
            raise ValueError(f"instruction {sorted(inst)}")
        actions += sorted(inst["apply-actions"].get("action", []), key=lambda a: _int(a["order"]))
    return tuple(_rule_actions(actions))


def _rule_actions(actions: list[Json]) -> Iterator[Action]:
    pending_push = False
    for obj in actions:
        kind, body = _one_action(obj)
        if pending_push and kind != "set-field":
            raise ValueError("push-vlan-action without a set-field of the VLAN id")
        if kind == "output-action":
            yield Output(_port(body["output-node-connector"]))
        elif kind == "push-vlan-action" and _int(body.get("ethernet-type", ETH_VLAN)) == ETH_VLAN:
            pending_push = True
        elif kind == "set-field" and pending_push:
            yield PushVlan(_vlan_id(body["vlan-match"]))
            pending_push = False
        elif kind == "pop-vlan-action":
            yield PopVlan()
        else:
            raise ValueError(f"action {kind} {body}")
    if pending_push:
        raise ValueError("push-vlan-action without a set-field of the VLAN id")


def _one_action(obj: Json) -> tuple[str, Json]:
    kinds = [k for k in obj if k != "order"]
    if len(kinds) != 1:
        raise ValueError(f"action {obj}")
    return kinds[0], obj[kinds[0]]


# --------------------------------------------------------------------------------------
# AD-SAL FlowConfig


def adsal_node(dpid: int) -> str:
    """``1`` -> ``00:00:00:00:00:00:00:01``."""
    raw = f"{dpid:016x}"
    return ":".join(raw[i : i + 2] for i in range(0, 16, 2))


def flow_config(rule: FlowRule, dpid: int) -> Json:
    """The AD-SAL body of ``rule`` (check ``adsal_unsupported`` first)."""
    m = rule.match
    body: Json = {"installInHw": "true", "name": flow_id(rule)}
    body["node"] = {"id": adsal_node(dpid), "type": "OF"}
    fields = {
        "ingressPort": m.in_port,
        "priority": rule.priority,
        "etherType": None if m.eth_type is None else f"{m.eth_type:#x}",
        "vlanId": m.vlan_vid,
        "nwSrc": _host(m.ipv4_src),
        "nwDst": _host(m.ipv4_dst),
        "protocol": m.ip_proto,
        "tpSrc": m.l4_src,
        "tpDst": m.l4_dst,
        "cookie": rule.cookie,
    }
    body.update((k, str(v)) for k, v in fields.items() if v is not None)
    body["actions"] = [_adsal_action(a) for a in rule.actions] or ["DROP"]
    return body


def _host(prefix: Prefix | None) -> str | None:
    return None if prefix is None else str(prefix).removesuffix("/32")


def _adsal_action(action: Action) -> str:
    match action:
        case Output(port=port):
            return f"OUTPUT={RESERVED.get(port, port)}"
        case PushVlan(vid=vid):
            return f"SET_VLAN_ID={vid}"
        case PopVlan():
            return "POP_VLAN"


_STAT_MATCH: dict[str, Callable[[Json], tuple[str, object]]] = {
    "IN_PORT": lambda f: ("in_port", _port(str(f["value"]).split("@")[0].split("|")[-1])),
    "DL_TYPE": lambda f: ("eth_type", int(str(f["value"]), 0)),
    "DL_VLAN": lambda f: ("vlan_vid", int(f["value"])),
    "NW_SRC": lambda f: ("ipv4_src", _masked(f)),
    "NW_DST": lambda f: ("ipv4_dst", _masked(f)),
    "NW_PROTO": lambda f: ("ip_proto", int(f["value"])),
    "TP_SRC": lambda f: ("l4_src", int(f["value"])),
    "TP_DST": lambda f: ("l4_dst", int(f["value"])),
}


def parse_flow_statistic(obj: Json) -> FlowRule:
    """One entry of AD-SAL's statistics northbound (``{"flow": {...}, "tableId": 0, ...}``)
    as a FlowRule; AD-SAL's ``Flow.id`` is the cookie (MappingError when it says more
    than a FlowRule can)."""
    try:
        flow = obj["flow"]
        fields = dict(_stat_field(f) for f in flow.get("match", {}).get("matchField", []))
        return FlowRule(
            match=FlowMatch(**fields),  # type: ignore[arg-type]
            priority=_int(flow.get("priority", 0x8000)),
            actions=tuple(_stat_actions(flow.get("actions", []))),
            cookie=_int(flow.get("id", 0)) & 0xFFFF_FFFF_FFFF_FFFF,
            table=_int(obj.get("tableId", 0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow statistic: {exc!r}") from exc


def _stat_field(field: Json) -> tuple[str, object]:
    kind = str(field.get("type"))
    if kind not in _STAT_MATCH:
        raise ValueError(f"match field {kind} cannot be read back")
    return _STAT_MATCH[kind](field)


def _masked(field: Json) -> Prefix:
    mask = str(field.get("mask") or "255.255.255.255")
    bits = sum(bin(int(octet)).count("1") for octet in mask.split("."))
    return Prefix.parse(f"{field['value']}/{bits}")


def _stat_actions(items: list[Json]) -> Iterator[Action]:
    """OUTPUT (its ``port.id``), reserved ports by type (CONTROLLER...), SET_VLAN_ID (a
    push on the untagged frames we write it for), POP_VLAN, DROP."""
    for item in items:
        kind = str(item.get("type", "")).upper()
        if kind == "OUTPUT":
            yield Output(_port(item["port"]["id"]))
        elif kind in NAMED:
            yield Output(NAMED[kind])
        elif kind == "SET_VLAN_ID":
            yield PushVlan(_int(item["vlanId"]))
        elif kind == "POP_VLAN":
            yield PopVlan()
        elif kind != "DROP":
            raise ValueError(f"action {kind} cannot be read back")


# --------------------------------------------------------------------------------------
# what cannot be sent


def unsupported(rule: FlowRule) -> str | None:
    """Why ``rule`` cannot be written through any ODL northbound here (None: it can)."""
    m = rule.match
    if any(p is not None and p.plen == 0 for p in (m.ipv4_src, m.ipv4_dst)):
        return "a /0 prefix: leave the field out (None) to match any address"
    if m.vlan_vid is not None and not 1 <= m.vlan_vid <= 4094:
        return f"vlan {m.vlan_vid} is not 1..4094"
    return None


def adsal_unsupported(rule: FlowRule) -> str | None:
    """Why AD-SAL (one table, OpenFlow 1.0 actions) cannot say ``rule`` (None: it can)."""
    m = rule.match
    if rule.table != 0:
        return f"table {rule.table}: the AD-SAL flowprogrammer has one table (0)"
    if (m.ipv4_src, m.ipv4_dst, m.ip_proto) != (None, None, None) and m.eth_type != ETH_IPV4:
        return "nwSrc/nwDst/protocol need etherType 0x800"
    if (m.l4_src, m.l4_dst) != (None, None) and m.ip_proto not in L4_PROTOS:
        return "tpSrc/tpDst need protocol 6 (TCP) or 17 (UDP)"
    return _adsal_bad_actions(rule)


def _adsal_bad_actions(rule: FlowRule) -> str | None:
    tagged = rule.match.vlan_vid is not None
    for action in rule.actions:
        match action:
            case PushVlan(vid=vid) if tagged:
                return f"push_vlan:{vid} on a tagged frame: SET_VLAN_ID would retag it (no QinQ)"
            case PushVlan():
                tagged = True
            case PopVlan():
                tagged = False
            case Output(port=port) if port > MAX_PORT and port not in RESERVED:
                return f"output port {port:#x}"
    return None


# --------------------------------------------------------------------------------------
# other writers' flows


def flow_cookie(obj: Json) -> int:
    """The cookie of an inventory flow (ValueError when unreadable)."""
    return _int(obj.get("cookie", 0))


def foreign_flow(obj: Json) -> ForeignEntry:
    """An inventory flow of another writer (l2switch's ``ethernet-source`` flows, LLDP
    traps...) as far as FlowMatch can say its match; MappingError when not even its table
    and priority read."""
    try:
        match, more = lenient_match(obj.get("match", {}))
        return ForeignEntry(
            table=_int(obj["table_id"]),
            priority=_int(obj.get("priority", 0x8000)),
            match=match,
            more=more,
            text=entry_text(obj),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow {obj.get('id')!r}: {exc!r}") from exc


def lenient_match(obj: Json) -> tuple[FlowMatch, bool]:
    """The fields of ``obj`` FlowMatch can say, and whether it has others (an
    ``ethernet-match`` beyond its ``ethernet-type``: MAC addresses)."""
    ethernet = obj.get("ethernet-match")
    macs = isinstance(ethernet, dict) and set(ethernet) - {"ethernet-type"}
    if macs:
        assert isinstance(ethernet, dict)
        obj = {k: v for k, v in obj.items() if k != "ethernet-match"}
        if "ethernet-type" in ethernet:
            obj["ethernet-match"] = {"ethernet-type": ethernet["ethernet-type"]}
    match, more = fieldtable.lenient_match(obj.items(), _MATCH)
    return match, more or bool(macs)


def entry_text(obj: Json) -> str:
    """The flow as the controller wrote it, without its statistics."""
    skip = ("opendaylight-flow-statistics:flow-statistics", "flow-statistics")
    return json.dumps({k: v for k, v in obj.items() if k not in skip}, sort_keys=True)


def statistic_cookie(obj: Json) -> int:
    """The cookie of an AD-SAL statistics entry (its flow's id)."""
    return _int(obj["flow"].get("id", 0)) & 0xFFFF_FFFF_FFFF_FFFF


def foreign_statistic(obj: Json) -> ForeignEntry:
    """An AD-SAL statistics entry of another writer, as far as FlowMatch can say it."""
    try:
        flow = obj["flow"]
        fields: dict[str, Any] = {}
        more = False
        for field in flow.get("match", {}).get("matchField", []):
            try:
                name, value = _stat_field(field)
            except (KeyError, TypeError, ValueError):
                more = True
                continue
            fields[name] = value
        return ForeignEntry(
            table=_int(obj.get("tableId", 0)),
            priority=_int(flow.get("priority", 0x8000)),
            match=FlowMatch(**fields),
            more=more,
            text=json.dumps(flow, sort_keys=True),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MappingError(f"flow statistic: {exc!r}") from exc
