"""The ODL driver (drivers/odl) and the ODL northbound EMULATOR (emulators/odl).

Without a switch (no root needed): the mapping both ways, the URL styles, what AD-SAL
cannot say, and the emulator's status codes and the driver's error mapping against a
running emulator. With a switch (``fabric``: the private OVS of ``odl_site``): the
operational datastore lagging config by one statistics poll, a flow the switch refuses
staying in config only, a change the controller refuses, and the wire log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pydantic
import pytest

from drivers.base import (
    DeviceRejected,
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
from drivers.odl import OdlDriver, Style, mapping, styles
from drivers.odl.driver import _gone
from drivers.odl.mapping import MappingError
from drivers.odl.spec import OdlSpec
from emulators.odl import adsal, restconf
from emulators.odl.flows import Action, ActionKind, FlowError
from tests.drivers.odl_site import (
    AUTH,
    CONFIG_NODE,
    HOST_IP,
    Emulator,
    OdlSite,
    start_emulator,
    wait_for,
)

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
FLOW_ID = mapping.flow_id(RULE)


def add(rule: FlowRule) -> FlowChange:
    return FlowChange(op=FlowOp.ADD, rule=rule)


# --------------------------------------------------------------------------------------
# mapping, both ways


def test_a_rule_maps_to_the_inventory_model() -> None:
    vlan10 = {"vlan-id": {"vlan-id": 10, "vlan-id-present": True}}
    assert mapping.flow_json(RULE, 1) == {
        "id": FLOW_ID, "table_id": 0, "priority": 200, "cookie": 0xC1,
        "idle-timeout": 0, "hard-timeout": 0,
        "match": {
            "in-port": "openflow:1:1",
            "ethernet-match": {"ethernet-type": {"type": 2048}},
            "ipv4-source": "10.0.0.0/24",
            "ipv4-destination": "10.1.2.3/32",
            "ip-match": {"ip-protocol": 6},
            "tcp-destination-port": 80,
        },
        "instructions": {"instruction": [{"order": 0, "apply-actions": {"action": [
            {"order": 0, "push-vlan-action": {"ethernet-type": 33024}},
            {"order": 1, "set-field": {"vlan-match": vlan10}},
            {"order": 2, "output-action": {"output-node-connector": "2", "max-length": 65535}},
        ]}}]},
    }  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=str)
def test_the_inventory_model_maps_back_to_the_same_rule(rule: FlowRule) -> None:
    obj = mapping.flow_json(rule, 7)
    obj["opendaylight-flow-statistics:flow-statistics"] = {"packet-count": 3}
    obj["cookie"] = str(rule.cookie)  # uint64 may come as a JSON string
    actions = obj.get("instructions", {"instruction": [{"apply-actions": {"action": []}}]})
    actions["instruction"][0]["apply-actions"]["action"].reverse()  # "order" decides
    assert mapping.parse_flow(obj) == rule


def test_the_emulator_reads_what_the_driver_writes() -> None:
    flow = restconf.parse_flow(mapping.flow_json(RULE, 1))
    assert [a.kind for a in flow.actions] == ["push-vlan", "set-vlan-id", "output"]
    assert mapping.parse_flow(restconf.flow_json(flow, 1)) == RULE


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o["match"].update({"ethernet-source": {"address": "00:00:00:00:00:01"}}),
        lambda o: o["instructions"]["instruction"][0]["apply-actions"]["action"].pop(1),
        lambda o: o["instructions"]["instruction"].append({"order": 1, "goto-table": {}}),
    ],
    ids=["unknown match field", "push-vlan without set-field", "another instruction"],
)
def test_a_flow_a_rule_cannot_hold_is_a_mapping_error(change: object) -> None:
    obj = mapping.flow_json(RULE, 1)
    assert callable(change)
    change(obj)
    with pytest.raises(MappingError):
        mapping.parse_flow(obj)


def test_the_adsal_body_is_all_strings() -> None:
    assert mapping.flow_config(RULE, 1) == {
        "installInHw": "true", "name": FLOW_ID,
        "node": {"id": "00:00:00:00:00:00:00:01", "type": "OF"},
        "ingressPort": "1", "priority": "200", "etherType": "0x800",
        "nwSrc": "10.0.0.0/24", "nwDst": "10.1.2.3", "protocol": "6", "tpDst": "80",
        "cookie": "193", "actions": ["SET_VLAN_ID=10", "OUTPUT=2"],
    }  # fmt: skip


@pytest.mark.parametrize("rule", [RULES[0], RULES[2]], ids=str)
def test_adsal_flow_statistics_map_back_to_the_rule_written(rule: FlowRule) -> None:
    flow = adsal.parse_flow_config(mapping.flow_config(rule, 1))  # as the emulator keeps it
    body = adsal.flow_statistics(1, [(flow, None)])
    assert body["flowStatistic"][0]["flow"]["id"] == rule.cookie
    assert styles.statistics_flows(body) == [rule]
    assert styles.statistics_flows({"flowStat": body["flowStatistic"]}) == [rule]


def test_an_adsal_statistic_a_rule_cannot_hold_is_a_mapping_error() -> None:
    flow = adsal.parse_flow_config(mapping.flow_config(RULE, 1))
    (stat,) = adsal.flow_statistics(1, [(flow, None)])["flowStatistic"]
    fields = [*stat["flow"]["match"]["matchField"], {"type": "DL_SRC", "value": "0:0:0:0:0:1"}]
    odd = stat | {"flow": stat["flow"] | {"match": {"matchField": fields}}}
    with pytest.raises(MappingError, match="DL_SRC"):
        styles.statistics_flows({"flowStatistic": [odd]})
    with pytest.raises(MappingError):
        styles.statistics_flows({"flowStatistic": "nothing"})


@pytest.mark.parametrize(
    ("status", "tag", "gone"),
    [(404, "", True), (409, "data-missing", True), (409, "in-use", False), (400, "", False)],
)
def test_a_delete_counts_as_done_on_404_and_409_data_missing(
    status: int, tag: str, gone: bool
) -> None:
    body = {"errors": {"error": [{"error-type": "protocol", "error-tag": tag}]}} if tag else {}
    assert _gone(httpx.Response(status, json=body)) is gone


@pytest.mark.parametrize(
    ("target", "api", "url"),
    [
        ("http://odl", "adsal", "http://odl:8080"),
        ("http://odl", "restconf", "http://odl:8181"),
        ("https://odl.example", "rfc8040", "https://odl.example:8181"),
        ("http://odl:9000", "adsal", "http://odl:9000"),
    ],
)
def test_the_default_port_is_the_api_styles(target: str, api: str, url: str) -> None:
    spec = OdlSpec.model_validate(
        {"driver": "odl", "target": target, "api": api, "password": {"env": "X"}}
    )
    assert spec.url == url


def test_the_emulator_gives_adsal_set_vlan_id_its_openflow_10_meaning() -> None:
    untagged = adsal.parse_flow_config(mapping.flow_config(RULE, 1))
    assert untagged.actions[:2] == (
        Action(kind=ActionKind.PUSH_VLAN, arg=0x8100),
        Action(kind=ActionKind.SET_VLAN_ID, arg=10),
    )
    body = mapping.flow_config(RULE, 1) | {"vlanId": "5"}
    assert adsal.parse_flow_config(body).actions[0] == Action(kind=ActionKind.SET_VLAN_ID, arg=10)


def test_the_emulator_refuses_what_odl_would() -> None:
    obj = mapping.flow_json(RULE, 1)
    with pytest.raises(FlowError):
        restconf.parse_flow(obj | {"colour": "blue"})
    with pytest.raises(FlowError):
        restconf.parse_flow(obj | {"match": {"ipv4-destination": "10.1.2.3"}})  # no /n


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        (FlowRule(match=FlowMatch(), priority=1, actions=(), table=1), "one table"),
        (FlowRule(match=FlowMatch(vlan_vid=5), priority=1, actions=(PushVlan(6),)), "QinQ"),
        (FlowRule(match=FlowMatch(l4_dst=80), priority=1, actions=()), "protocol"),
    ],
)
def test_adsal_refuses_what_it_cannot_say_before_sending(rule: FlowRule, why: str) -> None:
    driver = OdlDriver("dut", "http://127.0.0.1:9", style="adsal")  # nothing listens there
    with pytest.raises(DeviceRejected) as info:
        asyncio.run(driver.apply([add(rule)]))
    assert info.value.code == "UNSUPPORTED"
    assert why in str(info.value)


# --------------------------------------------------------------------------------------
# URL styles and ids


def test_each_style_has_its_urls() -> None:
    node = "openflow:1"
    assert styles.flow_path(Style.RFC8040, node, RULE) == (
        "/rests/data/opendaylight-inventory:nodes/node=openflow%3A1"
        f"/flow-node-inventory:table=0/flow={FLOW_ID}"
    )
    assert styles.flow_path(Style.RESTCONF, node, RULE) == (
        "/restconf/config/opendaylight-inventory:nodes/node/openflow:1"
        f"/flow-node-inventory:table/0/flow/{FLOW_ID}"
    )
    assert styles.flow_path(Style.ADSAL, node, RULE) == (
        "/controller/nb/v2/flowprogrammer/default/node/OF/00:00:00:00:00:00:00:01"
        f"/staticFlow/{FLOW_ID}"
    )
    assert styles.operational_path(Style.RFC8040, node) == (
        "/rests/data/opendaylight-inventory:nodes/node=openflow%3A1?content=nonconfig"
    )
    assert styles.operational_path(Style.ADSAL, node) == (
        "/restconf/operational/opendaylight-inventory:nodes/node/openflow:1"
    )


def test_a_flow_id_is_the_rules_key() -> None:
    other_actions = FlowRule(match=RULE.match, priority=200, actions=(Output(3),))
    assert mapping.flow_id(other_actions) == FLOW_ID  # the same entry, replaced
    assert mapping.flow_id(FlowRule(match=RULE.match, priority=201, actions=())) != FLOW_ID
    assert FLOW_ID.startswith("rr-") and len(FLOW_ID) == 19


# --------------------------------------------------------------------------------------
# against an emulator without switches


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    found = start_emulator(
        tmp_path_factory.mktemp("odl-bare"), openflow_host="127.0.0.1", stats_interval_s=0.2
    )
    yield found
    found.stop()


RFC_FLOW = f"{CONFIG_NODE}/flow-node-inventory:table=0/flow={FLOW_ID}"
DRAFT_FLOW = (
    "/restconf/config/opendaylight-inventory:nodes/node/openflow:1"
    f"/flow-node-inventory:table/0/flow/{FLOW_ID}"
)
ADSAL_FLOW = (
    f"/controller/nb/v2/flowprogrammer/default/node/OF/00:00:00:00:00:00:00:01/staticFlow/{FLOW_ID}"
)


def test_the_emulator_answers_with_odls_status_codes(emulator: Emulator) -> None:
    body = styles.flow_body(Style.RFC8040, "openflow:1", RULE)
    with emulator.http() as http:
        assert http.put(RFC_FLOW, json=body).status_code == 201
        assert http.put(RFC_FLOW, json=body).status_code == 204
        assert http.get(f"{RFC_FLOW}?content=config").json() == body
        assert http.get(f"{RFC_FLOW}?content=nonconfig").status_code == 404  # no switch
        assert http.put(DRAFT_FLOW, json=body).status_code == 200
        assert http.delete(RFC_FLOW).status_code == 204
        missing = http.delete(RFC_FLOW)  # RFC 8040 section 7: data-missing is 409
        assert missing.status_code == 409
        assert missing.json()["errors"]["error"][0]["error-tag"] == "data-missing"
        assert http.delete(DRAFT_FLOW).status_code == 404
        assert http.put(DRAFT_FLOW, json=body).status_code == 201
        assert http.delete(DRAFT_FLOW).status_code == 204
        other = RFC_FLOW.replace(FLOW_ID, "other")
        assert http.put(other, json=body).status_code == 409
        assert http.get("/restconf/operational/opendaylight-inventory:nodes").json() == {
            "nodes": {"node": []}
        }


def test_the_emulator_refuses_a_malformed_body_with_an_odl_error(emulator: Emulator) -> None:
    with emulator.http() as http:
        response = http.put(RFC_FLOW, content=b'{"flow-node-inventory:flow": [{"id": 3}]}')
    assert response.status_code == 400
    (error,) = response.json()["errors"]["error"]
    assert error["error-tag"] == "malformed-message"
    assert error["error-type"] == "application"


def test_the_emulator_speaks_adsal(emulator: Emulator) -> None:
    body = mapping.flow_config(RULE, 1)
    with emulator.http() as http:
        assert http.put(ADSAL_FLOW, json=body).status_code == 201
        assert http.put(ADSAL_FLOW, json=body).status_code == 200
        stored = http.get(ADSAL_FLOW).json()
        assert stored == body | {"idleTimeout": "0", "hardTimeout": "0"}
        listed = http.get("/controller/nb/v2/flowprogrammer/default").json()
        assert listed == {"flowConfig": [stored]}
        elsewhere = body | {"node": {"id": "00:00:00:00:00:00:00:02", "type": "OF"}}
        assert http.put(ADSAL_FLOW, json=elsewhere).status_code == 405
        assert http.delete(ADSAL_FLOW).status_code == 204
        assert http.delete(ADSAL_FLOW).status_code == 404


def test_the_emulator_wants_credentials(emulator: Emulator) -> None:
    response = httpx.get(f"{emulator.base_url}{CONFIG_NODE}", auth=("admin", "nope"))
    assert response.status_code == 401
    assert "Basic" in response.headers["WWW-Authenticate"]


def test_wrong_credentials_are_rejected_with_code_auth(emulator: Emulator) -> None:
    driver = OdlDriver("dut", emulator.base_url, password="nope")
    with pytest.raises(DeviceRejected) as info:
        asyncio.run(driver.open())
    assert info.value.code == "auth"


def test_a_node_the_controller_does_not_have_is_unreachable(emulator: Emulator) -> None:
    for style in Style:
        with pytest.raises(DeviceUnreachable, match="not connected to the controller"):
            asyncio.run(OdlDriver("dut", emulator.base_url, style=style).open())


def test_server_errors_are_rejections_with_the_status() -> None:
    driver = OdlDriver("dut", "http://127.0.0.1:9")
    error = driver._status_error(httpx.Response(503, text="busy"), "")
    assert isinstance(error, DeviceRejected) and error.code == "http-503"


def test_sigterm_stops_the_emulator_cleanly(tmp_path: Path) -> None:
    found = start_emulator(tmp_path, openflow_host="127.0.0.1", stats_interval_s=3.0)
    start = time.monotonic()
    assert found.stop() == 0
    assert time.monotonic() - start < 5.0
    assert "stopping" in found.log.read_text()


# --------------------------------------------------------------------------------------
# against an emulator controlling a switch


@pytest.fixture
def site(odl_site: OdlSite) -> Iterator[OdlSite]:
    odl_site.reset()
    yield odl_site
    odl_site.reset()


@pytest.fixture
def slow(site: OdlSite, tmp_path: Path) -> Iterator[Emulator]:
    """An emulator polling statistics every second, controlling the bridge meanwhile."""
    found = start_emulator(tmp_path, openflow_host=HOST_IP, stats_interval_s=1.0)
    try:
        site.control(found)
        yield found
    finally:
        found.stop()
        site.control(site.emulator)


def _put(http: httpx.Client, rule: FlowRule) -> None:
    """Write ``rule`` through the northbound as another client would."""
    answer = http.put(
        styles.flow_path(Style.RFC8040, "openflow:1", rule),
        json=styles.flow_body(Style.RFC8040, "openflow:1", rule),
    )
    assert answer.status_code in (200, 201, 204), answer.text


def _operational(http: httpx.Client, flow_id: str) -> int:
    url = f"{CONFIG_NODE}/flow-node-inventory:table=0/flow={flow_id}?content=nonconfig"
    return http.get(url).status_code


@pytest.mark.fabric
def test_operational_shows_a_flow_only_after_the_statistics_poll(slow: Emulator) -> None:
    first = FlowRule(match=FlowMatch(in_port=2), priority=5, actions=())
    with slow.http() as http:
        http.put(
            styles.flow_path(Style.RFC8040, "openflow:1", first),
            json=styles.flow_body(Style.RFC8040, "openflow:1", first),
        )
        wait_for(lambda: _operational(http, mapping.flow_id(first)) == 200, "a poll")
        start = time.monotonic()  # a poll has just happened: the next is ~1 s away
        assert http.put(RFC_FLOW, json=styles.flow_body(Style.RFC8040, "openflow:1", RULE))
        assert http.get(f"{RFC_FLOW}?content=config").status_code == 200
        assert _operational(http, FLOW_ID) == 404
        wait_for(lambda: _operational(http, FLOW_ID) == 200, "the flow in operational")
        lag = time.monotonic() - start
    assert 0.5 < lag < 1.5


@pytest.mark.fabric
def test_a_flow_the_switch_refuses_stays_in_config_only(site: OdlSite) -> None:
    site.cap_table(0)
    with site.emulator.http() as http:
        assert http.put(RFC_FLOW, json=styles.flow_body(Style.RFC8040, "openflow:1", RULE))
        time.sleep(0.6)  # three polls
        assert http.get(f"{RFC_FLOW}?content=config").status_code == 200
        assert _operational(http, FLOW_ID) == 404
    log = site.emulator.log.read_text()
    assert f"refused add of flow {FLOW_ID}" in log and "OFPFMFC_TABLE_FULL" in log


@pytest.mark.fabric
def test_a_change_the_controller_refuses_is_rejected_and_undone(site: OdlSite) -> None:
    normal = FlowRule(match=FlowMatch(in_port=1), priority=9, actions=(Output(0xFFFFFFFA),))

    async def main() -> DeviceRejected:
        async with OdlDriver("dut", site.emulator.base_url, operational_wait_s=2.0) as driver:
            await driver.apply([add(RULE)])
            with pytest.raises(DeviceRejected) as info:
                await driver.apply([FlowChange(op=FlowOp.DELETE, rule=RULE), add(normal)])
            assert await driver.read() == [RULE]
            return info.value

    error = asyncio.run(main())
    assert error.code == "malformed-message"
    assert "change #1" in str(error)


@pytest.mark.fabric
def test_every_request_is_in_the_wire_log(site: OdlSite, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with OdlDriver("dut", site.emulator.base_url, operational_wait_s=2.0) as driver:
            await driver.apply([add(RULE)])

    with caplog.at_level(logging.DEBUG, logger="reroute.wire.odl.dut"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.odl.dut"]
    assert any(line.startswith(f"> PUT {RFC_FLOW} ") for line in lines)
    assert "< 201 " in lines
    assert any(line.startswith("> GET ") and "content=nonconfig" in line for line in lines)
    assert not any(AUTH[1] in line for line in lines), "credentials stay out of the log"


@pytest.mark.fabric
@pytest.mark.parametrize("style", ["rfc8040", "restconf", "adsal"])
def test_deleting_a_flow_that_is_not_there_is_done(site: OdlSite, style: str) -> None:
    other = FlowRule(match=FlowMatch(in_port=2), priority=5, actions=(Output(1),))

    async def main() -> list[FlowRule]:
        url = site.emulator.base_url
        async with OdlDriver("dut", url, style=style, operational_wait_s=2.0) as driver:
            await driver.apply([add(other)])
            await driver.apply([FlowChange(op=FlowOp.DELETE, rule=RULE)])  # never added
            return await driver.read()

    assert asyncio.run(main()) == [other]


@pytest.mark.fabric
def test_adsal_reads_back_through_its_statistics_northbound(
    slow: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """An AD-SAL batch is verified in AD-SAL's statistics northbound (the switch's flows
    at the last poll), never in RESTCONF (only the node check at open reads it)."""
    rule = FlowRule(match=FlowMatch(in_port=2), priority=7, actions=(Output(1),), cookie=5)

    async def main() -> list[FlowRule]:
        async with OdlDriver("dut", slow.base_url, style="adsal", operational_wait_s=3.0) as d:
            await d.apply([add(rule)])
            return await d.read(cookie=5)

    with caplog.at_level(logging.DEBUG, logger="reroute.wire.odl.dut"):
        assert asyncio.run(main()) == [rule]
    lines = [r.getMessage() for r in caplog.records if r.name == "reroute.wire.odl.dut"]
    reads = [line.split()[2] for line in lines if line.startswith("> GET ")]
    stats = "/controller/nb/v2/statistics/default/flow/node/OF/00:00:00:00:00:00:00:01"
    assert reads.count(stats) >= 2  # the undo point and the read-back
    assert not any("/restconf/" in r or "/rests/" in r for r in reads[1:]), reads


@pytest.mark.fabric
@pytest.mark.parametrize("style", ["rfc8040", "restconf"])
def test_read_back_from_config_settles_before_the_poll_and_the_switch_has_it(
    slow: Emulator, site: OdlSite, style: str
) -> None:
    """``read_back: config``: a batch is confirmed from the config datastore at once, well
    before the 1 s statistics poll shows it in operational; the switch has the flow then
    (read from the bridge itself), and a delete settles the same way."""

    async def main() -> tuple[float, list[FlowRule], float]:
        async with OdlDriver(
            "dut", slow.base_url, style=style, operational_wait_s=3.0, read_back="config"
        ) as d:
            start = time.monotonic()
            await d.apply([add(RULE)])
            added = time.monotonic() - start
            table = await d.read()
            start = time.monotonic()
            await d.apply([FlowChange(op=FlowOp.DELETE, rule=RULE)])
            return added, table, time.monotonic() - start

    added, table, deleted = asyncio.run(main())
    assert table == [RULE] and added < 0.5 and deleted < 0.5, (added, deleted)
    assert "nw_dst=10.1.2.3" not in site.ofctl("dump-flows")  # deleted on the switch too


def test_read_back_from_config_needs_a_restconf_style() -> None:
    with pytest.raises(ValueError, match="operational or config"):
        OdlDriver("dut", "http://127.0.0.1:1", read_back="switch")
    with pytest.raises(ValueError, match="AD-SAL"):
        OdlDriver("dut", "http://127.0.0.1:1", style="adsal", read_back="config")
    spec = {"driver": "odl", "target": "http://192.0.2.40", "api": "adsal",
            "password": {"env": "X"}, "read_back": "config"}  # fmt: skip
    with pytest.raises(pydantic.ValidationError, match="needs a RESTCONF api"):
        OdlSpec.model_validate(spec)


@pytest.mark.fabric
def test_read_shows_another_clients_flow_at_once_and_a_batch_waits_for_the_switch(
    slow: Emulator,
) -> None:
    """What the engine plans on is the controller's config: a flow another client wrote a
    moment ago is there before the next statistics poll (operational still lacks it); the
    driver's own batch still returns only once operational (the switch) shows it."""
    other = FlowRule(match=FlowMatch(in_port=2), priority=5, actions=(Output(1),))

    async def main() -> tuple[list[FlowRule], int, int]:
        async with OdlDriver("dut", slow.base_url, operational_wait_s=3.0) as d:
            with slow.http() as http:
                first = FlowRule(match=FlowMatch(in_port=1), priority=5, actions=())
                first_id = mapping.flow_id(first)
                _put(http, first)
                wait_for(lambda: _operational(http, first_id) == 200, "a poll")
                _put(http, other)  # a poll has just shown the first: ~1 s to the next
                seen = [r for r in await d.read() if r != first]
                in_operational = _operational(http, mapping.flow_id(other))
                await d.apply([add(RULE)])
                return seen, in_operational, _operational(http, FLOW_ID)

    seen, other_then, rule_after = asyncio.run(main())
    assert seen == [other] and other_then == 404  # config has it, operational not yet
    assert rule_after == 200  # the batch returned once the switch (operational) had it


@pytest.mark.fabric
def test_a_batch_that_puts_back_a_recent_change_waits_for_a_poll_after_it(
    slow: Emulator,
) -> None:
    """Another client changes a flow and the driver puts it back before the controller
    polls: operational still shows the old flow, which is what the batch wants. The batch
    returns only once a poll after its writes shows it (the operational node has moved
    on), not on that stale view."""
    changed = FlowRule(match=RULE.match, priority=RULE.priority, actions=(Output(1),))
    node = f"{CONFIG_NODE}?content=nonconfig"

    async def main() -> tuple[object, object]:
        async with OdlDriver("dut", slow.base_url, operational_wait_s=3.0) as d:
            await d.apply([add(RULE)])  # in operational: a poll after the write
            with slow.http() as http:
                _put(http, changed)  # another client, between two polls
                stale = http.get(node).json()
                await d.apply([add(RULE)])  # back as it was: the stale view already says so
                return stale, http.get(node).json()

    stale, after = asyncio.run(main())
    assert after != stale  # a poll came between the writes and the batch's return
