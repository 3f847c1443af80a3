"""The EMULATOR's table ``MyIngress.reroute``: P4 entries as state, one OVS flow each.

``write`` checks each update as a P4Runtime server must (known table, fields and action,
ternary value within its mask, priority > 0, INSERT of an existing key ALREADY_EXISTS,
MODIFY/DELETE of a missing key NOT_FOUND, a full table RESOURCE_EXHAUSTED) and turns the
valid ones into flow changes on the bridge. Fast path: all of them in one atomic OVS
bundle. When the bridge refuses the bundle (nothing applied), they are applied one at a
time, in order, so each refusal is reported on its own update and the others stay
applied. The state changes only with the bridge, so Read tells what the bridge does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from drivers.base import FlowChange, FlowOp, FlowProgrammer, FlowRule
from drivers.batch import Key
from drivers.p4runtime import mapping, program
from drivers.p4runtime.program import ACTIONS, FIELDS, ActionId, Field
from drivers.p4runtime.proto import code_pb2, p4runtime_pb2
from services.reroute.errors import DeviceRejected

log = logging.getLogger("reroute.fabric.p4rt")


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """Why one update failed: a ``google.rpc.Code`` and a message (a ``p4.v1.Error``)."""

    code: int
    message: str


def ovs_code(code: str) -> int:
    """The P4Runtime code of an OVS refusal (``OvsDriver``'s DeviceRejected code)."""
    if code.endswith("TABLE_FULL"):
        return int(code_pb2.RESOURCE_EXHAUSTED)
    if code.startswith(("OFPBMC_", "OFPBAC_", "OFPBIC_")) or not code:
        return int(code_pb2.INVALID_ARGUMENT)
    return int(code_pb2.INTERNAL)


class Table:
    def __init__(self, bridge: FlowProgrammer, size: int = program.TABLE_SIZE) -> None:
        self.bridge = bridge
        self.size = size
        self.entries: dict[Key, FlowRule] = {}

    def read(self, key: Key | None = None) -> list[p4runtime_pb2.TableEntry]:
        rules = self.entries.values() if key is None else filter(None, [self.entries.get(key)])
        return [mapping.to_entry(r) for r in rules]

    async def clear(self) -> None:
        """No entries, and no flows on the bridge (at start, and for a new pipeline)."""
        flows = await self.bridge.read()
        if flows:
            await self.bridge.apply([FlowChange(op=FlowOp.DELETE, rule=r) for r in flows])
        self.entries = {}

    async def write(self, updates: Sequence[p4runtime_pb2.Update]) -> list[Failure | None]:
        """Apply the updates in order; one outcome per update (None: done)."""
        results: list[Failure | None] = [None] * len(updates)
        state = dict(self.entries)
        planned: list[tuple[int, FlowChange]] = []
        for i, update in enumerate(updates):
            got = self.check(update, state)
            if isinstance(got, Failure):
                results[i] = got
            else:
                planned.append((i, got))
                _apply(state, got)
        if not planned:
            return results
        try:
            await self.bridge.apply([change for _, change in planned])
        except DeviceRejected:
            await self._one_by_one(updates, [i for i, _ in planned], results)
        else:
            self.entries = state
        return results

    async def _one_by_one(
        self,
        updates: Sequence[p4runtime_pb2.Update],
        indices: list[int],
        results: list[Failure | None],
    ) -> None:
        for i in indices:
            got = self.check(updates[i], self.entries)
            if isinstance(got, Failure):
                results[i] = got
                continue
            try:
                await self.bridge.apply([got])
            except DeviceRejected as exc:
                log.info("update #%d refused by the bridge: %s", i, exc)
                results[i] = Failure(code=ovs_code(exc.code), message=str(exc))
            else:
                _apply(self.entries, got)

    def check(
        self, update: p4runtime_pb2.Update, state: dict[Key, FlowRule]
    ) -> FlowChange | Failure:
        """The flow change of an update against ``state``, or why it fails."""
        if update.entity.WhichOneof("entity") != "table_entry":
            return Failure(code=code_pb2.UNIMPLEMENTED, message="only table entries")
        entry = update.entity.table_entry
        deleting = update.type == p4runtime_pb2.Update.DELETE
        problem = invalid(entry, with_action=not deleting)
        if problem is not None:
            return problem
        if update.type not in (
            p4runtime_pb2.Update.INSERT,
            p4runtime_pb2.Update.MODIFY,
            p4runtime_pb2.Update.DELETE,
        ):
            return Failure(code=code_pb2.INVALID_ARGUMENT, message="update type unspecified")
        try:
            rule = entry_rule(entry)
        except mapping.MappingError as exc:
            return Failure(code=code_pb2.UNIMPLEMENTED, message=f"the dataplane cannot: {exc}")
        return self._against(update.type, rule, state)

    def _against(
        self, kind: int, rule: FlowRule, state: dict[Key, FlowRule]
    ) -> FlowChange | Failure:
        present = state.get(rule.key)
        if kind == p4runtime_pb2.Update.INSERT and present is not None:
            return Failure(code=code_pb2.ALREADY_EXISTS, message=f"entry exists: {present}")
        if kind == p4runtime_pb2.Update.INSERT and len(state) >= self.size:
            return Failure(code=code_pb2.RESOURCE_EXHAUSTED, message=f"{self.size} entries")
        if kind != p4runtime_pb2.Update.INSERT and present is None:
            return Failure(code=code_pb2.NOT_FOUND, message=f"no entry {rule.match}")
        if kind == p4runtime_pb2.Update.DELETE and present is not None:
            return FlowChange(op=FlowOp.DELETE, rule=present)
        return FlowChange(op=FlowOp.ADD, rule=rule)


def _apply(state: dict[Key, FlowRule], change: FlowChange) -> None:
    if change.op is FlowOp.ADD:
        state[change.rule.key] = change.rule
    else:
        state.pop(change.rule.key, None)


def entry_rule(entry: p4runtime_pb2.TableEntry) -> FlowRule:
    """The flow rule of an entry; an entry without action (a DELETE's) gets ``drop``."""
    if entry.action.WhichOneof("type") is None:
        keyed = p4runtime_pb2.TableEntry()
        keyed.CopyFrom(entry)
        keyed.action.action.action_id = ActionId.DROP
        entry = keyed
    return mapping.to_rule(entry)


def invalid(entry: p4runtime_pb2.TableEntry, *, with_action: bool) -> Failure | None:
    """What P4Runtime says is wrong with an entry of the program (None: nothing)."""
    if entry.table_id != program.TABLE_ID:
        return Failure(code=code_pb2.NOT_FOUND, message=f"no table {entry.table_id:#x}")
    if entry.priority <= 0:
        return Failure(code=code_pb2.INVALID_ARGUMENT, message="a ternary table needs priority")
    for fm in entry.match:
        problem = _invalid_field(fm)
        if problem:
            return Failure(code=code_pb2.INVALID_ARGUMENT, message=problem)
    if with_action:
        problem = _invalid_action(entry.action)
        if problem:
            return Failure(code=code_pb2.INVALID_ARGUMENT, message=problem)
    return None


def _invalid_field(fm: p4runtime_pb2.FieldMatch) -> str:
    if fm.field_id not in FIELDS or fm.WhichOneof("field_match_type") != "ternary":
        return f"field {fm.field_id} is not a ternary field of {program.TABLE}"
    name, bits = FIELDS[Field(fm.field_id)]
    value, mask = mapping.decode(fm.ternary.value), mapping.decode(fm.ternary.mask)
    if mask == 0:
        return f"{name}: a don't-care ternary field must be left out"
    if value >= 1 << bits or mask >= 1 << bits:
        return f"{name}: wider than {bits} bits"
    if value & ~mask:
        return f"{name}: value {value:#x} has bits outside mask {mask:#x}"
    return ""


def _invalid_action(table_action: p4runtime_pb2.TableAction) -> str:
    action = table_action.action
    if table_action.WhichOneof("type") != "action" or action.action_id not in ACTIONS:
        return "an entry needs one of the table's actions"
    name, params = ACTIONS[ActionId(action.action_id)]
    got = {p.param_id: mapping.decode(p.value) for p in action.params}
    if sorted(got) != list(range(1, len(params) + 1)):
        return f"{name}: parameters {sorted(got)}"
    wide = [p for i, (p, bits) in enumerate(params, 1) if got[i] >= 1 << bits]
    return f"{name}: {wide} too wide" if wide else ""
