"""The EMULATOR's program: a P4Info file, indexed by id, and the checks P4Runtime asks of
every table entry against it (``examine``), whatever the program.

Per update, as the P4Runtime spec gives them: an unknown table NOT_FOUND; an unknown,
repeated or wrong-kind match field, a ternary mask of zero (a don't-care field must be
left out), value bits outside the mask, a ternary table entry without priority, an
action that is not the table's, or missing/unknown parameters INVALID_ARGUMENT; a value
wider than its field or parameter OUT_OF_RANGE. Bytestrings are compared by value
(leading zero bytes do not count), and ``canonical`` rewrites an entry in the shortest
form, the form a Read answers with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from google.protobuf import text_format

from emulators.p4rt.proto import code_pb2, p4info_pb2, p4runtime_pb2

DEFAULT_P4INFO = Path(__file__).resolve().parents[2] / "p4" / "reroute.p4info.txtpb"
MatchType = p4info_pb2.MatchField
EntryKey = tuple[int, int, tuple[tuple[int, int, int], ...]]  # table, priority, match


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """Why one update failed: a ``google.rpc.Code`` and a message (a ``p4.v1.Error``)."""

    code: int
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TableInfo:
    id: int
    name: str
    size: int
    fields: dict[int, tuple[str, int, str]]  # id -> (name, bit width, FieldMatch oneof name)
    actions: frozenset[int]
    needs_priority: bool  # a ternary, range or optional field: the entry has a priority


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionInfo:
    id: int
    name: str
    params: dict[int, tuple[str, int]]  # id -> (name, bit width)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    info: p4info_pb2.P4Info
    tables: dict[int, TableInfo]
    actions: dict[int, ActionInfo]

    @classmethod
    def of(cls, info: p4info_pb2.P4Info) -> Pipeline:
        """The tables and actions of a P4Info."""
        prioritised = (MatchType.TERNARY, MatchType.RANGE, MatchType.OPTIONAL)
        tables = {
            t.preamble.id: TableInfo(
                id=t.preamble.id,
                name=t.preamble.name,
                size=t.size,
                fields={m.id: (m.name, m.bitwidth, _kind(m)) for m in t.match_fields},
                actions=frozenset(ref.id for ref in t.action_refs),
                needs_priority=any(m.match_type in prioritised for m in t.match_fields),
            )
            for t in info.tables
        }
        actions = {
            a.preamble.id: ActionInfo(
                id=a.preamble.id,
                name=a.preamble.name,
                params={p.id: (p.name, p.bitwidth) for p in a.params},
            )
            for a in info.actions
        }
        return cls(info=info, tables=tables, actions=actions)

    def table_named(self, name: str) -> TableInfo:
        """The table called ``name``."""
        return next(t for t in self.tables.values() if t.name == name)

    def field_names(self, table_id: int) -> dict[int, str]:
        """The match field names of table ``table_id``, by id."""
        return {i: f[0] for i, f in self.tables[table_id].fields.items()}


def _kind(field: p4info_pb2.MatchField) -> str:
    """The ``p4.v1.FieldMatch`` oneof of a match field (``ternary``, ``exact``, ...)."""
    return str(MatchType.MatchType.Name(field.match_type)).lower()


def load(path: Path) -> p4info_pb2.P4Info:
    """A P4Info file, text format (``.txtpb``, ``.txt``, ``.pbtxt``) or binary."""
    info = p4info_pb2.P4Info()
    if path.suffix in (".txt", ".txtpb", ".pbtxt", ".textproto"):
        text_format.Parse(path.read_text(), info)
    else:
        info.ParseFromString(path.read_bytes())
    return info


def value(data: bytes) -> int:
    """A P4Runtime bytestring as an int."""
    return int.from_bytes(data, "big")


def short(number: int) -> bytes:
    """The canonical bytestring of a number: no leading zero bytes, zero as one byte."""
    return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")


# --------------------------------------------------------------------------------------
# checks


class Examined(NamedTuple):  # a tuple: thousands are made per Write
    """A valid entry: its key, whether its bytestrings are already canonical, and its
    action's id and parameter values (0 and {} for a DELETE's entry)."""

    key: EntryKey
    canonical: bool
    action_id: int
    params: dict[int, int]


def examine(
    pipeline: Pipeline, entry: p4runtime_pb2.TableEntry, *, with_action: bool
) -> Examined | Failure:
    """The key of a valid ``entry``, or what P4Runtime says is wrong with it. One pass
    over the entry: this runs for every update of every Write."""
    table = pipeline.tables.get(entry.table_id)
    if table is None:
        return Failure(code=code_pb2.NOT_FOUND, message=f"no table {entry.table_id:#x}")
    priority = entry.priority
    if table.needs_priority and priority <= 0:
        return _bad(f"{table.name}: a ternary table's entry needs a priority > 0")
    if not table.needs_priority and priority != 0:
        return _bad(f"{table.name}: an exact table's entry has no priority")
    match: list[tuple[int, int, int]] = []
    short_form = True
    fields = table.fields
    for fm in entry.match:
        # fast path: a valid ternary field (its mask is set only when the oneof is ternary)
        field_id, ternary = fm.field_id, fm.ternary
        spec, raw_value, raw_mask = fields.get(field_id), ternary.value, ternary.mask
        if spec is not None and raw_mask and spec[2] == "ternary":
            v, mask = int.from_bytes(raw_value, "big"), int.from_bytes(raw_mask, "big")
            if mask and not (v >> spec[1] or mask >> spec[1] or v & ~mask):
                match.append((field_id, v, mask))
                # _short of both, inline (the mask is not zero, so its first byte tells)
                if short_form and not (raw_mask[0] and _short(raw_value)):
                    short_form = False
                continue
        got = _field(table, fm)  # the other kinds, and every error
        if isinstance(got, Failure):
            return got
        match.append(got[0])
        short_form = short_form and got[1]
    if len({m[0] for m in match}) != len(match):
        return _bad(f"{table.name}: a match field twice")
    action_id, params = 0, dict[int, int]()
    if with_action:
        got_action = _action(pipeline, table, entry.action)
        if isinstance(got_action, Failure):
            return got_action
        action_id, params, short_params = got_action
        short_form = short_form and short_params
    match.sort()
    return Examined((entry.table_id, priority, tuple(match)), short_form, action_id, params)


def invalid(
    pipeline: Pipeline, entry: p4runtime_pb2.TableEntry, *, with_action: bool
) -> Failure | None:
    """What P4Runtime says is wrong with ``entry`` (None: nothing)."""
    got = examine(pipeline, entry, with_action=with_action)
    return got if isinstance(got, Failure) else None


def _bad(message: str) -> Failure:
    return Failure(code=code_pb2.INVALID_ARGUMENT, message=message)


def _wide(what: str, bits: int) -> Failure:
    return Failure(code=code_pb2.OUT_OF_RANGE, message=f"{what}: wider than {bits} bits")


def _short(data: bytes) -> bool:
    return len(data) == 1 or (len(data) > 1 and data[0] != 0)


def _field(
    table: TableInfo, fm: p4runtime_pb2.FieldMatch
) -> tuple[tuple[int, int, int], bool] | Failure:
    """((field id, value, mask), canonical?) of a valid field match."""
    found = table.fields.get(fm.field_id)
    if found is None:
        return _bad(f"{table.name}: no match field {fm.field_id}")
    name, bits, kind = found
    got = fm.WhichOneof("field_match_type")
    if got != kind:
        return _bad(f"{name} is {kind.upper()}, not {got}")
    if got == "exact":
        v = value(fm.exact.value)
        return _wide(name, bits) if v >> bits else ((fm.field_id, v, -1), _short(fm.exact.value))
    if got != "ternary":
        return Failure(code=code_pb2.UNIMPLEMENTED, message=f"{name}: {got} (EMULATOR)")
    raw_value, raw_mask = fm.ternary.value, fm.ternary.mask
    v, mask = value(raw_value), value(raw_mask)
    if mask == 0:
        return _bad(f"{name}: a don't-care ternary field must be left out")
    if v >> bits or mask >> bits:
        return _wide(name, bits)
    if v & ~mask:
        return _bad(f"{name}: value {v:#x} has bits outside mask {mask:#x}")
    return (fm.field_id, v, mask), _short(raw_value) and _short(raw_mask)


def _action(
    pipeline: Pipeline, table: TableInfo, table_action: p4runtime_pb2.TableAction
) -> tuple[int, dict[int, int], bool] | Failure:
    """(action id, {param id: value}, canonical?) of a valid direct action."""
    if table_action.WhichOneof("type") != "action":
        return _bad(f"{table.name}: an entry needs a direct action")
    direct = table_action.action
    action = pipeline.actions.get(direct.action_id)
    if action is None or action.id not in table.actions:
        return _bad(f"{table.name}: action {direct.action_id:#x} is not its")
    declared = action.params
    values, short_form = {}, True
    for param in direct.params:
        param_id, data = param.param_id, param.value
        spec = declared.get(param_id)
        if spec is None or param_id in values:
            return _bad(f"{action.name}: parameter {param_id} unknown or twice")
        values[param_id] = v = int.from_bytes(data, "big")
        if v >> spec[1]:
            return _wide(f"{action.name}.{spec[0]}", spec[1])
        short_form = short_form and _short(data)
    if len(values) != len(declared):
        return _bad(f"{action.name}: parameters {sorted(values)}, not {sorted(declared)}")
    return action.id, values, short_form


# --------------------------------------------------------------------------------------
# canonical form and keys


def canonical(entry: p4runtime_pb2.TableEntry) -> p4runtime_pb2.TableEntry:
    """``entry`` (valid) with shortest bytestrings and its match fields in id order."""
    out = p4runtime_pb2.TableEntry()
    out.CopyFrom(entry)
    del out.match[:]
    for fm in sorted(entry.match, key=lambda f: f.field_id):
        copy = out.match.add()
        copy.CopyFrom(fm)
        if fm.HasField("ternary"):
            copy.ternary.value = short(value(fm.ternary.value))
            copy.ternary.mask = short(value(fm.ternary.mask))
        elif fm.HasField("exact"):
            copy.exact.value = short(value(fm.exact.value))
    for param in out.action.action.params:
        param.value = short(value(param.value))
    return out


def key(entry: p4runtime_pb2.TableEntry) -> EntryKey:
    """What identifies an entry in its table: table, priority, match (by value)."""
    match = sorted((fm.field_id, *_match_value(fm)) for fm in entry.match)
    return entry.table_id, entry.priority, tuple(match)


def _match_value(fm: p4runtime_pb2.FieldMatch) -> tuple[int, int]:
    if fm.HasField("ternary"):
        return value(fm.ternary.value), value(fm.ternary.mask)
    return value(fm.exact.value), -1
