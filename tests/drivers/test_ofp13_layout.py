"""``ofp13_layout.decode_flow_rules`` (the fast path) against ``decode_flow_stats`` (the
reference walk) on generated flow stats entries: same rules, same errors."""

from __future__ import annotations

import random
import struct

import pytest

from drivers.base import Action, FlowMatch, FlowRule, Output, PopVlan, Prefix, PushVlan
from drivers.ovs.ofp13 import CodecError
from drivers.ovs.ofp13_flow import (
    _FLOW_STATS,
    OXM_IPV4_DST,
    decode_flow_stats,
    encode_instructions,
    encode_match,
)
from drivers.ovs.ofp13_layout import MatchDecoder, decode_flow_rules


def entry(rule: FlowRule, match: bytes | None = None) -> bytes:
    """A flow stats entry of ``rule`` as a switch sends it (``match``: other match bytes)."""
    match = encode_match(rule.match) if match is None else match
    instructions = encode_instructions(rule.actions)
    length = _FLOW_STATS.size + len(match) + len(instructions)
    head = _FLOW_STATS.pack(length, rule.table, 7, 0, rule.priority, 0, 0, 0, rule.cookie, 3, 300)
    return head + match + instructions


def random_prefix(rng: random.Random) -> Prefix:
    plen = rng.choice([32, 32, 24, 16, 8, 1])  # /0 is no match field: it reads back None
    mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
    return Prefix(rng.getrandbits(32) & mask, plen)


def random_match(rng: random.Random) -> FlowMatch:
    maybe = lambda value: value if rng.random() < 0.6 else None  # noqa: E731
    proto = maybe(rng.choice([6, 17, 1]))
    return FlowMatch(
        in_port=maybe(rng.randrange(1, 1 << 32)),
        eth_type=maybe(rng.choice([0x0800, 0x86DD])),
        vlan_vid=maybe(rng.randrange(4096)),
        ipv4_src=maybe(random_prefix(rng)),
        ipv4_dst=maybe(random_prefix(rng)),
        ip_proto=proto,
        l4_src=maybe(rng.randrange(65536)) if proto in (6, 17) else None,
        l4_dst=maybe(rng.randrange(65536)) if proto in (6, 17) else None,
    )


def random_actions(rng: random.Random) -> tuple[Action, ...]:
    choices: list[Action] = [Output(rng.randrange(1, 9)), PushVlan(rng.randrange(4096)), PopVlan()]
    return tuple(rng.sample(choices, rng.randrange(len(choices) + 1)))


def random_rule(rng: random.Random) -> FlowRule:
    return FlowRule(
        match=random_match(rng),
        priority=rng.randrange(65536),
        actions=random_actions(rng),
        cookie=rng.getrandbits(64),
        table=rng.randrange(4),
    )


def reference(body: bytes) -> list[FlowRule]:
    return [s.rule for s in decode_flow_stats(body)]


@pytest.mark.parametrize("seed", range(5))
def test_generated_entries_decode_as_the_reference_decodes_them(seed: int) -> None:
    rng = random.Random(seed)
    rules = [random_rule(rng) for _ in range(4000)]
    body = b"".join(entry(r) for r in rules)
    assert decode_flow_rules(body) == reference(body) == rules


def test_a_decoder_shared_between_parts_gives_each_part_its_own_rules() -> None:
    """Layouts learnt on one part serve the next; many layouts share a match length."""
    rng = random.Random(7)
    parts = [b"".join(entry(random_rule(rng)) for _ in range(500)) for _ in range(6)]
    matches = MatchDecoder()
    assert [decode_flow_rules(p, matches) for p in parts] == [reference(p) for p in parts]
    lengths = matches._layouts
    assert any(len(layouts) > 1 for layouts in lengths.values())  # the headers told apart


def test_the_common_layout_is_unpacked_after_its_first_entry() -> None:
    """100 flows of one layout: one layout learnt, every rule as the reference has it."""
    flows = [
        FlowRule(
            match=FlowMatch(
                in_port=1,
                eth_type=0x0800,
                ipv4_src=Prefix(0x0A000001),
                ipv4_dst=Prefix(i),
                ip_proto=17,
                l4_src=i,
                l4_dst=5000,
            ),
            priority=100,
            actions=(PushVlan(5), Output(3)),
            cookie=0x52,
            table=0,
        )
        for i in range(100)
    ]
    body = b"".join(entry(r) for r in flows)
    matches = MatchDecoder()
    assert decode_flow_rules(body, matches) == reference(body) == flows
    assert sum(len(layouts) for layouts in matches._layouts.values()) == 1


GOOD = FlowRule(
    match=FlowMatch(vlan_vid=3, in_port=2, ipv4_dst=Prefix(0x0A000000, 24)),
    priority=1, actions=(Output(1),),
)  # fmt: skip
OK = FlowRule(match=FlowMatch(in_port=1, ipv4_dst=Prefix(0x0A000000, 24)), priority=1, actions=())


def _patched(rule: FlowRule, offset: int, value: bytes) -> bytes:
    match = bytearray(encode_match(rule.match))
    match[offset : offset + len(value)] = value
    return bytes(match)


# OK's match: type, length, IN_PORT at 4 (value at 8), IPV4_DST_W at 12 (addr 16, mask 20);
# GOOD's: IN_PORT at 4, VLAN_VID at 12 (value at 16), IPV4_DST_W at 18. Same length and
# headers as a layout already learnt, except where a header is changed.
BAD = {
    "host bits under the mask": _patched(OK, 16, struct.pack("!I", 0x0A000001)),
    "a mask with holes": _patched(OK, 20, struct.pack("!I", 0xFF00FF00)),
    "another field, same size": _patched(OK, 4, struct.pack("!I", 0x80004404)),  # MPLS label
    "the masked header unmasked": _patched(OK, 12, struct.pack("!I", OXM_IPV4_DST)),
    "untagged vlan": _patched(GOOD, 16, struct.pack("!H", 0)),
    "an overrun": _patched(OK, 2, struct.pack("!H", 26)),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_a_rejected_entry_raises_what_the_reference_raises_after_good_ones(bad: bytes) -> None:
    """The first entries teach their layouts; the last, of the same length, is refused."""
    body = entry(GOOD) + entry(OK) + entry(OK, bad)
    with pytest.raises(CodecError) as want:
        reference(body)
    with pytest.raises(CodecError) as got:
        decode_flow_rules(body)
    assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))


def test_a_truncated_part_is_refused() -> None:
    body = entry(FlowRule(match=FlowMatch(in_port=1), priority=1, actions=()))
    for cut in (body[:-1], body + body[:20]):
        with pytest.raises(CodecError):
            decode_flow_rules(cut)


def test_a_field_given_twice_decodes_as_the_reference_decodes_it() -> None:
    """No layout is learnt for a match naming a field twice: it is walked every time."""
    twice = struct.pack("!HH", 1, 20) + struct.pack("!II", 0x80000004, 1) * 2 + b"\0" * 4
    body = entry(OK, twice) * 2
    matches = MatchDecoder()
    assert decode_flow_rules(body, matches) == reference(body)
    assert not any(matches._layouts.values())
