"""The P4Runtime EMULATOR's bridge flows as ovs-ofctl text, and back from its dumps."""

from __future__ import annotations

import pytest

from emulators.p4rt.bridge import WHOLE, Change, Flow, _command, parse, text

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


def test_a_delete_names_the_flow_by_priority_and_match_only() -> None:
    assert _command(Change(flow=DROP, delete=True)) == "delete_strict priority=1,in_port=2"
    assert _command(Change(flow=DROP)) == (
        "add priority=1,cookie=0xffffffffffffffff,in_port=2 actions=drop"
    )
