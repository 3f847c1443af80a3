"""The P4 program the ``p4runtime`` driver programs, known by NAME: ``p4/reroute.p4``.

Its ids are the compiler's business (p4c hashes the names), so the driver never holds
one: ``Program.of`` looks each name up in a P4Info (the device's, from
GetForwardingPipelineConfig, or the file the inventory names, ``load``) and checks that
the table has the keys, match kinds, widths and actions the driver's rules need::

    table MyIngress.reroute {            // ternary keys:
        standard_metadata.ingress_port   //  9 bits
        hdr.vlan.$valid$, hdr.vlan.vid   //  1, 12   (hdr.vlan.isValid())
        hdr.ipv4.$valid$                 //  1
        hdr.ipv4.srcAddr, .dstAddr       // 32, 32
        hdr.ipv4.protocol                //  8
        meta.l4_src, meta.l4_dst         // 16, 16   (TCP or UDP ports)
        actions: forward(port), push_vlan_forward(vid, port),
                 pop_vlan_forward(port), drop()
    }

A P4Info with more (other tables, more keys of other names) is fine; a missing or
different one is a ``ProgramError``. Each entry's controller ``metadata`` (8 bytes,
big-endian) is the flow rule's cookie.

A compiler may spell the names otherwise: Tofino's ``bf-p4c`` puts the pipeline's name
before a table's (``pipe.MyIngress.reroute``). ``Program.of(info, names)`` takes a map
from the names above to the device's (the inventory's ``names``); a name not in it is
looked up as it is, and a missing one is named with the P4Info's names that end like it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from drivers.p4runtime.proto import p4info_pb2

TABLE = "MyIngress.reroute"
DEFAULT_P4INFO = Path(__file__).resolve().parents[2] / "p4" / "reroute.p4info.txtpb"


class Field(StrEnum):
    """The table's match fields, by their P4Info names."""

    INGRESS_PORT = "standard_metadata.ingress_port"
    VLAN_VALID = "hdr.vlan.$valid$"
    VLAN_VID = "hdr.vlan.vid"
    IPV4_VALID = "hdr.ipv4.$valid$"
    IPV4_SRC = "hdr.ipv4.srcAddr"
    IPV4_DST = "hdr.ipv4.dstAddr"
    IPV4_PROTO = "hdr.ipv4.protocol"
    L4_SRC = "meta.l4_src"
    L4_DST = "meta.l4_dst"


WIDTHS: dict[Field, int] = {
    Field.INGRESS_PORT: 9,
    Field.VLAN_VALID: 1,
    Field.VLAN_VID: 12,
    Field.IPV4_VALID: 1,
    Field.IPV4_SRC: 32,
    Field.IPV4_DST: 32,
    Field.IPV4_PROTO: 8,
    Field.L4_SRC: 16,
    Field.L4_DST: 16,
}


class Action(StrEnum):
    FORWARD = "MyIngress.forward"
    PUSH_VLAN_FORWARD = "MyIngress.push_vlan_forward"
    POP_VLAN_FORWARD = "MyIngress.pop_vlan_forward"
    DROP = "MyIngress.drop"


PORT_BITS, VID_BITS = 9, 12
PARAMS: dict[Action, tuple[tuple[str, int], ...]] = {  # in the order of the rule's values
    Action.FORWARD: (("port", PORT_BITS),),
    Action.PUSH_VLAN_FORWARD: (("vid", VID_BITS), ("port", PORT_BITS)),
    Action.POP_VLAN_FORWARD: (("port", PORT_BITS),),
    Action.DROP: (),
}


