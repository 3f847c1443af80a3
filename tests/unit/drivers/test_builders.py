"""The fast builders of ``drivers.base`` make the very objects the dataclasses' constructors
make: equal, same hash, same order, still frozen, and every field set."""

from __future__ import annotations

import dataclasses

import pytest

from drivers.base import (
    FlowChange,
    FlowMatch,
    FlowOp,
    FlowRule,
    Output,
    Prefix,
    PushVlan,
    new_change,
    new_match,
    new_rule,
)

MATCH = dict(
    in_port=3,
    eth_type=0x0800,
    vlan_vid=101,
    ipv4_src=Prefix(0x0A000001, 32),
    ipv4_dst=Prefix(0x0A000200, 24),
    ip_proto=17,
    l4_src=5001,
    l4_dst=5002,
)


def test_the_builders_take_the_fields_in_declaration_order() -> None:
    # a field added to a class without its builder would be left unset: fail here instead
    for cls, builder in ((FlowMatch, new_match), (FlowRule, new_rule), (FlowChange, new_change)):
        fields = [f.name for f in dataclasses.fields(cls)]
        params = list(builder.__code__.co_varnames[: builder.__code__.co_argcount])
        assert params == fields, cls.__name__


@pytest.mark.parametrize("blank", [(), ("vlan_vid", "ipv4_dst", "l4_src", "l4_dst")])
def test_new_match_is_flowmatch(blank: tuple[str, ...]) -> None:
    fields = {k: (None if k in blank else v) for k, v in MATCH.items()}
    built, made = new_match(*fields.values()), FlowMatch(**fields)  # type: ignore[arg-type]
    assert built == made and hash(built) == hash(made) and str(built) == str(made)
    assert not built < made and not made < built  # order=True compares field by field
    assert dataclasses.asdict(built) == dataclasses.asdict(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.in_port = 9  # type: ignore[misc]


def test_new_rule_and_new_change_are_the_dataclasses() -> None:
    match = FlowMatch(**MATCH)  # type: ignore[arg-type]
    actions = (PushVlan(101), Output(2))
    rule = new_rule(match, 300, actions, 0x55, 1)
    made = FlowRule(match=match, priority=300, actions=actions, cookie=0x55, table=1)
    assert rule == made and hash(rule) == hash(made) and rule.key == made.key
    assert str(rule) == str(made)
    assert rule != new_rule(match, 300, actions, 0x55, 0)  # the table counts
    change = new_change(FlowOp.DELETE, rule)
    assert change == FlowChange(op=FlowOp.DELETE, rule=made) and change.rule is rule
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.op = FlowOp.ADD  # type: ignore[misc]
