"""Reading around other writers' entries (``drivers.foreign``), and each driver's reading of
the entries labs have, in the form its device lists them (no device needed)."""

from __future__ import annotations

import logging

import pytest

from drivers import batch, foreign
from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule, Output, Prefix
from drivers.errors import ProtocolError
from drivers.hp_dpctl import flowtext
from drivers.odl import mapping as odl
from drivers.ryu_rest import mapping as ryu

OURS = FlowRule(
    match=FlowMatch(in_port=1, eth_type=0x0800, ipv4_dst=Prefix.parse("10.0.0.3")),
    priority=200,
    actions=(Output(2),),
    cookie=0x5252_0000_0000_0101,
)
LLDP_RYU = {  # the ofctl_rest entry, as /stats/flow lists it
    "priority": 5, "cookie": 0, "table_id": 0, "idle_timeout": 0, "hard_timeout": 0,
    "packet_count": 3, "byte_count": 180, "duration_sec": 9, "duration_nsec": 1, "length": 96,
    "flags": 0, "match": {"dl_dst": "01:80:c2:00:00:0e"}, "actions": ["OUTPUT:CONTROLLER"],
}  # fmt: skip
GOTO_RYU = {"priority": 10, "cookie": 7, "table_id": 0, "match": {"in_port": 2},
            "actions": ["GOTO_TABLE:1"]}  # fmt: skip
L2SWITCH = {  # ODL l2switch's MAC-learning flow, as the operational datastore shows it
    "id": "L2switch-12", "table_id": 0, "priority": 10, "cookie": 3098476543630901248,
    "match": {"ethernet-match": {"ethernet-source": {"address": "00:00:00:00:00:01"},
                                 "ethernet-destination": {"address": "00:00:00:00:00:02"}},
              "in-port": "openflow:1:1"},
    "instructions": {"instruction": [{"order": 0, "apply-actions": {"action": [
        {"order": 0, "output-action": {"output-node-connector": "2", "max-length": 65535}}]}}]},
}  # fmt: skip
RYU = foreign.Reader(
    cookie=ryu.flow_cookie, rule=ryu.parse_flow, foreign=ryu.foreign_flow, text=ryu.entry_text
)


def _ours_ryu() -> dict[str, object]:
    return {"priority": 200, "cookie": OURS.cookie, "table_id": 0,
            "match": {"in_port": 1, "dl_type": 2048, "nw_dst": "10.0.0.3"},
            "actions": ["OUTPUT:2"]}  # fmt: skip


def test_an_unfiltered_read_skips_what_it_cannot_read_and_logs_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    skips = foreign.Skips("sw1")
    entries = [LLDP_RYU, _ours_ryu(), GOTO_RYU]
    with caplog.at_level(logging.WARNING, "reroute.drivers"):
        for _ in range(3):
            assert foreign.select(entries, RYU, 0, 0, skips) == [OURS]
    assert skips.count == 6
    logged = [r for r in caplog.records if "sw1" in r.getMessage()]
    assert len(logged) == 1 and "01:80:c2:00:00:0e" in logged[0].getMessage()


def test_a_filtered_read_never_parses_others_but_refuses_an_unreadable_one_of_ours() -> None:
    skips = foreign.Skips("sw1")
    entries = [LLDP_RYU, _ours_ryu(), GOTO_RYU]
    assert foreign.select(entries, RYU, OURS.cookie, 2**64 - 1, skips) == [OURS]
    assert skips.count == 0
    broken = {**GOTO_RYU, "cookie": OURS.cookie}
    with pytest.raises(ProtocolError, match="GOTO_TABLE"):
        foreign.select([broken], RYU, OURS.cookie, 2**64 - 1, skips)
    assert foreign.select([broken], RYU, OURS.cookie, 2**64 - 1, skips, strict=False) == []


def test_a_survey_sorts_ours_from_foreign_entries() -> None:
    survey = foreign.sort([LLDP_RYU, _ours_ryu(), GOTO_RYU], RYU, OURS.cookie, 2**64 - 1,
                          foreign.Skips("sw1"))  # fmt: skip
    assert survey.ours == [OURS]
    lldp, goto = survey.foreign
    assert (lldp.table, lldp.priority, lldp.match, lldp.more) == (0, 5, FlowMatch(), True)
    assert "01:80:c2:00:00:0e" in lldp.text and "byte_count" not in lldp.text
    assert (goto.priority, goto.match, goto.more) == (10, FlowMatch(in_port=2), False)


def test_odl_l2switch_flows_read_as_foreign_entries() -> None:
    got = odl.foreign_flow(L2SWITCH)
    assert (got.table, got.priority, got.more) == (0, 10, True)
    assert got.match == FlowMatch(in_port=1)
    assert "ethernet-source" in got.text
    with pytest.raises(ValueError):
        odl.parse_flow(L2SWITCH)


@pytest.mark.parametrize(
    ("line", "priority", "match", "more"),
    [
        (
            " cookie=0x0, duration=1.2s, table=0, n_packets=0, n_bytes=0, priority=65535,"
            "dl_type=0x88cc actions=CONTROLLER:65535",
            65535,
            FlowMatch(eth_type=0x88CC),
            False,
        ),
        (" cookie=0x0, table=0, priority=0 actions=NORMAL", 0, FlowMatch(), False),
        (
            " cookie=0x2b00000000000001, priority=10,in_port=1,dl_src=00:00:00:00:00:01,"
            "dl_dst=00:00:00:00:00:02 actions=output:2",
            10,
            FlowMatch(in_port=1),
            True,
        ),
    ],
)
def test_dump_flows_lines_of_other_writers_read_as_foreign_entries(
    line: str, priority: int, match: FlowMatch, more: bool
) -> None:
    got = flowtext.foreign_entry(line)
    assert (got.priority, got.match, got.more, got.text) == (priority, match, more, line.strip())


def test_a_batch_reads_under_the_cookie_bits_it_shares() -> None:
    a, b = OURS, FlowRule(match=FlowMatch(in_port=3), priority=300, actions=(),
                          cookie=0x5252_0000_0000_0302)  # fmt: skip
    cookie, mask = batch.cookies([FlowChange(op=FlowOp.ADD, rule=a),
                                  FlowChange(op=FlowOp.DELETE, rule=b)])  # fmt: skip
    assert a.cookie & mask == cookie == b.cookie & mask
    assert mask >> 48 == 0xFFFF  # another writer's cookie 0 is outside it
    assert 0 & mask != cookie
    assert batch.cookies([]) == (0, 0)