class ProgramError(ValueError):
    """A P4Info without what the driver needs, or a file that is no P4Info."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Program:
    """The ids of one P4Info for the names above (``of``)."""

    info: p4info_pb2.P4Info
    table_id: int
    size: int
    field_ids: dict[Field, int]
    fields: dict[int, Field]  # id -> name
    action_ids: dict[Action, int]
    actions: dict[int, Action]
    param_ids: dict[Action, tuple[int, ...]]  # in PARAMS order

    @classmethod
    def of(cls, info: p4info_pb2.P4Info, names: Mapping[str, str] | None = None) -> Program:
        """The reroute program's ids, read from its P4Info (ProgramError if something is
        missing); ``names`` maps our names to the P4Info's where they differ."""
        spelt = dict(names or {})
        table = _one(info.tables, spelt.get(TABLE, TABLE), "table")
        field_ids = {f: _field(table, f, spelt.get(f, f)) for f in Field}
        refs = {ref.id for ref in table.action_refs}
        action_ids, param_ids = {}, {}
        for action in Action:
            found = _one(info.actions, spelt.get(action, action), "action")
            if found.preamble.id not in refs:
                raise ProgramError(f"{found.preamble.name} is not an action of {TABLE}")
            action_ids[action] = found.preamble.id
            param_ids[action] = _params(found, action)
        return cls(
            info=info,
            table_id=table.preamble.id,
            size=table.size,
            field_ids=field_ids,
            fields={i: f for f, i in field_ids.items()},
            action_ids=action_ids,
            actions={i: a for a, i in action_ids.items()},
            param_ids=param_ids,
        )


NAMES = frozenset({TABLE, *Action, *Field})  # what the inventory's ``names`` may map


def _one(items: object, name: str, what: str) -> p4info_pb2.Table:
    found = [x for x in items if x.preamble.name == name]  # type: ignore[attr-defined]
    if len(found) != 1:
        others = [x.preamble.name for x in items]  # type: ignore[attr-defined]
        raise ProgramError(
            f"the P4Info has {len(found)} {what}s named {name} (needs one){_like(name, others)}"
        )
    return found[0]


def _like(name: str, names: list[str]) -> str:
    """A hint naming those of ``names`` that end like ``name`` (another prefix)."""
    tail = name.rsplit(".", 1)[-1]
    alike = sorted(n for n in names if n != name and n.rsplit(".", 1)[-1] == tail)
    if not alike:
        return ""
    return (f"; it has {', '.join(alike)}: if that is ours under another prefix, map it in "
            f"the inventory, names: {{{name}: {alike[0]}}}")  # fmt: skip


def _field(table: p4info_pb2.Table, field: Field, name: str) -> int:
    found = [m for m in table.match_fields if m.name == name]
    if len(found) != 1:
        hint = _like(name, [m.name for m in table.match_fields])
        raise ProgramError(f"{TABLE} has {len(found)} match fields named {name}{hint}")
    got = found[0]
    if got.match_type != p4info_pb2.MatchField.TERNARY or got.bitwidth != WIDTHS[field]:
        raise ProgramError(
            f"{TABLE}.{field}: {p4info_pb2.MatchField.MatchType.Name(got.match_type)} "
            f"bit<{got.bitwidth}>, not TERNARY bit<{WIDTHS[field]}>"
        )
    return int(got.id)


def _params(found: p4info_pb2.Action, action: Action) -> tuple[int, ...]:
    have = {(p.name, p.bitwidth): p.id for p in found.params}
    want = PARAMS[action]
    if len(found.params) != len(want) or any(p not in have for p in want):
        got = [(p.name, p.bitwidth) for p in found.params]
        raise ProgramError(f"{action}: parameters {got}, not {list(want)}")
    return tuple(int(have[p]) for p in want)


def load(path: Path) -> p4info_pb2.P4Info:
    """A P4Info file: text format (``.txt``, ``.txtpb``, ``.pbtxt``) or binary."""
    info = p4info_pb2.P4Info()
    try:
        data = path.read_bytes()
        if path.suffix in (".txt", ".txtpb", ".pbtxt", ".textproto"):
            text_format.Parse(data.decode(), info)
        else:
            info.ParseFromString(data)
    except (OSError, UnicodeDecodeError, text_format.ParseError, DecodeError) as exc:
        raise ProgramError(f"{path}: not a readable P4Info ({exc})") from exc
    return info


def default() -> Program:
    """The program of ``p4/reroute.p4info.txtpb`` (the repository's)."""
    return Program.of(load(DEFAULT_P4INFO))
