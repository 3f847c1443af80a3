"""drivers/ovs's own OpenFlow 1.3 encodings against os-ken's ``ofproto_v1_3_parser``, for
every message the driver sends: HELLO, ECHO_REPLY (and ECHO_REQUEST), FEATURES_REQUEST,
SET_CONFIG, SET_ASYNC, BARRIER_REQUEST, FLOW_MOD (ADD, DELETE_STRICT), the ONF bundle
messages (control: open, commit, discard; add message) and the multipart FLOW and PORT_DESC
requests.

Byte-equal where os-ken serialises the same layout. Field-equal (both sides parsed by
os-ken) where the layout legitimately differs: os-ken does not serialise HELLO elements, and
it sorts OXM fields by number while drivers/ovs writes them in the order Open vSwitch reads
them back (ip_proto after the IPv4 addresses); OpenFlow 1.3 leaves the order free.
"""

from __future__ import annotations

from typing import Any

import pytest
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from drivers.base import ETH_IPV4, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from drivers.ovs import ofp13
from drivers.ovs.driver import _ALL_PORT_REASONS, BUNDLE_FLAGS
from drivers.ovs.ofp13_flow import FlowModCommand, encode_flow_mod, encode_flow_stats_request

XID = 0x1234_5678


class Datapath:
    """What os-ken's message classes read from a datapath: the protocol modules."""

    ofproto = ofp
    ofproto_parser = parser


DP = Datapath()


def osken_bytes(msg: Any, xid: int = XID) -> bytes:
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


def osken_parse(buf: bytes) -> Any:
    """os-ken's parse of one whole message (it checks version, type and length)."""
    version, msg_type, length, xid = ofp13.HEADER.unpack_from(buf)
    assert length == len(buf)
    return ofproto_parser.msg(DP, version, msg_type, length, xid, buf)


def test_hello_offers_only_openflow_13() -> None:
    ours = osken_parse(ofp13.encode_hello(XID))
    assert isinstance(ours, parser.OFPHello) and ours.xid == XID
    (element,) = ours.elements
    assert isinstance(element, parser.OFPHelloElemVersionBitmap)
    assert element.versions == [ofp.OFP_VERSION]


@pytest.mark.parametrize("data", [b"", b"keepalive-\x00\xff"])
def test_echo_reply_and_request(data: bytes) -> None:
    assert ofp13.encode_echo_reply(XID, data) == osken_bytes(parser.OFPEchoReply(DP, data))
    assert ofp13.encode_echo_request(XID, data) == osken_bytes(parser.OFPEchoRequest(DP, data))


def test_features_request() -> None:
    assert ofp13.encode_features_request(XID) == osken_bytes(parser.OFPFeaturesRequest(DP))


def test_barrier_request() -> None:
    assert ofp13.encode_barrier_request(XID) == osken_bytes(parser.OFPBarrierRequest(DP))


def test_set_config_as_the_driver_sends_it() -> None:
    theirs = parser.OFPSetConfig(DP, 0, ofp.OFPCML_NO_BUFFER)
    assert ofp13.encode_set_config(XID) == osken_bytes(theirs)


def test_set_async_as_the_driver_sends_it() -> None:
    reasons = 1 << ofp.OFPPR_ADD | 1 << ofp.OFPPR_DELETE | 1 << ofp.OFPPR_MODIFY
    assert reasons == _ALL_PORT_REASONS
    theirs = parser.OFPSetAsync(DP, [0, 0], [reasons, reasons], [0, 0])
    assert ofp13.encode_set_async(XID, port_status=_ALL_PORT_REASONS) == osken_bytes(theirs)


def test_the_port_desc_request() -> None:
    theirs = parser.OFPPortDescStatsRequest(DP, 0)
    assert ofp13.encode_port_desc_request(XID) == osken_bytes(theirs)


