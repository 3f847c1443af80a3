"""Entry keys cut out of the flow-mods sent equal the keys of the rules encoded, so that
``OvsDriver.missing`` after ``apply`` compares the same bytes either way."""

from __future__ import annotations

import dataclasses
import random

from drivers.base import FlowChange, FlowOp
from drivers.ovs.driver import OvsDriver
from drivers.ovs.ofp13_flow import FlowModCommand, encode_flow_mod, entry_key, flow_mod_entry_key
from tests.drivers.test_ofp13_layout import random_rule


def test_a_key_cut_out_of_an_add_is_the_rule_s_key() -> None:
    rng = random.Random(11)
    for xid, rule in enumerate(random_rule(rng) for _ in range(3000)):
        assert flow_mod_entry_key(encode_flow_mod(rule, xid, FlowModCommand.ADD)) == entry_key(rule)


def test_the_driver_keys_the_rules_it_sent_and_encodes_others() -> None:
    rng = random.Random(12)
    rules = [random_rule(rng) for _ in range(200)]
    gone = random_rule(rng)
    driver = OvsDriver("s1", "unix:/nonexistent")
    changes = [FlowChange(op=FlowOp.ADD, rule=r) for r in rules]
    driver._encode_flow_mod([*changes, FlowChange(op=FlowOp.DELETE, rule=gone)], 7)
    copies = [dataclasses.replace(r, priority=r.priority) for r in rules]  # equal, not same
    other = dataclasses.replace(rules[0], cookie=rules[0].cookie ^ 1)
    expect = [*rules[::-1], *copies, gone, other]
    assert driver._entry_keys(expect) == [entry_key(r) for r in expect]
    assert entry_key(other) != entry_key(rules[0])
