"""The P4Runtime EMULATOR's bridge flows: as ovs-ofctl text and back from its dumps, and the
OpenFlow messages its channel sends, byte for byte as os-ken encodes them."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Any

import pytest
from os_ken.ofproto import ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as P

from emulators.p4rt import ofwire
from emulators.p4rt.bridge import parse, text
from emulators.p4rt.flow import WHOLE, Flow

DATAPATH = ofproto_protocol.ProtocolDesc(version=ofp.OFP_VERSION)

TAGGED = Flow(
    priority=100,
    cookie=0xB0,
    match=(
        ("in_port", 1, WHOLE),
        ("dl_vlan", 10, WHOLE),
        ("dl_type", 0x0800, WHOLE),
        ("nw_dst", 0x0A000000, 0xFFFFFF00),
        ("nw_proto", 6, WHOLE),
        ("tp_dst", 80, WHOLE),
    ),
    actions=(("pop_vlan", 0), ("output", 2)),
)
PUSH = Flow(priority=7, cookie=0, match=(), actions=(("push_vlan", 20), ("output", 3)))
DROP = Flow(priority=1, cookie=2**64 - 1, match=(("in_port", 2, WHOLE),), actions=())


@pytest.mark.parametrize("flow", [TAGGED, PUSH, DROP])
def test_a_flow_written_reads_back_the_same(flow: Flow) -> None:
    assert parse(text(flow)) == flow


@pytest.mark.parametrize(
    ("line", "flow"),
    [
        (
            " cookie=0xb0, priority=100,tcp,in_port=1,dl_vlan=10,nw_dst=10.0.0.0/24,tp_dst=80"
            " actions=pop_vlan,output:2",
            TAGGED,
        ),
        (
            " priority=7 actions=push_vlan:0x8100,set_field:4116->vlan_vid,output:3",
            PUSH,
        ),
        (" cookie=0xffffffffffffffff, priority=1,in_port=2 actions=drop", DROP),
    ],
)
def test_a_dump_line_of_ovs_reads_as_its_flow(line: str, flow: Flow) -> None:
    assert parse(line) == flow


@pytest.mark.parametrize(
    "line",
    [
        " priority=1,arp actions=drop",  # a field the program has none for
        " priority=1,in_port=1 actions=NORMAL",
        " priority=1,ip,nw_src=10.0.0.0/255.0.255.0 actions=drop",  # not a prefix
        " priority=1,in_port=1",
    ],
)
def test_what_no_flow_of_ours_says_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        parse(line)


def osken_flow_mod(flow: Flow, xid: int, *, delete: bool) -> bytes:
    """The same flow mod as os-ken's OpenFlow library encodes it (the oracle)."""
    fields = {name: (v, mask) for name, v, mask in flow.match}
    l4 = {6: ("tcp_src", "tcp_dst"), 17: ("udp_src", "udp_dst")}.get(
        fields.get("nw_proto", (0,))[0]
    )
    names = {"in_port": "in_port", "dl_type": "eth_type", "nw_proto": "ip_proto"}
    match: dict[str, Any] = {}
    for name, (v, mask) in fields.items():
        if name == "dl_vlan":
            match["vlan_vid"] = v | 0x1000
        elif name in ("nw_src", "nw_dst"):
            addr = (str(IPv4Address(v)), str(IPv4Address(mask)))
            match["ipv4_src" if name == "nw_src" else "ipv4_dst"] = addr
        elif name in ("tp_src", "tp_dst"):
            assert l4 is not None
            match[l4[name == "tp_dst"]] = v
        else:
            match[names[name]] = v
    actions: list[Any] = []
    for name, arg in flow.actions:
        if name == "push_vlan":
            actions += [P.OFPActionPushVlan(0x8100), P.OFPActionSetField(vlan_vid=arg | 0x1000)]
        else:
            actions.append(P.OFPActionPopVlan() if name == "pop_vlan" else P.OFPActionOutput(arg))
    apply = [P.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    mod = P.OFPFlowMod(
        DATAPATH,
        cookie=flow.cookie,
        command=ofp.OFPFC_DELETE_STRICT if delete else ofp.OFPFC_ADD,
        priority=flow.priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=P.OFPMatch(**match),
        instructions=apply,
    )
    mod.set_xid(xid)
    mod.serialize()
    return bytes(mod.buf)


UDP = Flow(
    priority=9,
    cookie=1,
    match=(
        ("dl_type", 0x0800, WHOLE),
        ("nw_src", 0x0A000001, 0xFFFFFFFF),
        ("nw_proto", 17, WHOLE),
        ("tp_src", 53, WHOLE),
    ),
    actions=(("output", 4),),
)


@pytest.mark.parametrize("flow", [TAGGED, PUSH, DROP, UDP])
@pytest.mark.parametrize("delete", [False, True])
def test_the_flow_mods_bytes_are_os_kens(flow: Flow, delete: bool) -> None:
    assert ofwire.flow_mod(flow, 9, delete=delete) == osken_flow_mod(flow, 9, delete=delete)


def test_the_bundle_messages_bytes_are_os_kens() -> None:
    control = P.ONFBundleCtrlMsg(DATAPATH, 3, ofp.ONF_BCT_COMMIT_REQUEST, ofp.ONF_BF_ATOMIC, [])
    control.set_xid(5)
    control.serialize()
    assert ofwire.bundle_control(3, ofwire.COMMIT_REQUEST, 5) == bytes(control.buf)
    match = P.OFPMatch(in_port=2)
    inner = P.OFPFlowMod(
        DATAPATH, priority=1, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=match
    )
    inner.set_xid(6)
    add = P.ONFBundleAddMsg(DATAPATH, 3, ofp.ONF_BF_ATOMIC, inner, [])
    add.set_xid(6)
    add.serialize()
    assert ofwire.bundle_add(3, ofwire.flow_mod(DROP._replace(cookie=0), 6, delete=False), 6) == (
        bytes(add.buf)
    )
