"""The P4Runtime EMULATOR's bridge flows: as ovs-ofctl text and back from its dumps, and as
the OpenFlow flow mods its channel sends."""

from __future__ import annotations

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp

from emulators.p4rt.bridge import parse, text
from emulators.p4rt.flow import WHOLE, Flow
from emulators.p4rt.openflow import flow_mod

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


def test_a_flow_mod_carries_the_flow() -> None:
    mod = flow_mod(TAGGED, delete=False)
    assert (mod.command, mod.priority, mod.cookie, mod.table_id) == (ofp.OFPFC_ADD, 100, 0xB0, 0)
    assert dict(mod.match.items()) == {
        "in_port": 1,
        "vlan_vid": 10 | 0x1000,
        "eth_type": 0x0800,
        "ipv4_dst": ("10.0.0.0", "255.255.255.0"),
        "ip_proto": 6,
        "tcp_dst": 80,
    }
    (instruction,) = mod.instructions
    assert [type(a).__name__ for a in instruction.actions] == [
        "OFPActionPopVlan",
        "OFPActionOutput",
    ]


def test_a_delete_names_the_flow_by_priority_and_match_only() -> None:
    mod = flow_mod(DROP, delete=True)
    assert mod.command == ofp.OFPFC_DELETE_STRICT and mod.cookie_mask == 0
    assert (mod.out_port, mod.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert dict(mod.match.items()) == {"in_port": 2} and mod.instructions == []
    mod.set_xid(7)
    mod.serialize()  # OpenFlow 1.3 bytes
    assert mod.buf[:2] == bytes([ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD])
