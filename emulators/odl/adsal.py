"""Hydrogen's AD-SAL flowprogrammer bodies (``FlowConfig``), both ways, for the EMULATOR.

Every value is a string::

    {"installInHw": "true", "name": "f1",
     "node": {"id": "00:00:00:00:00:00:00:01", "type": "OF"},
     "ingressPort": "1", "priority": "500", "etherType": "0x800", "vlanId": "10",
     "nwSrc": "10.0.0.0/24", "nwDst": "10.0.0.2", "protocol": "6", "tpSrc": "1000",
     "tpDst": "80", "cookie": "193", "actions": ["SET_VLAN_ID=20", "OUTPUT=2"]}

AD-SAL has one table (0). Its actions have OpenFlow 1.0 meanings, translated for the
OpenFlow 1.3 switch: ``SET_VLAN_ID=v`` tags an untagged frame (push + set-field) and
rewrites the id of a tagged one; ``POP_VLAN`` strips the tag; ``DROP`` (or no action)
drops. ``tpSrc``/``tpDst`` are TCP or UDP ports as ``protocol`` says.

Static flows live in the same config datastore as RESTCONF flows (table 0, id = name),
so RESTCONF reads see them; the operational datastore is the inventory model's. The
statistics northbound (``flow_statistics``) lists the flows the switch reported at the
last poll, in AD-SAL's ``FlowStatistics`` shape (match fields by type, ``IN_PORT`` as a
node connector ``OF|2@OF|00:..:01``; actions by type; the flow's ``id`` is its cookie).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from emulators.odl.flows import (
    DEFAULT_PRIORITY,
    PORT_NAMES,
    Action,
    ActionKind,
    Counters,
    Flow,
    FlowError,
    Match,
    number,
    port_number,
    port_text,
    prefix,
)

Json = dict[str, Any]
T = TypeVar("T")
ETH_VLAN = 0x8100
PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}
_KNOWN = frozenset(
    {"installInHw", "name", "node", "ingressPort", "priority", "etherType", "vlanId",
     "nwSrc", "nwDst", "protocol", "tpSrc", "tpDst", "cookie", "idleTimeout", "hardTimeout",
     "actions"}
)  # fmt: skip
_UNSUPPORTED = frozenset({"vlanPriority", "dlSrc", "dlDst", "tosBits", "dlType"})


def node_id(dpid: int) -> str:
    """``1`` -> ``00:00:00:00:00:00:00:01``."""
    raw = f"{dpid:016x}"
    return ":".join(raw[i : i + 2] for i in range(0, 16, 2))


def parse_node_id(text: str) -> int:
    """``00:00:00:00:00:00:00:01`` (or a plain number) -> ``1``; ValueError otherwise."""
    digits = text.replace(":", "")
    if ":" in text and len(digits) != 16:
        raise ValueError(f"bad OF node id {text!r}")
    return int(digits, 16) if ":" in text else int(text, 0)


def body_node(body: Json) -> tuple[str, str]:
    """The ``(type, id)`` of a body's ``node`` (FlowError when missing)."""
    node = body.get("node")
    if not isinstance(node, dict) or not isinstance(node.get("id"), str):
        raise FlowError('node: expected {"id": ..., "type": "OF"}')
    return str(node.get("type", "OF")), node["id"]


def parse_flow_config(body: object) -> Flow:
    """A FlowConfig as a Flow of table 0 named ``name`` (FlowError when malformed)."""
    if not isinstance(body, dict):
        raise FlowError("expected a FlowConfig object")
    _check_members(body)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise FlowError("name: missing")
    match = _match(body)
    return Flow(
        id=name,
        table=0,
        priority=number(body.get("priority", DEFAULT_PRIORITY), "priority", 0, 0xFFFF),
        cookie=number(body.get("cookie", "0"), "cookie", 0, 0xFFFF_FFFF_FFFF_FFFF),
        match=match,
        actions=tuple(_actions(body.get("actions", []), tagged=match.vlan_id is not None)),
        idle_timeout=number(body.get("idleTimeout", "0"), "idleTimeout", 0, 0xFFFF),
        hard_timeout=number(body.get("hardTimeout", "0"), "hardTimeout", 0, 0xFFFF),
    )


