"""A batch of flow changes as the updates of one P4Runtime Write. Pure.

P4Runtime has no "add or replace": an INSERT of an existing key fails (ALREADY_EXISTS),
as does a MODIFY or DELETE of a missing one (NOT_FOUND). So the driver reads the table
first and plans against it: ADD -> INSERT when the key is absent, MODIFY when present,
nothing when the entry is already as asked; DELETE -> DELETE when present, nothing when
absent. A server may apply the updates of one Write in any order, so a batch touching a
key twice cannot be one Write: ``twice`` finds it and the driver refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drivers.base import FlowChange, FlowOp
from drivers.batch import Key, Table
from drivers.p4runtime.mapping import entry_fields
from drivers.p4runtime.program import Program
from drivers.p4runtime.proto import p4runtime_pb2 as p4r

INSERT, MODIFY, DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    """The updates of a Write, as the nested dicts protobuf builds the request from in one
    call (``WriteRequest(updates=...)``, faster than message by message), and for each the
    index of the change it carries."""

    updates: list[dict[str, Any]]
    changes: list[int]


def twice(changes: Sequence[FlowChange]) -> Key | None:
    """A key the batch touches more than once (None: each at most once)."""
    seen: set[Key] = set()
    for change in changes:
        if change.rule.key in seen:
            return change.rule.key
        seen.add(change.rule.key)
    return None


def plan(program: Program, table: Table, changes: Sequence[FlowChange]) -> Planned:
    """The P4Runtime updates of ``changes`` on ``table``."""
    updates: list[dict[str, Any]] = []
    indices: list[int] = []
    for i, change in enumerate(changes):
        update = _update(program, table, change)
        if update is not None:
            updates.append(update)
            indices.append(i)
    return Planned(updates=updates, changes=indices)


def _update(program: Program, table: Table, change: FlowChange) -> dict[str, Any] | None:
    rule, present = change.rule, table.get(change.rule.key)
    if change.op is FlowOp.DELETE:
        if present is None:
            return None
        entry = entry_fields(program, rule, key_only=True)
        return {"type": DELETE, "entity": {"table_entry": entry}}
    if present == rule:
        return None
    kind = INSERT if present is None else MODIFY
    return {"type": kind, "entity": {"table_entry": entry_fields(program, rule)}}


def runs(changes: Sequence[FlowChange]) -> list[list[FlowChange]]:
    """Consecutive changes of one op, in order: Writes whose own order does not matter."""
    found: list[list[FlowChange]] = []
    for change in changes:
        if found and found[-1][-1].op is change.op:
            found[-1].append(change)
        else:
            found.append([change])
    return found
