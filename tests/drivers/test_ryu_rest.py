"""The Ryu ofctl_rest driver (drivers/ryu_rest) and the ofctl_rest EMULATOR (emulators/ryu),
each check of ofctl_rest's answers made against real Ryu 4.34 too (``fabric.peers``).

Without a switch (no root needed): the mapping both ways, checked against the strings
os-ken's own ``ofctl_v1_3`` writes, and ofctl_rest's status codes where no datapath is
needed. With a switch (``fabric``: the private OVSs of ``ryu_site``): ofctl_rest's answers
for a connected datapath (200 for a flow the switch refuses; 400, 404, 500 as Ryu), the
entries as Ryu formats them, the driver's wire log, and (real Ryu) a switch that does not
answer the controller in time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drivers.base import (
    DeviceRejected,
    DeviceTimeout,
    DeviceUnreachable,
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    PopVlan,
    Prefix,
    PushVlan,
)
from drivers.ryu_rest import RyuRestDriver, mapping
from drivers.ryu_rest.mapping import MappingError
from fabric.kinds.ryu_rest import peer as ryupeer
from tests import peers as need
from tests.drivers.controller_site import Controller
from tests.drivers.ryu_site import DPID, Emulator, RyuSite, start_emulator

RULE = FlowRule(
    match=FlowMatch(
        in_port=1, eth_type=0x0800, ipv4_src=Prefix.parse("10.0.0.0/24"),
        ipv4_dst=Prefix.parse("10.1.2.3"), ip_proto=6, l4_dst=80,
    ),
    priority=200, actions=(PushVlan(10), Output(2)), cookie=0xC1,
)  # fmt: skip
RULES = [
    RULE,
    FlowRule(
        match=FlowMatch(vlan_vid=10, eth_type=0x0800, ip_proto=17, l4_src=53),
        priority=100, actions=(PopVlan(), Output(0xFFFFFFFD)), cookie=0xC2, table=3,
    ),
    FlowRule(match=FlowMatch(in_port=2), priority=1, actions=()),
]  # fmt: skip
# RULE as GET /stats/flow shows it (os-ken's ofctl_v1_3.match_to_str / actions_to_str)
RULE_ENTRY = {
    "priority": 200, "cookie": 193, "idle_timeout": 0, "hard_timeout": 0, "byte_count": 0,
    "duration_sec": 1, "duration_nsec": 5000, "packet_count": 0, "length": 120, "flags": 0,
    "actions": ["PUSH_VLAN:33024", "SET_FIELD: {vlan_vid:4106}", "OUTPUT:2"],
    "match": {"in_port": 1, "dl_type": 2048, "nw_src": "10.0.0.0/255.255.255.0",
              "nw_dst": "10.1.2.3", "nw_proto": 6, "tp_dst": 80},
    "table_id": 0,
}  # fmt: skip


def add(rule: FlowRule) -> FlowChange:
    return FlowChange(op=FlowOp.ADD, rule=rule)


# --------------------------------------------------------------------------------------
# the mapping


def test_an_add_body_uses_ofctl_v1_3_names_and_python_literals_only() -> None:
    body = mapping.add_body(RULE, 1)
    assert body == {
        "dpid": 1, "table_id": 0, "priority": 200,
        "match": {"in_port": 1, "eth_type": 2048, "ipv4_src": "10.0.0.0/24",
                  "ipv4_dst": "10.1.2.3", "ip_proto": 6, "tcp_dst": 80},
        "cookie": 193, "idle_timeout": 0, "hard_timeout": 0, "flags": 0,
        "actions": [{"type": "PUSH_VLAN", "ethertype": 33024},
                    {"type": "SET_FIELD", "field": "vlan_vid", "value": 4106},
                    {"type": "OUTPUT", "port": 2}],
    }  # fmt: skip
    assert "true" not in str(body) and "None" not in str(body)  # ast.literal_eval reads it
    assert mapping.delete_body(RULE, 1) == {
        k: body[k] for k in ("dpid", "table_id", "priority", "match")
    }
    udp = mapping.match_json(RULES[1].match)
    assert udp == {"eth_type": 2048, "vlan_vid": 10, "ip_proto": 17, "udp_src": 53}
    assert mapping.add_body(RULES[1], 1)["actions"][-1] == {"type": "OUTPUT", "port": "CONTROLLER"}
    assert mapping.add_body(RULES[2], 1)["actions"] == []


def test_entries_read_back_as_ryu_formats_them() -> None:
    assert mapping.parse_flow(RULE_ENTRY) == RULE
    entry = {
        "priority": 100, "cookie": 194, "table_id": 3,
        "match": {"dl_vlan": "10", "dl_type": 2048, "nw_proto": 17, "tp_src": 53},
        "actions": ["POP_VLAN", "OUTPUT:CONTROLLER"],
    }  # fmt: skip
    assert mapping.parse_flow(entry) == RULES[1]
    drop = {"priority": 1, "cookie": 0, "table_id": 0, "match": {"in_port": 2}, "actions": []}
    assert mapping.parse_flow(drop) == RULES[2]
    oxm = {"priority": 5, "match": {"eth_type": 2048, "ipv4_dst": "10.0.0.0/24", "tcp_dst": 1}}
    assert mapping.parse_flow(oxm).match.ipv4_dst == Prefix.parse("10.0.0.0/24")


@pytest.mark.parametrize(
    "change",
    [
        {"actions": ["GOTO_TABLE:1"]},
        {"actions": ["SET_FIELD: {eth_dst:00:00:00:00:00:01}"]},
        {"actions": ["PUSH_VLAN:33024", "OUTPUT:2"]},
        {"actions": [{"WRITE_ACTIONS": ["OUTPUT:2"]}]},
        {"match": {"dl_src": "00:00:00:00:00:01"}},
        {"match": {"dl_vlan": "0x1000/0x1000"}},
        {"priority": "high"},
    ],
)
def test_an_entry_a_flow_rule_cannot_hold_is_a_mapping_error(change: dict[str, object]) -> None:
    with pytest.raises(MappingError):
        mapping.parse_flow(RULE_ENTRY | change)


def test_what_ofctl_rest_cannot_say_is_named() -> None:
    zero = FlowRule(match=FlowMatch(ipv4_dst=Prefix.parse("0.0.0.0/0")), priority=1, actions=())
    assert "/0" in (mapping.unsupported(zero) or "")
    l4 = FlowRule(match=FlowMatch(l4_dst=80), priority=1, actions=())
    assert "ip_proto" in (mapping.unsupported(l4) or "")
    assert all(mapping.unsupported(r) is None for r in RULES)


def test_an_unsupported_change_is_refused_before_anything_is_sent() -> None:
    driver = RyuRestDriver("sw", "http://127.0.0.1:9", 1)  # never opened: nothing is sent
    zero = FlowRule(match=FlowMatch(ipv4_dst=Prefix.parse("0.0.0.0/0")), priority=1, actions=())
    with pytest.raises(DeviceRejected) as info:
        asyncio.run(driver.apply([add(RULE), add(zero)]))
    assert info.value.code == "UNSUPPORTED" and "#1" in str(info.value)


# --------------------------------------------------------------------------------------
# the emulator with no switch


@pytest.fixture(scope="module", params=["emulator", "ryu-4.34"])
def lone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Controller]:
    """ofctl_rest with no switch (its OpenFlow listener on loopback): the emulator, and
    real Ryu 4.34 (what the emulator must answer like)."""
    workdir = tmp_path_factory.mktemp("ryu-lone")
    if request.param == "emulator":
        emulator = start_emulator(workdir, openflow_host="127.0.0.1")
        yield emulator
        assert emulator.stop() == 0
        return
    need.ryu_manager()
    real = ryupeer.start(workdir, "ryu", openflow_host="127.0.0.1")
    try:
        yield real
    finally:
        real.stop()


# answered by the web server, not by ofctl_rest: no route, and an exception it lets through
SERVER_ANSWERS = {("GET", "/stats/flowentry/add"), ("GET", "/stats/nothing")}


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/stats/switches", None, 200),
        ("GET", "/stats/flow/1", None, 404),  # no such datapath
        ("GET", "/stats/flow/0x1", None, 404),  # int(x, 0): hex is a dpid too
        ("GET", "/stats/flow/one", None, 400),  # Invalid dpid
        ("GET", "/stats/portdesc/7", None, 404),
        ("POST", "/stats/flowentry/add", b"{'dpid': 1}", 404),
        ("POST", "/stats/flowentry/add", b"{'priority': 1}", 400),  # no dpid anywhere
        ("POST", "/stats/flowentry/add", b"{'dpid': 1,", 400),  # SyntaxError
        ("POST", "/stats/flowentry/add", b'{"dpid": 1, "x": true}', 500),  # ValueError escapes
        ("POST", "/stats/flowentry/add", b"{'dpid': 'x1'}", 400),
        ("DELETE", "/stats/flowentry/clear/1", None, 404),
        ("GET", "/stats/flowentry/add", None, 404),  # no route for the method
        ("GET", "/stats/nothing", None, 404),
    ],
)
def test_the_emulator_answers_with_ofctl_rest_status_codes(
    lone: Controller, method: str, path: str, body: bytes | None, status: int
) -> None:
    with httpx.Client(base_url=lone.base_url, timeout=5.0) as http:
        answer = http.request(method, path, content=body)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert answer.json() == []
    elif (method, path) not in SERVER_ANSWERS and status != 500:
        assert answer.content == b""  # ofctl_rest's own error answers have no body


def test_a_switch_the_controller_does_not_have_is_unreachable(lone: Controller) -> None:
    async def main() -> None:
        async with RyuRestDriver("sw", lone.base_url, 1):
            pass

    with pytest.raises(DeviceUnreachable, match="not connected"):
        asyncio.run(main())


# --------------------------------------------------------------------------------------
# with a switch


@pytest.fixture(params=["ryu", "ryu_real"], ids=["emulator", "ryu-4.34"])
def site(request: pytest.FixtureRequest) -> Iterator[RyuSite]:
    """A bridge controlled by the emulator, and one controlled by real Ryu 4.34."""
    controlled: RyuSite = request.getfixturevalue(request.param)
    controlled.reset()
    yield controlled
    controlled.reset()


@pytest.mark.fabric
def test_ofctl_rest_shows_entries_as_ryu_formats_them(site: RyuSite) -> None:
    with httpx.Client(base_url=site.emulator.base_url, timeout=5.0) as http:
        body = mapping.add_body(RULE, DPID)
        assert http.post("/stats/flowentry/add", content=repr(body)).status_code == 200
        (entry,) = http.get(f"/stats/flow/{DPID}").json()[str(DPID)]
        ports = http.get(f"/stats/portdesc/{DPID}").json()[str(DPID)]
    assert {
        k: entry[k] for k in RULE_ENTRY if k not in ("duration_sec", "duration_nsec", "length")
    } == {
        k: v for k, v in RULE_ENTRY.items() if k not in ("duration_sec", "duration_nsec", "length")
    }
    assert {p["port_no"] for p in ports} == {1, 2, "LOCAL"}
    assert "priority=200" in site.ofctl("dump-flows")


@pytest.mark.fabric
def test_a_refused_flow_mod_is_still_200_and_only_the_log_says_why(site: RyuSite) -> None:
    site.cap_table(0)
    with httpx.Client(base_url=site.emulator.base_url, timeout=5.0) as http:
        answer = http.post("/stats/flowentry/add", json=mapping.add_body(RULE, DPID))
        assert answer.status_code == 200
        assert http.get(f"/stats/flow/{DPID}").json() == {str(DPID): []}
        bad_cmd = http.post("/stats/flowentry/replace", json={"dpid": DPID})
        bad_value = http.post("/stats/flowentry/add", json={"dpid": DPID, "priority": "x"})
        bad_port = http.post("/stats/flowentry/add", json={"dpid": DPID, "match": {"tp_dst": 1}})
    assert (bad_cmd.status_code, bad_value.status_code, bad_port.status_code) == (404, 400, 500)
    if isinstance(site.emulator, Emulator):  # real Ryu logs OFPT_ERROR at debug level only
        assert _log_says(site.emulator.log, "unsolicited error OFPET_")


def _log_says(log: Path, text: str) -> bool:
    return text in log.read_text(errors="replace")


@pytest.mark.fabric
def test_a_refused_batch_is_undone_and_every_request_is_on_the_wire_log(
    site: RyuSite, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> list[FlowRule]:
        async with RyuRestDriver("sw", site.emulator.base_url, DPID, verify_wait_s=0.3) as d:
            await d.apply([add(RULES[2])])
            site.cap_table(1)
            with pytest.raises(DeviceRejected) as info:  # table 3 takes it, table 0 is full
                await d.apply([add(RULES[1]), add(RULE)])
            assert info.value.code == "not-in-table"
            return await d.read()

    with caplog.at_level(logging.DEBUG, logger="reroute.wire.ryu_rest.sw"):
        assert asyncio.run(main()) == [RULES[2]]
    sent = [r.getMessage() for r in caplog.records if r.getMessage().startswith(">")]
    assert any("/stats/flowentry/delete_strict" in m and "'table_id': 3" in m for m in sent)
    assert sum("/stats/flowentry/add" in m for m in sent) == 3  # the undo deleted RULES[1]


@pytest.mark.fabric
def test_a_switch_that_does_not_answer_ryu_in_time_is_a_timeout_not_an_empty_table(
    ryu_real: RyuSite,
) -> None:
    """Real Ryu answers a stats request the switch leaves unanswered for 1 s with 200 and
    an empty list; the driver asks again, then says the switch did not answer. Nothing is
    written meanwhile."""
    ryu_real.reset()
    pid = int((ryu_real.ovs.rundir / "ovs-vswitchd.pid").read_text())

    async def main() -> tuple[DeviceTimeout, DeviceTimeout, float, list[FlowRule]]:
        async with RyuRestDriver("sw", ryu_real.emulator.base_url, DPID, timeout=1.5) as d:
            await d.apply([add(RULE)])
            os.kill(pid, signal.SIGSTOP)  # the switch stops answering (and its link stays)
            try:
                start = time.monotonic()
                with pytest.raises(DeviceTimeout) as read:
                    await d.read()
                took = time.monotonic() - start
                with pytest.raises(DeviceTimeout) as write:
                    await d.apply([add(RULES[2])])  # its undo point cannot be read
            finally:
                os.kill(pid, signal.SIGCONT)
            return read.value, write.value, took, await d.read()

    read, write, took, table = asyncio.run(main())
    assert "did not answer" in str(read) and "not an empty table" in str(read)
    assert "did not answer" in str(write)
    assert 1.5 <= took < 4.0  # asked again until the driver's timeout, then gave up
    assert table == [RULE]