def _check_members(body: Json) -> None:
    refused = sorted(set(body) & _UNSUPPORTED)
    if refused:
        raise FlowError(f"{', '.join(refused)}: not supported by this emulator")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise FlowError(f"unknown field(s) {', '.join(unknown)}")


def _match(body: Json) -> Match:
    proto = _protocol(body.get("protocol"))
    tp_src = _opt(body, "tpSrc", lambda v: number(v, "tpSrc", 0, 0xFFFF))
    tp_dst = _opt(body, "tpDst", lambda v: number(v, "tpDst", 0, 0xFFFF))
    if (tp_src, tp_dst) != (None, None) and proto not in (6, 17):
        raise FlowError("tpSrc/tpDst need protocol TCP or UDP")
    udp = proto == 17
    return Match(
        in_port=_opt(body, "ingressPort", lambda v: port_number(v, "ingressPort")),
        eth_type=_opt(body, "etherType", lambda v: number(_int(v), "etherType", 0, 0xFFFF)),
        vlan_id=_opt(body, "vlanId", lambda v: number(v, "vlanId", 1, 4095)),
        ipv4_src=_opt(body, "nwSrc", lambda v: prefix(v, "nwSrc", need_length=False)),
        ipv4_dst=_opt(body, "nwDst", lambda v: prefix(v, "nwDst", need_length=False)),
        ip_proto=proto,
        tcp_src=None if udp else tp_src,
        tcp_dst=None if udp else tp_dst,
        udp_src=tp_src if udp else None,
        udp_dst=tp_dst if udp else None,
    )


def _opt(body: Json, key: str, read: Callable[[object], T]) -> T | None:
    value = body.get(key)
    return None if value in (None, "") else read(value)


def _int(text: object) -> object:
    if isinstance(text, str):
        try:
            return int(text.strip(), 0)
        except ValueError:
            return text
    return text


def _protocol(value: object) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, str) and value.strip().lower() in PROTOCOLS:
        return PROTOCOLS[value.strip().lower()]
    return number(_int(value), "protocol", 0, 255)


def _actions(items: object, *, tagged: bool) -> Iterator[Action]:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise FlowError("actions: expected a list of strings")
    for item in items:
        name, _, arg = item.partition("=")
        name = name.strip().upper()
        if name == "OUTPUT":
            yield from (Action(kind=ActionKind.OUTPUT, arg=port_number(p, item))
                        for p in arg.split(","))  # fmt: skip
        elif name == "SET_VLAN_ID":
            if not tagged:
                yield Action(kind=ActionKind.PUSH_VLAN, arg=ETH_VLAN)
            yield Action(kind=ActionKind.SET_VLAN_ID, arg=number(arg, item, 1, 4095))
            tagged = True
        elif name == "POP_VLAN":
            yield Action(kind=ActionKind.POP_VLAN)
            tagged = False
        elif name == "CONTROLLER":
            yield Action(kind=ActionKind.OUTPUT, arg=port_number("CONTROLLER", item))
        elif name != "DROP":
            raise FlowError(f"action {item!r} is not supported by this emulator")


# --------------------------------------------------------------------------------------
# writing


def flow_config(flow: Flow, dpid: int) -> Json:
    """A Flow as a FlowConfig (all strings)."""
    m = flow.match
    body: Json = {"installInHw": "true", "name": flow.id}
    body["node"] = {"id": node_id(dpid), "type": "OF"}
    tp_src = m.tcp_src if m.tcp_src is not None else m.udp_src
    tp_dst = m.tcp_dst if m.tcp_dst is not None else m.udp_dst
    fields = {
        "ingressPort": None if m.in_port is None else port_text(m.in_port),
        "priority": flow.priority,
        "etherType": None if m.eth_type is None else f"{m.eth_type:#x}",
        "vlanId": m.vlan_id,
        "nwSrc": _host(m.ipv4_src),
        "nwDst": _host(m.ipv4_dst),
        "protocol": m.ip_proto,
        "tpSrc": tp_src,
        "tpDst": tp_dst,
        "cookie": flow.cookie,
        "idleTimeout": flow.idle_timeout,
        "hardTimeout": flow.hard_timeout,
    }
    body.update((k, str(v)) for k, v in fields.items() if v is not None)
    body["actions"] = list(_action_texts(flow.actions)) or ["DROP"]
    return body


