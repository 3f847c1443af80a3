"""``p4/reroute.p4`` and ``p4/reroute.p4info.txtpb`` agree (p4c cannot be installed here),
the P4Info carries the ids p4c would give, and both the driver and the EMULATOR accept it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from drivers.p4runtime import program
from emulators.p4rt.dataplane import Dataplane
from emulators.p4rt.program import Pipeline, load
from tests.unit.p4 import p4source

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "p4" / "reroute.p4"
P4INFO = ROOT / "p4" / "reroute.p4info.txtpb"
MATCH_KINDS = {"exact": "EXACT", "ternary": "TERNARY", "lpm": "LPM", "range": "RANGE"}


@pytest.fixture(scope="module")
def source() -> p4source.Program:
    return p4source.parse(SOURCE.read_text())


def test_the_tables_keys_and_actions_agree(source: p4source.Program) -> None:
    p4info = load(P4INFO)
    assert {t.preamble.name for t in p4info.tables} == set(source.tables)
    actions = {a.preamble.id: a for a in p4info.actions}
    used = {name for t in source.tables.values() for name in t.actions}
    assert {a.preamble.name for a in p4info.actions} == used
    for table in p4info.tables:
        declared = source.tables[table.preamble.name]
        keys = [
            (m.id, m.name, m.bitwidth, program.p4info_pb2.MatchField.MatchType.Name(m.match_type))
            for m in table.match_fields
        ]
        assert keys == [
            (i, k.name, k.bits, MATCH_KINDS[k.match_kind])
            for i, k in enumerate(declared.keys, start=1)
        ]
        assert [actions[ref.id].preamble.name for ref in table.action_refs] == list(
            declared.actions
        )
        assert actions[table.const_default_action_id].preamble.name == (
            declared.const_default_action
        )
        assert table.size == declared.size
    for action in p4info.actions:
        params = [(p.id, p.name, p.bitwidth) for p in action.params]
        assert params == [
            (i, n, w) for i, (n, w) in enumerate(source.actions[action.preamble.name], start=1)
        ]


def test_the_ids_and_aliases_are_the_ones_p4c_assigns() -> None:
    p4info = load(P4INFO)
    tables = [t.preamble for t in p4info.tables]
    actions = [a.preamble for a in p4info.actions]
    names = [p.name for p in tables + actions]
    for prefix, preambles in ((0x02, tables), (0x01, actions)):
        want = p4source.p4c_ids(prefix, [p.name for p in preambles])
        assert {p.name: p.id for p in preambles} == want
    assert all(p.alias == p4source.alias(p.name, names) for p in tables + actions)
    assert p4info.pkg_info.arch == "v1model"


def test_p4c_ids_match_a_published_p4c_output() -> None:
    # p4lang/tutorials' basic.p4 (compiled by p4c): MyIngress.ipv4_lpm and its actions
    assert p4source.p4c_ids(0x02, ["MyIngress.ipv4_lpm"]) == {"MyIngress.ipv4_lpm": 37375156}
    assert p4source.p4c_ids(0x01, ["MyIngress.drop", "MyIngress.ipv4_forward", "NoAction"]) == {
        "MyIngress.drop": 25652968,
        "MyIngress.ipv4_forward": 28792405,
        "NoAction": 21257015,
    }


def test_colliding_names_get_the_next_free_id() -> None:
    seen: dict[int, str] = {}
    for i in range(100_000):  # 24 bits: a collision within a few thousand names
        name = f"C.a{i}"
        low = p4source.jenkins_one_at_a_time(name) & 0xFF_FFFF
        if low in seen:
            break
        seen[low] = name
    first, second = sorted([seen[low], name])
    ids = p4source.p4c_ids(0x01, [second, first])
    assert ids == {first: 0x01 << 24 | low, second: 0x01 << 24 | (low + 1)}


def test_the_parser_reads_what_the_p4info_needs() -> None:
    text = """
    header h_t { bit<8> f; bit<16> g; }
    struct headers { h_t h; }
    control C(inout headers hdr, inout standard_metadata_t standard_metadata) {
        action a(bit<9> port, bit<3> x) { }  // a comment
        table t { key = { hdr.h.g : exact; hdr.h.isValid() : ternary;
                          standard_metadata.ingress_port : lpm; }
                  actions = { a; } size = 8; }
        apply { t.apply(); }
    }
    """
    parsed = p4source.parse(text)
    assert parsed.actions == {"C.a": (("port", 9), ("x", 3))}
    (table,) = parsed.tables.values()
    assert [(k.name, k.bits, k.match_kind) for k in table.keys] == [
        ("hdr.h.g", 16, "exact"),
        ("hdr.h.$valid$", 1, "ternary"),
        ("standard_metadata.ingress_port", 9, "lpm"),
    ]
    assert table.actions == ("C.a",) and table.size == 8 and table.const_default_action is None


def test_the_driver_and_the_emulator_both_take_the_p4info() -> None:
    loaded = program.load(P4INFO)
    assert program.Program.of(loaded).table_id == loaded.tables[0].preamble.id
    assert Dataplane.of(Pipeline.of(load(P4INFO))).table_id == loaded.tables[0].preamble.id
    binary = text_format.Parse(P4INFO.read_text(), program.p4info_pb2.P4Info())
    assert binary == loaded


def test_the_readme_says_how_to_compile_it() -> None:
    assert "p4c --target bmv2 --arch v1model" in (ROOT / "README.md").read_text()
