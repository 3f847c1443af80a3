"""RESTCONF bodies of ODL's inventory model, both ways, for the EMULATOR.

A flow (``flow-node-inventory:flow``)::

    {"id": "f1", "table_id": 0, "priority": 200, "cookie": 193,
     "match": {"in-port": "openflow:1:1",
               "ethernet-match": {"ethernet-type": {"type": 2048}},
               "vlan-match": {"vlan-id": {"vlan-id": 10, "vlan-id-present": true}},
               "ipv4-source": "10.0.0.0/24", "ipv4-destination": "10.1.2.3/32",
               "ip-match": {"ip-protocol": 6}, "tcp-destination-port": 80},
     "instructions": {"instruction": [{"order": 0, "apply-actions": {"action": [
         {"order": 0, "push-vlan-action": {"ethernet-type": 33024}},
         {"order": 1, "set-field": {"vlan-match": {"vlan-id": {"vlan-id": 10,
                                                               "vlan-id-present": true}}}},
         {"order": 2, "output-action": {"output-node-connector": "2",
                                         "max-length": 65535}}]}}]}}

Parsing is strict (unknown members are a 400, as ODL's YANG parser answers); members ODL
has but this emulator does not model are refused with ``operation-not-supported``.
Operational flows carry ``opendaylight-flow-statistics:flow-statistics``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from emulators.odl.flows import (
    DEFAULT_PRIORITY,
    Action,
    ActionKind,
    Counters,
    Flow,
    FlowError,
    Match,
    Port,
    number,
    port_number,
    port_text,
    prefix,
)

Json = dict[str, Any]
U16, U32, U64 = 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF
ETH_VLAN = 0x8100
FLOW_KEYS = ("flow-node-inventory:flow", "flow")
_IGNORED = frozenset(
    {"strict", "barrier", "installHw", "flags", "out_port", "out_group", "buffer_id",
     "container-name", "cookie_mask", "opendaylight-flow-statistics:flow-statistics"}
)  # fmt: skip
_UNSUPPORTED = "operation-not-supported"


# --------------------------------------------------------------------------------------
# errors


def error_body(tag: str, message: str, error_type: str = "application") -> Json:
    """An RFC 8040 ``errors`` body as ODL writes it."""
    error = {"error-type": error_type, "error-tag": tag, "error-message": message}
    return {"errors": {"error": [error]}}


# --------------------------------------------------------------------------------------
# reading a flow


def flow_body(body: object) -> Json:
    """The one flow of a PUT body ``{"flow-node-inventory:flow": [{...}]}``."""
    if not isinstance(body, dict) or len(body) != 1:
        raise FlowError("expected one member, flow-node-inventory:flow")
    key, value = next(iter(body.items()))
    if key not in FLOW_KEYS:
        raise FlowError(f"unknown member {key!r}; expected flow-node-inventory:flow")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, dict):
        raise FlowError("flow-node-inventory:flow: expected a list of one flow")
    return value


def parse_flow(obj: Json) -> Flow:
    """A flow's JSON object as a Flow (FlowError when ODL would refuse it)."""
    known = {"id", "table_id", "priority", "cookie", "match", "instructions", "idle-timeout",
             "hard-timeout", "flow-name"}  # fmt: skip
    _no_unknown(obj, known | _IGNORED, "flow")
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        raise FlowError("flow: missing id")
    return Flow(
        id=obj["id"],
        table=number(obj.get("table_id"), "table_id", 0, 254),
        priority=number(obj.get("priority", DEFAULT_PRIORITY), "priority", 0, U16),
        cookie=number(obj.get("cookie", 0), "cookie", 0, U64),
        match=parse_match(_object(obj.get("match", {}), "match")),
        actions=parse_instructions(_object(obj.get("instructions", {}), "instructions")),
        idle_timeout=number(obj.get("idle-timeout", 0), "idle-timeout", 0, U16),
        hard_timeout=number(obj.get("hard-timeout", 0), "hard-timeout", 0, U16),
        name=str(obj.get("flow-name", "")),
    )


def _object(value: object, what: str) -> Json:
    if not isinstance(value, dict):
        raise FlowError(f"{what}: expected an object, got {value!r}")
    return value


def _no_unknown(obj: Mapping[str, object], known: Iterable[str], what: str) -> None:
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise FlowError(f"{what}: unknown element(s) {', '.join(unknown)}")


