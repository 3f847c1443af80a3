"""The EMULATOR's table entries: P4Runtime entries as state, one OVS flow each.

``write`` checks each update against the installed P4Info (``program.examine``: the
P4Runtime error codes per update; INSERT of an existing key ALREADY_EXISTS, MODIFY or
DELETE of a missing one NOT_FOUND, a full table RESOURCE_EXHAUSTED), turns the valid ones
into flow changes on the bridge (``dataplane``, ``bridge``) and keeps the entries as written, in
canonical form, for Read. Fast path: all of a Write's flow changes in one atomic OVS
bundle. When the bridge refuses the bundle (nothing applied), they are applied one at a
time, in order, so each refusal is reported on its own update and the others stay
applied. The state changes only with the bridge, so Read tells what the bridge does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from drivers import gcpause
from emulators.p4rt.dataplane import Dataplane, Unrealisable
from emulators.p4rt.flow import BridgeRefused, Change, Flow, FlowTable
from emulators.p4rt.program import EntryKey, Failure, Pipeline, canonical, examine, key
from emulators.p4rt.proto import code_pb2, p4runtime_pb2

log = logging.getLogger("reroute.emulators.p4rt")
Update = p4runtime_pb2.Update


class Stored(NamedTuple):  # tuples: thousands are made per Write
    entry: p4runtime_pb2.TableEntry  # canonical
    flow: Flow


class Planned(NamedTuple):
    """One valid update: its key, what the table holds after it (None: deleted), and the
    flow change that carries it."""

    key: EntryKey
    stored: Stored | None
    change: Change


def ovs_code(code: str) -> int:
    """The P4Runtime code of an OVS refusal (the OpenFlow error's name)."""
    if code.endswith("TABLE_FULL"):
        return int(code_pb2.RESOURCE_EXHAUSTED)
    if code.startswith(("OFPBMC_", "OFPBAC_", "OFPBIC_")) or not code:
        return int(code_pb2.INVALID_ARGUMENT)
    return int(code_pb2.INTERNAL)


class Table:
    """The entries of a pipeline's tables; those of ``MyIngress.reroute`` are flows."""

    def __init__(self, bridge: FlowTable, pipeline: Pipeline) -> None:
        self.bridge = bridge
        self.pipeline = pipeline
        self.dataplane = Dataplane.of(pipeline)
        self.entries: dict[EntryKey, Stored] = {}

    def read(self, entry: p4runtime_pb2.TableEntry | None = None) -> list[p4runtime_pb2.TableEntry]:
        """The entries (canonical), or the one with ``entry``'s key."""
        if entry is None or (not entry.match and not entry.priority):
            table_id = 0 if entry is None else entry.table_id
            return [s.entry for s in self.entries.values() if table_id in (0, s.entry.table_id)]
        found = self.entries.get(key(entry))
        return [] if found is None else [found.entry]

    async def clear(self) -> None:
        """No entries, and no flows on the bridge (at start, and for a new pipeline)."""
        await self.bridge.clear()
        self.entries = {}

    async def restore(self) -> int:
        """The entries the bridge's flows carry (a warm start: the dataplane kept
        forwarding while the agent was down); flows no entry makes are left alone and
        logged. Returns how many entries there are."""
        self.entries = {}
        for flow in await self.bridge.read():
            try:
                entry = self.dataplane.entry(flow)
            except Unrealisable as exc:
                log.warning("warm start: a flow no entry makes (%s): %s", exc, flow)
                continue
            examined = examine(self.pipeline, entry, with_action=True)
            if isinstance(examined, Failure):
                log.warning("warm start: %s: %s", flow, examined.message)
                continue
            self.entries[examined.key] = Stored(entry=canonical(entry), flow=flow)
        return len(self.entries)

    async def write(self, updates: Sequence[p4runtime_pb2.Update]) -> list[Failure | None]:
        """Apply the updates in order; one outcome per update (None: done)."""
        results: list[Failure | None] = [None] * len(updates)
        state = dict(self.entries)
        planned: list[tuple[int, Planned]] = []
        with gcpause.paused():  # 1000s of updates: see drivers.gcpause
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
            await self.bridge.apply([p.change for _, p in planned])
        except BridgeRefused:
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
                await self.bridge.apply([got.change])
            except BridgeRefused as exc:
                log.info("update #%d refused by the bridge: %s", i, exc)
                results[i] = Failure(code=ovs_code(exc.code), message=str(exc))
            else:
                _apply(self.entries, got)

    def check(
        self, update: p4runtime_pb2.Update, state: dict[EntryKey, Stored]
    ) -> Planned | Failure:
        """What an update does against ``state``, or why it fails."""
        if update.entity.WhichOneof("entity") != "table_entry":
            return Failure(code=code_pb2.UNIMPLEMENTED, message="only table entries")
        if update.type not in (Update.INSERT, Update.MODIFY, Update.DELETE):
            return Failure(code=code_pb2.INVALID_ARGUMENT, message="update type unspecified")
        entry = update.entity.table_entry
        deleting = update.type == Update.DELETE
        examined = examine(self.pipeline, entry, with_action=not deleting)
        if isinstance(examined, Failure):
            return examined
        entry_key = examined.key
        present = state.get(entry_key)
        if update.type == Update.INSERT and present is not None:
            return Failure(code=code_pb2.ALREADY_EXISTS, message="the entry exists")
        if not deleting and present is None and len(state) >= self._size(entry):
            return Failure(code=code_pb2.RESOURCE_EXHAUSTED, message="the table is full")
        if update.type != Update.INSERT and present is None:
            return Failure(code=code_pb2.NOT_FOUND, message="no such entry")
        if deleting:
            assert present is not None
            change = Change(flow=present.flow, delete=True)
            return Planned(key=entry_key, stored=None, change=change)
        try:
            flow = self.dataplane.flow(entry, examined)
        except Unrealisable as exc:
            return Failure(code=code_pb2.UNIMPLEMENTED, message=f"the dataplane cannot: {exc}")
        stored = Stored(entry=entry if examined.canonical else canonical(entry), flow=flow)
        return Planned(key=entry_key, stored=stored, change=Change(flow=flow))

    def _size(self, entry: p4runtime_pb2.TableEntry) -> int:
        return self.pipeline.tables[entry.table_id].size or 1 << 31


def _apply(state: dict[EntryKey, Stored], planned: Planned) -> None:
    if planned.stored is None:
        state.pop(planned.key, None)
    else:
        state[planned.key] = planned.stored
