"""The P4 program the ``p4runtime`` driver programs: its P4Info, written by hand (no p4c).

The program (v1model) has one ternary table, ``MyIngress.reroute``, whose entries are the
driver's flow rules; the table misses to ``MyIngress.drop``::

    table reroute {
        key = {
            standard_metadata.ingress_port : ternary;  // 9 bits
            hdr.vlan.isValid()             : ternary;  // "hdr.vlan.$valid$", 1 bit
            hdr.vlan.vid                   : ternary;  // 12 bits
            hdr.ipv4.isValid()             : ternary;  // "hdr.ipv4.$valid$", 1 bit
            hdr.ipv4.srcAddr               : ternary;  // 32 bits
            hdr.ipv4.dstAddr               : ternary;
            hdr.ipv4.protocol              : ternary;  // 8 bits
            meta.l4_src                    : ternary;  // 16 bits, TCP or UDP source port
            meta.l4_dst                    : ternary;
        }
        actions = { forward; push_vlan_forward; pop_vlan_forward; drop; }
        const default_action = drop();
        size = 65536;
    }

    action forward(bit<9> port)                       // out of port
    action push_vlan_forward(bit<12> vid, bit<9> port) // push an 802.1Q tag, out of port
    action pop_vlan_forward(bit<9> port)               // pop the outer tag, out of port
    action drop()

Each entry's controller ``metadata`` (8 bytes, big-endian) is the flow rule's cookie.
"""

from __future__ import annotations

from enum import IntEnum

from drivers.p4runtime.proto import p4info_pb2

TABLE = "MyIngress.reroute"
TABLE_ID = 0x0200_0001
TABLE_SIZE = 65536


class Field(IntEnum):
    """Match field ids of ``MyIngress.reroute``."""

    INGRESS_PORT = 1
    VLAN_VALID = 2
    VLAN_VID = 3
    IPV4_VALID = 4
    IPV4_SRC = 5
    IPV4_DST = 6
    IPV4_PROTO = 7
    L4_SRC = 8
    L4_DST = 9


FIELDS: dict[Field, tuple[str, int]] = {  # id -> (name, bit width)
    Field.INGRESS_PORT: ("standard_metadata.ingress_port", 9),
    Field.VLAN_VALID: ("hdr.vlan.$valid$", 1),
    Field.VLAN_VID: ("hdr.vlan.vid", 12),
    Field.IPV4_VALID: ("hdr.ipv4.$valid$", 1),
    Field.IPV4_SRC: ("hdr.ipv4.srcAddr", 32),
    Field.IPV4_DST: ("hdr.ipv4.dstAddr", 32),
    Field.IPV4_PROTO: ("hdr.ipv4.protocol", 8),
    Field.L4_SRC: ("meta.l4_src", 16),
    Field.L4_DST: ("meta.l4_dst", 16),
}


class ActionId(IntEnum):
    FORWARD = 0x0100_0001
    PUSH_VLAN_FORWARD = 0x0100_0002
    POP_VLAN_FORWARD = 0x0100_0003
    DROP = 0x0100_0004


PORT_BITS, VID_BITS = 9, 12
ACTIONS: dict[ActionId, tuple[str, tuple[tuple[str, int], ...]]] = {  # params: (name, bits)
    ActionId.FORWARD: ("MyIngress.forward", (("port", PORT_BITS),)),
    ActionId.PUSH_VLAN_FORWARD: (
        "MyIngress.push_vlan_forward",
        (("vid", VID_BITS), ("port", PORT_BITS)),
    ),
    ActionId.POP_VLAN_FORWARD: ("MyIngress.pop_vlan_forward", (("port", PORT_BITS),)),
    ActionId.DROP: ("MyIngress.drop", ()),
}


def p4info() -> p4info_pb2.P4Info:
    """The program's P4Info (a new message each call)."""
    info = p4info_pb2.P4Info()
    info.pkg_info.name = "reroute"
    info.pkg_info.arch = "v1model"
    table = info.tables.add()
    table.preamble.id, table.preamble.name = TABLE_ID, TABLE
    table.preamble.alias = TABLE.rsplit(".", 1)[-1]
    for field_id, (name, bits) in FIELDS.items():
        table.match_fields.add(
            id=field_id, name=name, bitwidth=bits, match_type=p4info_pb2.MatchField.TERNARY
        )
    table.action_refs.extend(p4info_pb2.ActionRef(id=a) for a in ActionId)
    table.const_default_action_id = ActionId.DROP
    table.size = TABLE_SIZE
    for action_id, (name, params) in ACTIONS.items():
        action = info.actions.add()
        action.preamble.id, action.preamble.name = action_id, name
        action.preamble.alias = name.rsplit(".", 1)[-1]
        for param_id, (pname, bits) in enumerate(params, start=1):
            action.params.add(id=param_id, name=pname, bitwidth=bits)
    return info