_MATCH_READERS: dict[str, Callable[[Any], dict[str, object]]] = {
    "in-port": lambda v: {"in_port": port_number(v, "in-port")},
    "ethernet-match": lambda v: _ethernet_match(v),
    "vlan-match": lambda v: {"vlan_id": _vlan_id(_object(v, "vlan-match"), "vlan-match")},
    "ipv4-source": lambda v: {"ipv4_src": prefix(v, "ipv4-source")},
    "ipv4-destination": lambda v: {"ipv4_dst": prefix(v, "ipv4-destination")},
    "ip-match": lambda v: {"ip_proto": _ip_protocol(v)},
    "tcp-source-port": lambda v: {"tcp_src": number(v, "tcp-source-port", 0, U16)},
    "tcp-destination-port": lambda v: {"tcp_dst": number(v, "tcp-destination-port", 0, U16)},
    "udp-source-port": lambda v: {"udp_src": number(v, "udp-source-port", 0, U16)},
    "udp-destination-port": lambda v: {"udp_dst": number(v, "udp-destination-port", 0, U16)},
}


def parse_match(obj: Json) -> Match:
    """The match of RESTCONF JSON (RestconfError for unknown or bad fields)."""
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        if key not in _MATCH_READERS:
            raise FlowError(f"match: {key} is not supported by this emulator", _UNSUPPORTED)
        fields.update(_MATCH_READERS[key](value))
    return Match(**fields)


_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_ETHERNET = {"ethernet-type": "eth_type", "ethernet-source": "eth_src",
             "ethernet-destination": "eth_dst"}  # fmt: skip


def _ethernet_match(value: object) -> dict[str, object]:
    obj = _object(value, "ethernet-match")
    _no_unknown(obj, _ETHERNET, "ethernet-match")
    fields: dict[str, object] = {}
    if "ethernet-type" in obj:
        kind = _object(obj["ethernet-type"], "ethernet-type")
        fields["eth_type"] = number(kind.get("type"), "ethernet-type", 0, U16)
    for key in ("ethernet-source", "ethernet-destination"):
        if key in obj:
            address = _object(obj[key], key)
            _no_unknown(address, ("address",), key)
            mac = address.get("address")
            if not isinstance(mac, str) or not _MAC.match(mac):
                raise FlowError(f"{key}: address {mac!r} is not a MAC address")
            fields[_ETHERNET[key]] = mac.lower()
    return fields


def _vlan_id(obj: Json, what: str) -> int:
    _no_unknown(obj, ("vlan-id",), what)
    vid = _object(obj.get("vlan-id"), f"{what} vlan-id")
    if vid.get("vlan-id-present") is not True:
        raise FlowError(f"{what}: only vlan-id-present true is supported", _UNSUPPORTED)
    return number(vid.get("vlan-id"), f"{what} vlan-id", 0, 4095)


def _ip_protocol(value: object) -> int:
    obj = _object(value, "ip-match")
    _no_unknown(obj, ("ip-protocol",), "ip-match")
    return number(obj.get("ip-protocol"), "ip-protocol", 0, 255)


def parse_instructions(obj: Json) -> tuple[Action, ...]:
    """The actions of RESTCONF instructions, in order."""
    _no_unknown(obj, ("instruction",), "instructions")
    actions: list[Action] = []
    for inst in _ordered(obj.get("instruction", []), "instruction"):
        _no_unknown(inst, ("order", "apply-actions"), "instruction")
        if "apply-actions" not in inst:
            raise FlowError("instruction: only apply-actions is supported", _UNSUPPORTED)
        apply = _object(inst["apply-actions"], "apply-actions")
        actions += (_action(a) for a in _ordered(apply.get("action", []), "action"))
    return tuple(actions)


def _ordered(items: object, what: str) -> list[Json]:
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise FlowError(f"{what}: expected a list of objects")
    return sorted(items, key=lambda i: number(i.get("order"), f"{what} order", 0, U32))


def _action(obj: Json) -> Action:
    kinds = set(obj) - {"order"}
    if len(kinds) != 1:
        raise FlowError(f"action: expected one action, got {sorted(kinds)}")
    kind = kinds.pop()
    if kind not in _ACTION_READERS:
        raise FlowError(f"action {kind} is not supported by this emulator", _UNSUPPORTED)
    return _ACTION_READERS[kind](_object(obj[kind], kind))


def _output(obj: Json) -> Action:
    _no_unknown(obj, ("output-node-connector", "max-length"), "output-action")
    port = port_number(obj.get("output-node-connector"), "output-node-connector")
    return Action(kind=ActionKind.OUTPUT, arg=port)


def _push_vlan(obj: Json) -> Action:
    _no_unknown(obj, ("ethernet-type",), "push-vlan-action")
    ethertype = number(obj.get("ethernet-type", ETH_VLAN), "ethernet-type", 0, U16)
    return Action(kind=ActionKind.PUSH_VLAN, arg=ethertype)