def _host(net: str | None) -> str | None:
    return None if net is None else net.removesuffix("/32")


def _action_texts(actions: tuple[Action, ...]) -> Iterator[str]:
    for action in actions:
        match action.kind:
            case ActionKind.OUTPUT:
                yield f"OUTPUT={port_text(action.arg)}"
            case ActionKind.SET_VLAN_ID:
                yield f"SET_VLAN_ID={action.arg}"
            case ActionKind.POP_VLAN:
                yield "POP_VLAN"
            case ActionKind.PUSH_VLAN:
                pass  # its SET_VLAN_ID says it


# --------------------------------------------------------------------------------------
# the statistics northbound: the flows the switch reports


def flow_statistics(dpid: int, entries: list[tuple[Flow, Counters | None]]) -> Json:
    """``GET /controller/nb/v2/statistics/default/flow/node/OF/ID``: the node's flows as
    its last statistics poll found them (AD-SAL ``FlowStatistics``; its ``Flow.id`` is
    the cookie)."""
    node = {"id": node_id(dpid), "type": "OF"}
    stats = []
    for flow, counters in entries:
        c = counters or Counters()
        stats.append({
            "flow": {
                "match": {"matchField": list(_match_fields(flow.match, node))},
                "actions": list(_stat_actions(flow.actions, node)),
                "priority": flow.priority, "idleTimeout": flow.idle_timeout,
                "hardTimeout": flow.hard_timeout, "id": flow.cookie,
            },
            "tableId": flow.table, "durationSeconds": c.seconds,
            "durationNanoseconds": c.nanoseconds, "packetCount": c.packets,
            "byteCount": c.bytes,
        })  # fmt: skip
    return {"node": node, "flowStatistic": stats}


def _connector(port: int, node: Json) -> str:
    return f"OF|{port_text(port)}@OF|{node['id']}"


def _match_fields(m: Match, node: Json) -> Iterator[Json]:
    if m.in_port is not None:
        yield {"type": "IN_PORT", "value": _connector(m.in_port, node)}
    for kind, mac in (("DL_SRC", m.eth_src), ("DL_DST", m.eth_dst)):
        if mac is not None:
            yield {"type": kind, "value": mac}
    if m.eth_type is not None:
        yield {"type": "DL_TYPE", "value": str(m.eth_type)}
    if m.vlan_id is not None:
        yield {"type": "DL_VLAN", "value": str(m.vlan_id)}
    for kind, net in (("NW_SRC", m.ipv4_src), ("NW_DST", m.ipv4_dst)):
        if net is not None:
            yield {"type": kind, "value": net.split("/")[0], "mask": _netmask(net)}
    if m.ip_proto is not None:
        yield {"type": "NW_PROTO", "value": str(m.ip_proto)}
    for kind, port in (("TP_SRC", m.tcp_src), ("TP_SRC", m.udp_src),
                       ("TP_DST", m.tcp_dst), ("TP_DST", m.udp_dst)):  # fmt: skip
        if port is not None:
            yield {"type": kind, "value": str(port)}


def _netmask(net: str) -> str:
    bits = int(net.split("/")[1]) if "/" in net else 32
    mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
    return ".".join(str(mask >> s & 255) for s in (24, 16, 8, 0))


def _stat_actions(actions: tuple[Action, ...], node: Json) -> Iterator[Json]:
    for action in actions:
        match action.kind:
            case ActionKind.OUTPUT if action.arg in PORT_NAMES:
                yield {"type": PORT_NAMES[action.arg]}
            case ActionKind.OUTPUT:
                port = {"node": node, "id": str(action.arg), "type": "OF"}
                yield {"type": "OUTPUT", "port": port}
            case ActionKind.SET_VLAN_ID:
                yield {"type": "SET_VLAN_ID", "vlanId": action.arg}
            case ActionKind.POP_VLAN:
                yield {"type": "POP_VLAN"}
            case ActionKind.PUSH_VLAN:
                pass  # OpenFlow 1.0 has no push: its SET_VLAN_ID says it
