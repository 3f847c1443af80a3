"""The EMULATOR's flows as os-ken OpenFlow 1.3 messages, and switch replies as flows.

os-ken's parser classes are untyped (``Any`` here); everything crossing into the rest of
the emulator is a ``emulators.odl.flows`` value.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from ipaddress import IPv4Network
from typing import Any

from emulators.odl.flows import Action, ActionKind, Counters, Flow, Match, Port

OFPVID_PRESENT = 0x1000
_MATCH_FIELDS = {  # Match attribute -> os-ken OXM field name
    "in_port": "in_port",
    "eth_src": "eth_src",
    "eth_dst": "eth_dst",
    "eth_type": "eth_type",
    "vlan_id": "vlan_vid",
    "ip_proto": "ip_proto",
    "ipv4_src": "ipv4_src",
    "ipv4_dst": "ipv4_dst",
    "tcp_src": "tcp_src",
    "tcp_dst": "tcp_dst",
    "udp_src": "udp_src",
    "udp_dst": "udp_dst",
}
_ATTRS = {v: k for k, v in _MATCH_FIELDS.items()}


class Command(StrEnum):
    ADD = "add"
    DELETE_STRICT = "delete-strict"


class Unreadable(ValueError):
    """A switch entry the emulator's flow model cannot represent."""


# --------------------------------------------------------------------------------------
# flows -> messages


def flow_mod(dp: Any, flow: Flow, command: Command, xid: int) -> Any:
    """An OFPFlowMod for ``flow`` on datapath ``dp``."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    adding = command is Command.ADD
    msg = parser.OFPFlowMod(
        dp,
        cookie=flow.cookie,
        table_id=flow.table,
        command=ofp.OFPFC_ADD if adding else ofp.OFPFC_DELETE_STRICT,
        idle_timeout=flow.idle_timeout,
        hard_timeout=flow.hard_timeout,
        priority=flow.priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**match_fields(flow.match)),
        instructions=instructions(dp, flow.actions) if adding else [],
    )
    msg.set_xid(xid)
    return msg


def match_fields(m: Match) -> dict[str, Any]:
    """The match as os-ken ``OFPMatch`` keyword arguments."""
    fields: dict[str, Any] = {}
    for attr, oxm in _MATCH_FIELDS.items():
        value = getattr(m, attr)
        if value is None:
            continue
        if attr == "vlan_id":
            value |= OFPVID_PRESENT
        elif attr in ("ipv4_src", "ipv4_dst"):
            value = _ipv4(value)
        fields[oxm] = value
    return fields


def _ipv4(text: str) -> Any:
    net = IPv4Network(text)
    if net.prefixlen == 32:
        return str(net.network_address)
    return (str(net.network_address), str(net.netmask))


def instructions(dp: Any, actions: tuple[Action, ...]) -> list[Any]:
    """The os-ken instructions applying ``actions`` (none for a drop)."""
    if not actions:
        return []
    parser = dp.ofproto_parser
    acts = [_action(parser, a) for a in actions]
    return [parser.OFPInstructionActions(dp.ofproto.OFPIT_APPLY_ACTIONS, acts)]


def _action(parser: Any, action: Action) -> Any:
    match action.kind:
        case ActionKind.OUTPUT:
            return parser.OFPActionOutput(action.arg, 0xFFFF)
        case ActionKind.PUSH_VLAN:
            return parser.OFPActionPushVlan(action.arg)
        case ActionKind.SET_VLAN_ID:
            return parser.OFPActionSetField(vlan_vid=action.arg | OFPVID_PRESENT)
        case ActionKind.POP_VLAN:
            return parser.OFPActionPopVlan()


# --------------------------------------------------------------------------------------
# replies -> flows


def flow_entries(stats: list[Any]) -> Iterator[tuple[Flow, Counters]]:
    """The entries of flow stats replies (an entry the model cannot hold is skipped by
    the caller's ``Unreadable`` handling: raised here)."""
    for s in stats:
        flow = Flow(
            id="",
            table=s.table_id,
            priority=s.priority,
            cookie=s.cookie,
            match=read_match(s.match),
            actions=tuple(read_actions(s.instructions)),
            idle_timeout=s.idle_timeout,
            hard_timeout=s.hard_timeout,
        )
        counters = Counters(
            packets=s.packet_count, bytes=s.byte_count, seconds=s.duration_sec,
            nanoseconds=s.duration_nsec,
        )  # fmt: skip
        yield flow, counters


def read_match(match: Any) -> Match:
    """The match of an os-ken ``OFPMatch``."""
    fields: dict[str, Any] = {}
    for oxm, value in match.items():
        masked = isinstance(value, tuple) and oxm not in ("ipv4_src", "ipv4_dst")
        if oxm not in _ATTRS or masked:
            raise Unreadable(f"match field {oxm}={value!r}")
        if oxm == "vlan_vid":
            value &= 0x0FFF
        elif oxm in ("ipv4_src", "ipv4_dst"):
            value = str(IPv4Network("/".join(value) if isinstance(value, tuple) else value))
        fields[_ATTRS[oxm]] = value
    return Match(**fields)


def read_actions(insts: list[Any]) -> Iterator[Action]:
    """The actions of os-ken instructions."""
    for inst in insts:
        if not hasattr(inst, "actions"):
            raise Unreadable(f"instruction {type(inst).__name__}")
        for act in inst.actions:
            yield _read_action(act)


def _read_action(act: Any) -> Action:
    name = type(act).__name__
    if name == "OFPActionOutput":
        return Action(kind=ActionKind.OUTPUT, arg=act.port)
    if name == "OFPActionPushVlan":
        return Action(kind=ActionKind.PUSH_VLAN, arg=act.ethertype)
    if name == "OFPActionPopVlan":
        return Action(kind=ActionKind.POP_VLAN)
    if name == "OFPActionSetField" and act.key == "vlan_vid":
        return Action(kind=ActionKind.SET_VLAN_ID, arg=act.value & 0x0FFF)
    raise Unreadable(f"action {name}")


def ports(descs: list[Any], ofp: Any) -> list[Port]:
    """Numbered ports of PORT_DESC replies (LOCAL and other reserved ports left out)."""
    return [port(d, ofp) for d in descs if d.port_no <= ofp.OFPP_MAX]


def port(desc: Any, ofp: Any) -> Port:
    """The port of an os-ken port description."""
    name = desc.name.decode(errors="replace") if isinstance(desc.name, bytes) else desc.name
    return Port(
        number=desc.port_no,
        name=name.rstrip("\0"),
        hw_addr=str(desc.hw_addr),
        link_down=bool(desc.state & ofp.OFPPS_LINK_DOWN),
        admin_down=bool(desc.config & ofp.OFPPC_PORT_DOWN),
    )