@pytest.mark.parametrize(("cookie", "mask"), [(0, 0), (0x5252_0000_0000_0000, 0xFFFF << 48)])
def test_the_flow_stats_request(cookie: int, mask: int) -> None:
    theirs = parser.OFPFlowStatsRequest(
        DP, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, mask, parser.OFPMatch()
    )
    assert encode_flow_stats_request(XID, cookie, mask) == osken_bytes(theirs)


@pytest.mark.parametrize(
    ("ctrl", "theirs"),
    [
        (ofp13.BundleCtrlType.OPEN_REQUEST, ofp.ONF_BCT_OPEN_REQUEST),
        (ofp13.BundleCtrlType.COMMIT_REQUEST, ofp.ONF_BCT_COMMIT_REQUEST),
        (ofp13.BundleCtrlType.DISCARD_REQUEST, ofp.ONF_BCT_DISCARD_REQUEST),
    ],
)
def test_bundle_control(ctrl: ofp13.BundleCtrlType, theirs: int) -> None:
    assert BUNDLE_FLAGS == ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED
    msg = parser.ONFBundleCtrlMsg(DP, 77, theirs, BUNDLE_FLAGS, [])
    assert ofp13.encode_bundle_ctrl(XID, 77, ctrl, BUNDLE_FLAGS) == osken_bytes(msg)


# -------------------------------------------------------------------------- FLOW_MOD

HOST_A, HOST_B = Prefix.parse("10.0.0.2"), Prefix.parse("10.0.0.3")
RULES = {
    "in-port-only": FlowRule(match=FlowMatch(in_port=3), priority=10, actions=(Output(1),)),
    "ingress-push-vlan": FlowRule(
        match=FlowMatch(in_port=1, eth_type=ETH_IPV4, ipv4_src=HOST_A, ipv4_dst=HOST_B),
        priority=300,
        actions=(PushVlan(101), Output(2)),
        cookie=0x5252_0000_0000_0065,
    ),
    "transit-vlan": FlowRule(
        match=FlowMatch(in_port=2, vlan_vid=101),
        priority=200,
        actions=(Output(4),),
        cookie=0x5252_0000_0000_0066,
        table=1,
    ),
    "egress-pop": FlowRule(
        match=FlowMatch(vlan_vid=101, eth_type=ETH_IPV4, ipv4_dst=Prefix.parse("10.0.0.0/24")),
        priority=200,
        actions=(PopVlan(), Output(5)),
    ),
    "udp-ports": FlowRule(
        match=FlowMatch(eth_type=ETH_IPV4, ipv4_src=HOST_A, ip_proto=17, l4_src=5001, l4_dst=5201),
        priority=400,
        actions=(Output(0xFFFFFFFD),),  # to the controller: max_len NO_BUFFER
    ),
    "tcp-dst-drop": FlowRule(
        match=FlowMatch(eth_type=ETH_IPV4, ip_proto=6, l4_dst=22), priority=50, actions=()
    ),
}


def osken_match(m: FlowMatch) -> Any:
    fields: dict[str, Any] = {}
    if m.in_port is not None:
        fields["in_port"] = m.in_port
    if m.eth_type is not None:
        fields["eth_type"] = m.eth_type
    if m.vlan_vid is not None:
        fields["vlan_vid"] = m.vlan_vid | ofp.OFPVID_PRESENT
    for name, prefix in (("ipv4_src", m.ipv4_src), ("ipv4_dst", m.ipv4_dst)):
        if prefix is not None:
            addr = str(prefix.network.network_address)
            fields[name] = addr if prefix.plen == 32 else (addr, str(prefix.network.netmask))
    if m.ip_proto is not None:
        fields["ip_proto"] = m.ip_proto
    udp = m.ip_proto == 17
    if m.l4_src is not None:
        fields["udp_src" if udp else "tcp_src"] = m.l4_src
    if m.l4_dst is not None:
        fields["udp_dst" if udp else "tcp_dst"] = m.l4_dst
    return parser.OFPMatch(**fields)