def _set_field(obj: Json) -> Action:
    _no_unknown(obj, ("vlan-match",), "set-field")
    vid = _vlan_id(_object(obj.get("vlan-match"), "set-field vlan-match"), "set-field")
    return Action(kind=ActionKind.SET_VLAN_ID, arg=vid)


_ACTION_READERS: dict[str, Callable[[Json], Action]] = {
    "output-action": _output,
    "push-vlan-action": _push_vlan,
    "set-field": _set_field,
    "pop-vlan-action": lambda obj: Action(kind=ActionKind.POP_VLAN),
}


# --------------------------------------------------------------------------------------
# writing


def flow_json(flow: Flow, dpid: int, counters: Counters | None = None) -> Json:
    """A flow's JSON object (operational when ``counters`` are given)."""
    obj: Json = {"id": flow.id, "table_id": flow.table, "priority": flow.priority}
    obj["cookie"] = flow.cookie
    obj["idle-timeout"], obj["hard-timeout"] = flow.idle_timeout, flow.hard_timeout
    if flow.name:
        obj["flow-name"] = flow.name
    obj["match"] = match_json(flow.match, dpid)
    if flow.actions:
        actions = [_action_json(i, a) for i, a in enumerate(flow.actions)]
        apply = {"order": 0, "apply-actions": {"action": actions}}
        obj["instructions"] = {"instruction": [apply]}
    if counters is not None:
        obj["opendaylight-flow-statistics:flow-statistics"] = _stats_json(counters)
    return obj


def match_json(m: Match, dpid: int) -> Json:
    """The match as RESTCONF JSON."""
    obj: Json = {}
    if m.in_port is not None:
        obj["in-port"] = f"openflow:{dpid}:{port_text(m.in_port)}"
    ethernet: Json = {}
    if m.eth_type is not None:
        ethernet["ethernet-type"] = {"type": m.eth_type}
    if m.eth_src is not None:
        ethernet["ethernet-source"] = {"address": m.eth_src}
    if m.eth_dst is not None:
        ethernet["ethernet-destination"] = {"address": m.eth_dst}
    if ethernet:
        obj["ethernet-match"] = ethernet
    if m.vlan_id is not None:
        obj["vlan-match"] = _vlan_json(m.vlan_id)
    if m.ip_proto is not None:
        obj["ip-match"] = {"ip-protocol": m.ip_proto}
    optional = {
        "ipv4-source": m.ipv4_src, "ipv4-destination": m.ipv4_dst,
        "tcp-source-port": m.tcp_src, "tcp-destination-port": m.tcp_dst,
        "udp-source-port": m.udp_src, "udp-destination-port": m.udp_dst,
    }  # fmt: skip
    obj.update((k, v) for k, v in optional.items() if v is not None)
    return obj


def _vlan_json(vid: int) -> Json:
    return {"vlan-id": {"vlan-id": vid, "vlan-id-present": True}}


def _action_json(order: int, action: Action) -> Json:
    body: Json
    match action.kind:
        case ActionKind.OUTPUT:
            connector = port_text(action.arg)
            body = {"output-action": {"output-node-connector": connector, "max-length": 65535}}
        case ActionKind.PUSH_VLAN:
            body = {"push-vlan-action": {"ethernet-type": action.arg}}
        case ActionKind.SET_VLAN_ID:
            body = {"set-field": {"vlan-match": _vlan_json(action.arg)}}
        case ActionKind.POP_VLAN:
            body = {"pop-vlan-action": {}}
    return {"order": order, **body}


def _stats_json(c: Counters) -> Json:
    duration = {"second": c.seconds, "nanosecond": c.nanoseconds}
    return {"packet-count": c.packets, "byte-count": c.bytes, "duration": duration}


def connector_json(dpid: int, port: Port) -> Json:
    """A node-connector of the operational inventory."""
    return {
        "id": f"openflow:{dpid}:{port.number}",
        "flow-node-inventory:port-number": port.number,
        "flow-node-inventory:name": port.name,
        "flow-node-inventory:hardware-address": port.hw_addr,
        "flow-node-inventory:configuration": "PORT-DOWN" if port.admin_down else "",
        "flow-node-inventory:state": {
            "link-down": port.link_down, "blocked": False, "live": not port.link_down,
        },
    }  # fmt: skip


def table_json(table: int, flows: list[Json]) -> Json:
    """A flow table as RESTCONF JSON."""
    return {"id": table, "flow": flows}
