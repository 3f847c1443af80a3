"""Optical reconfiguration plans (seed 003 Tables 4.2 and 4.7), walked step by step with
the circuits' light: a new circuit is dark from its CIRCUITS step until AWAIT_LOCK."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.reroute.errors import PlanError
from services.reroute.model.intent import FlowSpec, Intent, Strategy
from services.reroute.model.topology import Circuit, Topology, load_topology
from services.reroute.planning import plan
from services.reroute.planning.electronic import all_on, initial_optics
from services.reroute.planning.optical import colliding, lock_ports
from services.reroute.planning.plan import Disruption, Plan, StepKind
from services.reroute.rules import host_flow, initial_rules, path_rules, path_tag, tag_of
from services.reroute.tables import Packet, Tables, apply_changes, deliver, tables_from

ROOT = Path(__file__).resolve().parents[4]
NGNCS = load_topology(ROOT / "topologies" / "ngncs-ost.yaml")
LONG = host_flow(NGNCS.paths["long"])
DIRECT = host_flow(NGNCS.paths["direct"])


def tables_with(extra: list[FlowSpec]) -> Tables:
    rules = initial_rules(NGNCS)
    for bridge, rs in path_rules(NGNCS, NGNCS.paths["long"], extra).items():
        rules.setdefault(bridge, []).extend(rs)
    return tables_from(rules)


def delivered(topo: Topology, tables: Tables, lit: frozenset[Circuit], flow: FlowSpec) -> bool:
    for f, src in ((flow, "vm"), (flow.reverse(), "vm")):
        p = Packet(
            src=f.src.network.network_address,
            dst=f.dst.network.network_address,
            ip_proto=f.ip_proto or 17,
            l4_src=f.l4_src or 40000,
            l4_dst=f.l4_dst or 5001,
        )
        host = next(h.name for h in topo.hosts if h.address == p.src)
        assert host.startswith(src)
        if not deliver(topo, tables, host, p, circuits=lit).delivered:
            return False
    return True


def walk(tables: Tables, p: Plan) -> list[tuple[Tables, frozenset[Circuit]]]:
    """(tables, lit circuits) after every step; new circuits light up at AWAIT_LOCK."""
    lit = initial_optics(NGNCS)
    dark: set[Circuit] = set()
    states = [(tables, lit)]
    for step in p.steps():
        if step.kind is StepKind.CIRCUITS:
            lit = lit - set(step.disconnect)
            dark |= set(step.connect)
        elif step.kind is StepKind.AWAIT_LOCK:
            lit, dark = lit | dark, set()
        elif step.changes:
            tables = apply_changes(tables, step.device, step.changes)
        states.append((tables, lit))
    return states


flows = st.lists(
    st.builds(
        FlowSpec,
        src=st.just(LONG.src),
        dst=st.just(LONG.dst),
        ip_proto=st.just(17),
        l4_dst=st.integers(1, 65535),
    ),
    max_size=5,
    unique=True,
)


@settings(max_examples=30, deadline=None)
@given(extra=flows)
def test_mbb_keeps_every_flow_delivered_through_the_dark_circuit(extra: list[FlowSpec]) -> None:
    tables = tables_with(extra)
    moved = (LONG, *extra)
    p = plan(NGNCS, tables, Intent(flows=moved, to_path="short", via="temporary"), now=0.0)
    assert p.disruption is Disruption.HITLESS
    states = walk(tables, p)
    for i, (t, lit) in enumerate(states):
        for f in (*moved, DIRECT):
            assert delivered(NGNCS, t, lit, f), f"{f} lost after step {i}"
    final, lit = states[-1]
    assert Circuit(switch="ost1", ingress=2, egress=19) in lit
    assert all(not delivered(NGNCS, final, initial_optics(NGNCS), f) for f in moved)


def test_mbb_order_parks_reconfigures_awaits_lock_then_swaps() -> None:
    p = plan(
        NGNCS, tables_with([]), Intent(flows=(LONG,), to_path="short", via="temporary"), now=0.0
    )
    assert [ph.name for ph in p.phases] == [
        "park-make", "park-verify-make", "park-shift", "park-verify-shift", "park-drain",
        "circuits",
        "park-clean", "swap-make", "swap-verify-make",  # staged while the transceivers lock
        "await-lock",
        "swap-shift", "swap-verify-shift", "swap-drain", "swap-clean",
    ]  # fmt: skip
    kinds = [s.kind for s in p.steps()]
    circuits = kinds.index(StepKind.CIRCUITS)
    locked = kinds.index(StepKind.AWAIT_LOCK)
    assert kinds[circuits - 1] is StepKind.DRAIN  # in flight on the old path first
    staged = p.steps()[circuits + 1 : locked]
    assert {s.kind for s in staged} == {StepKind.REMOVE, StepKind.INSTALL, StepKind.VERIFY}
    tags = {tag_of(c.rule) for s in staged for c in s.changes}
    assert tags == {path_tag(NGNCS, "long"), path_tag(NGNCS, "short")}  # never temporary's
    assert StepKind.SHIFT in kinds[:circuits] and StepKind.SHIFT in kinds[locked:]
    checkpoint = [ph for ph in p.phases if ph.rest]
    assert [ph.name for ph in checkpoint] == ["park-verify-shift"]
    assert [ph.rest for ph in checkpoint] == [(("temporary", (LONG,)),)]
    lock = p.steps()[locked]
    assert lock.ports == (("br3", 2), ("br2", 2))
    change = p.steps()[circuits]
    assert {(c.ingress, c.egress) for c in change.connect} == {(2, 19), (3, 18)}
    assert {(c.ingress, c.egress) for c in change.disconnect} == {
        (2, 17),
        (1, 18),
        (4, 19),
        (3, 20),
    }


def test_bbm_declares_outage_and_is_dark_until_lock() -> None:
    tables = tables_with([])
    p = plan(NGNCS, tables, Intent(flows=(LONG,), to_path="short", strategy=Strategy.BBM), 0.0)
    assert p.disruption is Disruption.OUTAGE
    states = walk(tables, p)
    assert not delivered(NGNCS, *states[1], LONG)  # right after the circuit change
    assert delivered(NGNCS, *states[-1], LONG)
    assert p.steps()[0].kind is StepKind.CIRCUITS and p.steps()[-1].kind is StepKind.AWAIT_LOCK


def test_bbm_gap_lengthens_an_optical_outage_and_mbb_refuses_it() -> None:
    tables = tables_with([])
    bbm = Intent(flows=(LONG,), to_path="short", strategy=Strategy.BBM, bbm_gap_s=3.0)
    steps = plan(NGNCS, tables, bbm, 0.0).steps()
    assert [s.kind for s in steps[:2]] == [StepKind.CIRCUITS, StepKind.WAIT]
    assert steps[1].duration_s == 3.0
    with pytest.raises(PlanError, match="bbm_gap_ms is the extra outage"):
        plan(NGNCS, tables, replace(bbm, strategy=Strategy.MBB), 0.0)


def test_the_lock_timeout_is_the_await_lock_wait_and_refused_where_nothing_locks() -> None:
    tables = tables_with([])
    mbb = Intent(flows=(LONG,), to_path="short", via="temporary")
    for intent, wait in ((mbb, 3.0), (replace(mbb, lock_timeout_s=0.4), 0.4)):
        (lock,) = [
            s for s in plan(NGNCS, tables, intent, 0.0).steps() if s.kind is StepKind.AWAIT_LOCK
        ]
        assert lock.duration_s == wait  # None: the default 3 s
    bbm = Intent(flows=(LONG,), to_path="short", strategy=Strategy.BBM, lock_timeout_s=7.5)
    assert plan(NGNCS, tables, bbm, 0.0).steps()[-1].duration_s == 7.5
    # back to long from temporary: its cross-connects are all made, no optical step
    parked = on(tables, (LONG,), "temporary")
    back = Intent(flows=(LONG,), to_path="long", lock_timeout_s=3.0)
    with pytest.raises(PlanError, match="lock_timeout_ms bounds the wait") as refused:
        plan(NGNCS, parked, back, 0.0)
    assert "its cross-connects are all made" in str(refused.value)
    assert ("lock_timeout_ms", "") in refused.value.options  # worded by each front end
    assert plan(NGNCS, parked, replace(back, lock_timeout_s=None), 0.0).steps()


@pytest.mark.parametrize(
    ("intent", "message"),
    [
        (Intent(flows=(LONG,), to_path="short"), "cuts path long, where the flows are"),
        (Intent(flows=(LONG,), to_path="short", via="long"), "cuts path long, where the flows"),
        (Intent(flows=(LONG,), to_path="temporary", via="long"), "needs no new cross-connects"),
        (Intent(flows=(LONG,), to_path="short", via="nowhere"), "no path 'nowhere'"),
    ],
)
def test_bad_optical_intents_are_refused(intent: Intent, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan(NGNCS, tables_with([]), intent, now=0.0)


def on(tables: Tables, flows: tuple[FlowSpec, ...], path: str) -> Tables:
    """``tables`` once ``flows`` moved to ``path`` (an electronic MBB, run to the end)."""
    for step in plan(NGNCS, tables, Intent(flows=flows, to_path=path), now=0.0).steps():
        if step.changes:
            tables = apply_changes(tables, step.device, step.changes)
    return tables


@settings(max_examples=20, deadline=None)
@given(extra=flows)
def test_mbb_from_the_temporary_path_needs_no_park(extra: list[FlowSpec]) -> None:
    """After a failover to ``temporary`` (which the change leaves), the move to ``short``
    reconfigures ost1 with the flows where they are, ``via`` left out or naming their path:
    delivered after every step, on ``short`` at the end."""
    moved = (LONG, *extra)
    tables = on(tables_with(extra), moved, "temporary")
    alone = plan(NGNCS, tables, Intent(flows=moved, to_path="short"), now=0.0)
    same = plan(NGNCS, tables, Intent(flows=moved, to_path="short", via="temporary"), 0.0)
    assert same.phases == alone.phases and alone.from_paths == ("temporary",)
    assert alone.disruption is Disruption.HITLESS
    assert [ph.name for ph in alone.phases] == [
        "circuits", "move-make", "move-verify-make", "await-lock",
        "move-shift", "move-verify-shift", "move-drain", "move-clean",
    ]  # fmt: skip
    states = walk(tables, alone)
    for i, (t, lit) in enumerate(states):
        for f in (*moved, DIRECT):
            assert delivered(NGNCS, t, lit, f), f"{f} lost after step {i}"
    final, lit = states[-1]
    assert Circuit(switch="ost1", ingress=2, egress=19) in lit
    short = path_tag(NGNCS, "short")
    assert all(all_on(NGNCS.paths["short"], final, f, short) for f in moved)
    assert all(not delivered(NGNCS, final, initial_optics(NGNCS), f) for f in moved)


def test_a_lock_that_never_comes_rolls_back_with_the_flows_where_they_were() -> None:
    """Every prefix up to the lock wait, undone step by step (the circuits put back dark:
    they relock later), keeps the flows delivered on temporary and restores the tables."""
    tables = on(tables_with([]), (LONG,), "temporary")
    p = plan(NGNCS, tables, Intent(flows=(LONG,), to_path="short"), now=0.0)
    steps = p.steps()
    locked = [s.kind for s in steps].index(StepKind.AWAIT_LOCK)
    for k in range(locked + 1):
        state, lit = tables, initial_optics(NGNCS)
        for step in steps[:k]:
            state = apply_changes(state, step.device, step.changes)
            lit = lit - set(step.disconnect)
        for step in reversed(steps[:k]):
            state = apply_changes(state, step.device, step.undo)
            assert delivered(NGNCS, state, lit, LONG) and delivered(NGNCS, state, lit, DIRECT)
        assert {b: t for b, t in state.items() if t} == {b: t for b, t in tables.items() if t}


def test_flows_partly_parked_already_take_the_via_the_refusal_names() -> None:
    """Some flows on ``temporary``, one on ``long`` (which the change cuts): refused, naming
    ``via=temporary``; with it, the one on ``long`` is parked and no flow is ever lost."""
    other = FlowSpec.parse("10.0.0.2>10.0.0.3,udp,dport=7000")
    tables = on(tables_with([other]), (LONG,), "temporary")
    intent = Intent(flows=(LONG, other), to_path="short")
    with pytest.raises(PlanError) as refused:
        plan(NGNCS, tables, intent, now=0.0)
    assert ("via", "temporary") in refused.value.options
    p = plan(NGNCS, tables, replace(intent, via="temporary"), now=0.0)
    assert "park-shift" in [ph.name for ph in p.phases]
    for i, (t, lit) in enumerate(walk(tables, p)):
        assert all(delivered(NGNCS, t, lit, f) for f in (LONG, other)), f"lost after step {i}"


REFUSED = [
    (Intent(flows=(LONG,), to_path="short"), "long"),
    (Intent(flows=(LONG,), to_path="short", via="long"), "long"),
    (Intent(flows=(LONG,), to_path="temporary", via="long"), "long"),
    (Intent(flows=(LONG,), to_path="short", via="long"), "temporary"),
    (Intent(flows=(LONG,), to_path="temporary", via="temporary"), "long"),
]


@pytest.mark.parametrize(("intent", "where"), REFUSED)
def test_every_refusal_names_what_works(intent: Intent, where: str) -> None:
    """Each option a refusal names, taken, plans (no circle between two refusals); the
    message names options by the API's fields, never by the CLI's flags."""
    tables = tables_with([]) if where == "long" else on(tables_with([]), (LONG,), where)
    with pytest.raises(PlanError) as refused:
        plan(NGNCS, tables, intent, now=0.0)
    assert refused.value.options and "--" not in str(refused.value)
    for name, value in refused.value.options:
        taken = _taken(intent, name, value)
        assert plan(NGNCS, tables, taken, now=0.0).to_path == intent.to_path, (name, value)


def _taken(intent: Intent, name: str, value: str) -> Intent:
    if name == "strategy":  # a break-before-make parks nothing: via is refused with it
        return replace(intent, strategy=Strategy(value), via=None)
    assert name == "via", name
    return replace(intent, via=value or None)


def test_plan_errors_are_worded_by_each_front_end() -> None:
    with pytest.raises(PlanError) as refused:
        plan(NGNCS, tables_with([]), Intent(flows=(LONG,), to_path="short"), now=0.0)
    assert "(via=temporary); or strategy=bbm moves" in str(refused.value)
    cli = refused.value.worded(lambda name, value: f"--{name} {value or name.upper()}")
    assert "(--via temporary); or --strategy bbm moves" in str(cli)


def test_cutting_a_path_that_carries_other_flows_is_refused() -> None:
    other = FlowSpec.parse("10.0.0.2>10.0.0.3,udp,dport=7000")
    tables = tables_with([other])
    for strategy, via in ((Strategy.MBB, "temporary"), (Strategy.BBM, None)):
        intent = Intent(flows=(LONG,), to_path="short", via=via, strategy=strategy)
        with pytest.raises(PlanError, match="cuts path long"):
            plan(NGNCS, tables, intent, now=0.0)


def test_colliding_circuits_and_lock_ports() -> None:
    new = {Circuit(switch="ost1", ingress=2, egress=19)}
    assert colliding(initial_optics(NGNCS), new) == {
        Circuit(switch="ost1", ingress=2, egress=17),
        Circuit(switch="ost1", ingress=4, egress=19),
    }
    assert lock_ports(NGNCS, new) == (("br3", 2),)


def test_the_parks_drain_watches_the_ports_that_feed_the_circuits_it_cuts() -> None:
    """br1..br4's p2 send into ost1's ingresses 1..4, whose circuits the change removes:
    the drain before it waits until they stop sending, and until the rules the park's shift
    added (on br2 and br3, the flows' ingresses) count packets; the swap's drain cuts no
    circuit: it waits for its own shift's rules only."""
    p = plan(
        NGNCS, tables_with([]), Intent(flows=(LONG,), to_path="short", via="temporary"), now=0.0
    )
    drains = {ph.name: s for ph in p.phases for s in ph.steps if s.kind is StepKind.DRAIN}
    park = drains["park-drain"]
    assert park.ports == (("br1", 2), ("br2", 2), ("br3", 2), ("br4", 2))
    shifted = {
        (s.device, c.rule.cookie) for s in p.steps() if s.kind is StepKind.SHIFT for c in s.changes
    }
    assert {d for d, _ in park.seen_on} == {"br2", "br3"} and set(park.seen_on) <= shifted
    assert park.describe() == (
        "drain 5 ms after br1:p2 br2:p2 br3:p2 br4:p2 stop sending,"
        " the moved flows counted on br2 br3"
    )
    swap = drains["swap-drain"]
    assert swap.ports == () and {d for d, _ in swap.seen_on} == {"br2", "br3"}
    assert set(swap.seen_on) <= shifted and not set(swap.seen_on) & set(park.seen_on)


def test_an_electronic_drain_waits_for_the_shifts_rules_and_a_zero_drain_for_nothing() -> None:
    intent = Intent(flows=(LONG,), to_path="temporary")
    p = plan(NGNCS, tables_with([]), intent, now=0.0)
    (drain,) = [s for s in p.steps() if s.kind is StepKind.DRAIN]
    shifts = [s for s in p.steps() if s.kind is StepKind.SHIFT]
    assert drain.seen_on == tuple(sorted((s.device, s.changes[0].rule.cookie) for s in shifts))
    assert drain.ports == () and {d for d, _ in drain.seen_on} == {"br2", "br3"}
    zero = plan(NGNCS, tables_with([]), replace(intent, drain_s=0.0), now=0.0)
    assert all(s.seen_on == () for s in zero.steps() if s.kind is StepKind.DRAIN)
