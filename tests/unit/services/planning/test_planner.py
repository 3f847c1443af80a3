"""The planner: every prefix of an MBB plan keeps every moved flow on a working path."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers.base import FlowOp, Prefix
from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.topology import Topology, load_topology
from services.reroute.planning import plan
from services.reroute.planning.electronic import drain_for
from services.reroute.planning.plan import Disruption, Plan, Step, StepKind
from services.reroute.planning.restore import plan_restore
from services.reroute.rules import host_flow, path_rules, path_tag, tag_of
from services.reroute.tables import Packet, Tables, apply_changes, deliver, tables_from

ROOT = Path(__file__).resolve().parents[4]
NGNCS = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
TWO_SITE = load_topology(ROOT / "topologies" / "two-site-longhaul.yaml")


def initial_tables(topo: Topology, extra: list[FlowSpec] | None = None) -> Tables:
    rules: dict[str, list] = {}
    for path in topo.paths.values():
        if path.initial:
            flows = [host_flow(path)] + [f for f in extra or [] if _on(path, f)]
            for bridge, rs in path_rules(topo, path, flows).items():
                rules.setdefault(bridge, []).extend(rs)
    return tables_from(rules)


def _on(path, flow: FlowSpec) -> bool:
    return flow.src.network.network_address == path.src_ip and (
        flow.dst.network.network_address == path.dst_ip
    )


def packet_of(flow: FlowSpec) -> Packet:
    return Packet(
        src=flow.src.network.network_address,
        dst=flow.dst.network.network_address,
        ip_proto=flow.ip_proto or 17,
        l4_src=flow.l4_src or 40000,
        l4_dst=flow.l4_dst or 5001,
    )


def host_of(topo: Topology, addr: IPv4Address) -> str:
    return next(h.name for h in topo.hosts if h.address == addr)


def both_ways_delivered(topo: Topology, tables: Tables, flow: FlowSpec) -> bool:
    ok = True
    for f in (flow, flow.reverse()):
        p = packet_of(f)
        ok &= deliver(topo, tables, host_of(topo, p.src), p).delivered
    return ok


def run_prefixes(topo: Topology, tables: Tables, p: Plan) -> list[Tables]:
    """The tables after each step of the plan (index 0: before any step)."""
    states = [tables]
    for step in p.steps():
        if step.changes:
            tables = apply_changes(tables, step.device, step.changes)
        states.append(tables)
    return states


def reachable_states(tables: Tables, p: Plan) -> list[Tables]:
    """Every state a run of the plan can stop in: each prefix of the sequential phases and,
    within a concurrent phase, every subset of its steps."""
    states = [tables]
    for phase in p.phases:
        steps = [s for s in phase.steps if s.changes]
        if phase.concurrent:
            for k in range(1, len(steps)):
                for subset in itertools.combinations(steps, k):
                    states.append(_apply_all(tables, subset))
            tables = _apply_all(tables, steps)
            states.append(tables)
        else:
            for step in steps:
                tables = apply_changes(tables, step.device, step.changes)
                states.append(tables)
    return states


def _apply_all(tables: Tables, steps: Iterable[Step]) -> Tables:
    for step in steps:
        tables = apply_changes(tables, step.device, step.changes)
    return tables


def ours(tables: Tables) -> dict:
    return {b: t for b, t in tables.items() if t}


def path_of(topo: Topology, tables: Tables, flow: FlowSpec) -> str:
    to = next(iter(topo.paths.values()))
    for path in topo.paths.values():
        if _on(path, flow):
            to = path
    rule = tables[to.hops[0].node].get(
        next(r for r in path_rules(topo, to, [flow])[to.hops[0].node] if r.cookie & 0xFF == 1).key
    )
    assert rule is not None
    return list(topo.paths)[tag_of(rule) - 1]


VM2, VM3 = Prefix.parse("10.0.0.2/32"), Prefix.parse("10.0.0.3/32")
flows_vm2_vm3 = st.lists(
    st.builds(
        FlowSpec,
        src=st.just(VM2),
        dst=st.just(VM3),
        ip_proto=st.just(17),
        l4_src=st.integers(1024, 65535),
        l4_dst=st.integers(1, 65535),
    ),
    min_size=1,
    max_size=8,
    unique=True,
)


@settings(max_examples=60, deadline=None)
@given(
    extra=flows_vm2_vm3,
    moved_count=st.integers(1, 8),
    hops=st.lists(st.sampled_from(["temporary", "long"]), min_size=1, max_size=4),
)
def test_every_prefix_of_mbb_keeps_every_flow_delivered(
    extra: list[FlowSpec], moved_count: int, hops: list[str]
) -> None:
    tables = initial_tables(NGNCS, extra)
    everyone = [host_flow(NGNCS.paths["long"]), *extra, host_flow(NGNCS.paths["direct"])]
    moved = extra[:moved_count]
    for target in hops:
        current = path_of(NGNCS, tables, moved[0])
        if current == target:
            continue
        p = plan(NGNCS, tables, Intent(flows=tuple(moved), to_path=target), now=0.0)
        assert p.disruption is Disruption.HITLESS
        for i, state in enumerate(reachable_states(tables, p)):
            for flow in everyone:
                assert both_ways_delivered(NGNCS, state, flow), f"{flow} lost in state {i}"
        tables = run_prefixes(NGNCS, tables, p)[-1]
        assert all(path_of(NGNCS, tables, f) == target for f in moved)


def test_mbb_order_is_make_verify_shift_verify_drain_clean() -> None:
    tables = initial_tables(NGNCS)
    p = plan(
        NGNCS, tables, Intent(flows=(host_flow(NGNCS.paths["long"]),), to_path="temporary"), now=1.0
    )
    assert [ph.name for ph in p.phases] == [
        "make",
        "verify-make",
        "shift",
        "verify-shift",
        "drain",
        "clean",
    ]
    make = p.phases[0].steps
    assert [s.device for s in make] == ["br3", "br4", "br1", "br2"]  # downstream first
    assert [s.device for s in p.phases[2].steps] == ["br2", "br3"]  # forward, then reverse ingress
    assert [s.device for s in p.phases[-1].steps] == ["br2", "br1", "br4", "br3"]  # upstream
    assert all(c.op is FlowOp.DELETE for s in p.phases[-1].steps for c in s.changes)
    assert "MBB: 1 flow(s) long -> temporary (hitless)" in p.describe()


def test_clean_keeps_old_transit_rules_while_other_flows_use_them() -> None:
    extra = FlowSpec(src=VM2, dst=VM3, ip_proto=17, l4_dst=9000)
    tables = initial_tables(NGNCS, [extra])
    p = plan(NGNCS, tables, Intent(flows=(extra,), to_path="temporary"), now=0.0)
    assert [ph.name for ph in p.phases][-1] == "verify-shift"  # nothing to clean, no drain
    after = run_prefixes(NGNCS, tables, p)[-1]
    assert path_of(NGNCS, after, host_flow(NGNCS.paths["long"])) == "long"
    assert path_of(NGNCS, after, extra) == "temporary"


def test_bbm_declares_outage_and_really_breaks() -> None:
    tables = initial_tables(NGNCS)
    flow = host_flow(NGNCS.paths["long"])
    p = plan(
        NGNCS,
        tables,
        Intent(flows=(flow,), to_path="temporary", strategy=Strategy.BBM, bbm_gap_s=0.2),
        now=0.0,
    )
    assert p.disruption is Disruption.OUTAGE
    assert p.phases[0].name == "break" and p.phases[1].steps[0].kind is StepKind.WAIT
    states = run_prefixes(NGNCS, tables, p)
    assert not all(both_ways_delivered(NGNCS, s, flow) for s in states)
    assert both_ways_delivered(NGNCS, states[-1], flow)


def test_undo_of_every_prefix_restores_the_tables() -> None:
    tables = initial_tables(NGNCS)
    p = plan(
        NGNCS, tables, Intent(flows=(host_flow(NGNCS.paths["long"]),), to_path="temporary"), now=0.0
    )
    steps = p.steps()
    for k in range(len(steps) + 1):
        state = tables
        for step in steps[:k]:
            state = apply_changes(state, step.device, step.changes)
        for step in reversed(steps[:k]):
            state = apply_changes(state, step.device, step.undo)
        assert {b: t for b, t in state.items() if t} == {b: t for b, t in tables.items() if t}


def test_two_site_failover_to_standby() -> None:
    tables = initial_tables(TWO_SITE)
    flow = host_flow(TWO_SITE.paths["primary"])
    p = plan(TWO_SITE, tables, Intent(flows=(flow,), to_path="standby"), now=0.0)
    for state in run_prefixes(TWO_SITE, tables, p):
        assert both_ways_delivered(TWO_SITE, state, flow)
    assert path_tag(TWO_SITE, "standby") == 3


def test_the_drain_is_the_old_paths_delay_plus_a_margin_unless_given() -> None:
    assert [p.delay_ms for p in TWO_SITE.paths.values()] == [0.0, 15.0, 0.0, 0.0]
    flow = host_flow(TWO_SITE.paths["primary"])
    on_longhaul = plan(
        TWO_SITE, initial_tables(TWO_SITE), Intent(flows=(flow,), to_path="longhaul"), now=0.0
    )
    tables = initial_tables(TWO_SITE)
    for step in on_longhaul.steps():
        tables = apply_changes(tables, step.device, step.changes)

    def drain_s(intent: Intent, tables: Tables) -> float:
        (drain,) = [s for s in plan(TWO_SITE, tables, intent, 0.0).steps() if s.kind == "drain"]
        return drain.duration_s

    standby = Intent(flows=(flow,), to_path="standby")
    assert drain_s(standby, tables) == pytest.approx(0.015 * 1.1 + 0.005)  # off the long haul
    assert drain_s(standby, initial_tables(TWO_SITE)) == pytest.approx(0.005)  # off primary
    given = Intent(flows=(flow,), to_path="standby", drain_s=0.2)
    assert drain_s(given, tables) == 0.2
    assert drain_for([TWO_SITE.paths["longhaul"], TWO_SITE.paths["primary"]]) == drain_s(
        standby, tables
    )


def test_a_rollback_drains_the_path_the_traffic_is_shifted_back_from() -> None:
    flow = host_flow(TWO_SITE.paths["primary"])
    tables = initial_tables(TWO_SITE)
    onto = plan(TWO_SITE, tables, Intent(flows=(flow,), to_path="longhaul"), now=0.0)
    assert onto.undo_drain_s == pytest.approx(0.015 * 1.1 + 0.005)  # the long haul's delay
    given = Intent(flows=(flow,), to_path="longhaul", drain_s=0.2)
    assert plan(TWO_SITE, tables, given, now=0.0).undo_drain_s == 0.2


@pytest.mark.parametrize(
    ("intent", "message"),
    [
        (Intent(flows=(), to_path="temporary"), "no flows"),
        (Intent(flows=(host_flow(NGNCS.paths["long"]),), to_path="nowhere"), "no path 'nowhere'"),
        (Intent(flows=(host_flow(NGNCS.paths["long"]),), to_path="long"), "already on path long"),
        (
            Intent(flows=(FlowSpec(src=VM2, dst=VM3, ip_proto=6),), to_path="temporary"),
            "is not installed",
        ),
    ],
)
def test_bad_intents_are_refused(intent: Intent, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan(NGNCS, initial_tables(NGNCS), intent, now=0.0)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("10.0.0.2>10.0.0.3", True),
        ("10.0.0.2>10.0.0.3,udp,dport=5001", True),
        ("10.0.0.2-10.0.0.3", False),
        ("10.0.0.2>10.0.0.3,dport=80", False),
        ("10.0.0.2>10.0.0.3,udp,dport=70000", False),
        ("10.0.0.2>banana", False),
    ],
)
def test_flow_spec_parsing(text: str, ok: bool) -> None:
    if ok:
        assert str(FlowSpec.parse(text)).startswith("10.0.0.2/32>10.0.0.3/32")
    else:
        with pytest.raises(PlanError, match="flow"):
            FlowSpec.parse(text)


@settings(max_examples=40, deadline=None)
@given(extra=flows_vm2_vm3, moved_count=st.integers(1, 8))
def test_restore_from_any_interrupted_state_returns_the_tables(
    extra: list[FlowSpec], moved_count: int
) -> None:
    """Recovery: wherever an MBB run stopped, the restore plans (hitless themselves) put
    every flow back on its origin and leave exactly the tables before the reroute."""
    tables = initial_tables(NGNCS, extra)
    everyone = [host_flow(NGNCS.paths["long"]), *extra, host_flow(NGNCS.paths["direct"])]
    p = plan(NGNCS, tables, Intent(flows=tuple(extra[:moved_count]), to_path="temporary"), now=0.0)
    touched = [*p.from_paths, p.to_path]
    for stopped in reachable_states(tables, p):
        restores = plan_restore(NGNCS, stopped, dict(p.origins), touched, now=0.0)
        state = stopped
        for r in restores:
            for mid in reachable_states(state, r):
                assert all(both_ways_delivered(NGNCS, mid, f) for f in everyone)
            state = run_prefixes(NGNCS, state, r)[-1]
        assert ours(state) == ours(tables)


@pytest.mark.parametrize("first", ["sw1", "sw2"])
def test_two_sites_fail_over_independently_and_end_on_standby(first: str) -> None:
    """Each site plans with only its own border switch (scope) and no message between them;
    after both sites acted, in either order, both directions take the standby path."""
    flow = host_flow(TWO_SITE.paths["primary"])
    tables = initial_tables(TWO_SITE)
    second = "sw2" if first == "sw1" else "sw1"
    for site in (first, second):
        scope = frozenset({site})
        own = {b: t for b, t in tables.items() if b in scope}  # a site reads only its switch
        p = plan(TWO_SITE, own, Intent(flows=(flow,), to_path="standby"), now=0.0, scope=scope)
        assert {s.device for s in p.steps() if s.device} == {site}
        assert not any(ph.name == "clean" for ph in p.phases)  # the peer may still send
        tables = run_prefixes(TWO_SITE, tables, p)[-1]
        if site == first:  # like the seeds: the peer's traffic is lost until it switches too
            assert not both_ways_delivered(TWO_SITE, tables, flow)
    assert both_ways_delivered(TWO_SITE, tables, flow)
    assert path_of(TWO_SITE, tables, flow) == "standby"
