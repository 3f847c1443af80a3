"""A deployment's cookie space (``rules.CookieSpace``, the inventory's ``cookie_tag``): two
deployments never take each other's rules as theirs, the default is the cookies of before,
every space's cookies still pass the reference dpctl, and an entry of ours whose tag is no
path of the topology is a PlanError naming device and cookie (never an IndexError, never
another path)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from drivers.base import FlowMatch, FlowRule, Output
from drivers.hp_dpctl import cookies
from services.reroute.engine.engine import Engine, plan_on_devices
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent
from services.reroute.model.topology import load_topology
from services.reroute.planning import plan
from services.reroute.rules import (
    COOKIE_BASE,
    MAX_COOKIE_TAG,
    ROLE_INGRESS,
    ROLE_TRANSIT,
    TRANSIT_PRIORITY,
    CookieSpace,
    cookie,
    initial_rules,
)
from services.reroute.service.views import flows_view
from services.reroute.store.records import RerouteState
from services.reroute.store.sqlite import Journal
from services.reroute.tables import tables_from
from tests.unit.services.service.fakes import FakeFabric

TOPO = load_topology(Path(__file__).resolve().parents[4] / "topologies" / "ngncs-ost.yaml")
INTENT = Intent(flows=(FlowSpec.parse("10.0.0.2>10.0.0.3"),), to_path="temporary")
OTHER = CookieSpace(tag=1)


def test_the_default_space_is_the_cookies_of_before() -> None:
    assert cookie(3, ROLE_INGRESS) == COOKIE_BASE | 0x301 == 0x5252_0000_0000_0301
    assert cookie(3, ROLE_INGRESS, CookieSpace()) == cookie(3, ROLE_INGRESS)
    assert cookie(3, ROLE_INGRESS, OTHER) == 0x5253_0000_0000_0301


@pytest.mark.parametrize("tag", [-1, MAX_COOKIE_TAG + 1])
def test_a_cookie_tag_out_of_range_is_refused(tag: int) -> None:
    with pytest.raises(ValueError, match="cookie_tag"):
        CookieSpace(tag=tag)


def test_every_space_keeps_its_cookies_apart_and_through_dpctl() -> None:
    spaces = [CookieSpace(tag=t) for t in range(MAX_COOKIE_TAG + 1)]
    assert len({s.base for s in spaces}) == len(spaces)
    for space in spaces:
        for role in (ROLE_INGRESS, ROLE_TRANSIT):
            c = cookie(255, role, space)
            assert [s.ours(c) for s in spaces].count(True) == 1 and space.ours(c)
            folded = cookies.fold(c)  # the reference dpctl carries 32 bits of a cookie
            assert folded is not None and cookies.unfold(folded) == c


def test_a_plan_writes_in_its_space_and_never_takes_another_deployments_rules() -> None:
    theirs = tables_from(initial_rules(TOPO, OTHER))
    mine = plan(TOPO, theirs, INTENT, now=0.0, space=OTHER)
    written = [c.rule for s in mine.steps() for c in s.changes]
    assert written and all(OTHER.ours(r.cookie) for r in written)
    with pytest.raises(PlanError, match="not installed"):  # the default deployment's view
        plan(TOPO, theirs, INTENT, now=0.0)


def _with(rule_cookie: int) -> FakeFabric:
    fake = FakeFabric(TOPO)
    stray = FlowRule(
        match=FlowMatch(in_port=3, eth_type=0x0800, vlan_vid=9),
        priority=TRANSIT_PRIORITY,
        actions=(Output(2),),
        cookie=rule_cookie,
    )
    fake.switches["br3"].table[stray.key] = stray
    return fake


@pytest.mark.parametrize("tag", [0, 5, 99])  # 0 was the last path, 5 and 99 an IndexError
def test_an_entry_of_ours_whose_tag_is_no_path_is_a_plan_error_naming_it(tag: int) -> None:
    fake = _with(cookie(tag, ROLE_TRANSIT))
    with pytest.raises(PlanError) as info:
        asyncio.run(plan_on_devices(TOPO, fake.switches, INTENT))
    said = str(info.value)
    assert "br3" in said and f"{cookie(tag, ROLE_TRANSIT):#x}" in said, said
    assert all(s.applied == 0 for s in fake.switches.values())


def test_another_deployments_entry_is_not_ours_to_decode() -> None:
    fake = _with(cookie(99, ROLE_TRANSIT, OTHER))
    the_plan = asyncio.run(plan_on_devices(TOPO, fake.switches, INTENT))
    assert the_plan.to_path == "temporary" and the_plan.from_paths == ("long",)


def test_an_engine_of_another_space_reroutes_resyncs_and_shows_its_flows(tmp_path: Path) -> None:
    """A fabric whose rules are another deployment's (``cookie_tag`` 1): its engine moves
    the flows in its cookies, its resync finds its rules as its journal says, its flow view
    reads them; nothing in the default deployment's cookies appears."""
    fake = FakeFabric(TOPO)
    for name, switch in fake.switches.items():
        switch.table = {r.key: r for r in initial_rules(TOPO, OTHER).get(name, [])}
    journal = Journal(tmp_path / "journal.db")
    engine = Engine(topo=TOPO, drivers=fake.switches, journal=journal, space=OTHER)
    try:
        _, outcome = asyncio.run(engine.apply(INTENT))
        assert outcome.state is RerouteState.DONE, outcome.describe()
        assert asyncio.run(engine.resync())[1] is None  # as its journal says: nothing to do
        tables, _ = asyncio.run(engine.state())
    finally:
        asyncio.run(engine.close())
        journal.close()
    shown = flows_view(TOPO, tables, None, OTHER)
    assert {p.path: p.flows for p in shown.paths if p.flows} == {
        "direct": ["10.0.0.1/32>10.0.0.4/32"],
        "temporary": ["10.0.0.2/32>10.0.0.3/32"],
    }
    held = [r for s in fake.switches.values() for r in s.table.values()]
    assert held and all(OTHER.ours(r.cookie) for r in held)