def osken_actions(rule: FlowRule) -> list[Any]:
    actions: list[Any] = []
    for a in rule.actions:
        if isinstance(a, Output):
            max_len = ofp.OFPCML_NO_BUFFER if a.port == ofp.OFPP_CONTROLLER else 0
            actions.append(parser.OFPActionOutput(a.port, max_len))
        elif isinstance(a, PushVlan):
            actions.append(parser.OFPActionPushVlan(0x8100))
            actions.append(parser.OFPActionSetField(vlan_vid=a.vid | ofp.OFPVID_PRESENT))
        else:
            actions.append(parser.OFPActionPopVlan())
    return actions


def osken_flow_mod(rule: FlowRule, command: int) -> Any:
    adds = command in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT)
    apply = parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, osken_actions(rule))
    instructions = [apply] if adds and rule.actions else []
    return parser.OFPFlowMod(
        DP, rule.cookie, 0, rule.table, command, 0, 0, rule.priority, ofp.OFP_NO_BUFFER,
        ofp.OFPP_ANY, ofp.OFPG_ANY, 0, osken_match(rule.match), instructions,
    )  # fmt: skip


def flow_mod_fields(msg: Any) -> dict[str, Any]:
    """A parsed FLOW_MOD's fields, the match as a mapping (OXM order is free)."""
    names = ("cookie", "cookie_mask", "table_id", "command", "idle_timeout", "hard_timeout",
             "priority", "buffer_id", "out_port", "out_group", "flags")  # fmt: skip
    fields = {n: getattr(msg, n) for n in names}
    fields["match"] = dict(msg.match.items())
    fields["instructions"] = [i.to_jsondict() for i in msg.instructions]
    return fields


def sorted_by_oxm(rule: FlowRule) -> bool:
    """os-ken writes OXM fields sorted by number; ours put ip_proto (10) after ipv4 (11, 12)."""
    m = rule.match
    return m.ip_proto is None or (m.ipv4_src is None and m.ipv4_dst is None)


COMMANDS = [
    (FlowModCommand.ADD, ofp.OFPFC_ADD),  # an ADD also replaces: the driver sends no MODIFY
    (FlowModCommand.DELETE_STRICT, ofp.OFPFC_DELETE_STRICT),
]


@pytest.mark.parametrize(("ours", "theirs"), COMMANDS)
@pytest.mark.parametrize("name", RULES)
def test_flow_mod(name: str, ours: FlowModCommand, theirs: int) -> None:
    rule = RULES[name]
    mine = encode_flow_mod(rule, XID, ours)
    reference = osken_bytes(osken_flow_mod(rule, theirs))
    assert flow_mod_fields(osken_parse(mine)) == flow_mod_fields(osken_parse(reference))
    assert len(mine) == len(reference)
    if sorted_by_oxm(rule):
        assert mine == reference


def test_some_flow_mods_are_byte_equal_and_the_others_differ_only_in_oxm_order() -> None:
    """The field-equal comparison above is not vacuous: which rules compare as bytes."""
    assert {n for n, r in RULES.items() if sorted_by_oxm(r)} == {
        "in-port-only",
        "ingress-push-vlan",
        "transit-vlan",
        "egress-pop",
        "tcp-dst-drop",
    }


@pytest.mark.parametrize(("ours", "theirs"), COMMANDS)
def test_bundle_add_wraps_the_flow_mod(ours: FlowModCommand, theirs: int) -> None:
    rule = RULES["ingress-push-vlan"]
    inner = osken_flow_mod(rule, theirs)
    inner.set_xid(XID)
    msg = parser.ONFBundleAddMsg(DP, 77, BUNDLE_FLAGS, inner, [])
    mine = ofp13.encode_bundle_add(77, BUNDLE_FLAGS, encode_flow_mod(rule, XID, ours))
    assert mine == osken_bytes(msg, XID)
