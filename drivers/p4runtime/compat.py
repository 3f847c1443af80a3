"""Does the program a device runs serve the driver? Its P4Info compared with ours by names.

Two P4Infos of the same program differ byte for byte for many harmless reasons (another
compiler version's ``pkg_info``, annotations, documentation, extra tables, the order of
entries), and pushing ours over such a device would reset its tables for nothing. So the
device's P4Info is read and compared with ``program.p4info()`` by what the driver uses:

- the table ``MyIngress.reroute`` by name, each of its match fields by name with the same
  bit width and match type, and each of our actions among its action refs;
- each of our actions by name, with its parameters by name and bit width;
- and the ids of all of these, since P4Runtime entries carry ids, not names (a program
  compiled elsewhere may number them differently; the driver writes ours).

``differences`` lists what does not fit, in words (empty: the device's program serves).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from drivers.p4runtime.proto import p4info_pb2


def differences(device: p4info_pb2.P4Info, ours: p4info_pb2.P4Info) -> list[str]:
    """What in ``device`` does not serve the driver written for ``ours`` (empty: it fits)."""
    if not device.tables and not device.actions:
        return ["the device runs no P4 program (its P4Info is empty)"]
    return [*_tables(device, ours), *_actions(device, ours)]


def _by_name(items: Any) -> dict[str, Any]:
    return {item.preamble.name: item for item in items}


def _tables(device: p4info_pb2.P4Info, ours: p4info_pb2.P4Info) -> Iterator[str]:
    theirs = _by_name(device.tables)
    action_names = {a.preamble.id: a.preamble.name for a in device.actions}
    our_action_names = {a.preamble.id: a.preamble.name for a in ours.actions}
    for table in ours.tables:
        name = table.preamble.name
        found = theirs.get(name)
        if found is None:
            yield f"no table {name}"
            continue
        if found.preamble.id != table.preamble.id:
            yield f"table {name} has id {found.preamble.id:#x}, ours {table.preamble.id:#x}"
        yield from _fields(name, found, table)
        refs = {action_names.get(r.id, f"{r.id:#x}") for r in found.action_refs}
        for ref in table.action_refs:
            action = our_action_names.get(ref.id, f"{ref.id:#x}")
            if action not in refs:
                yield f"table {name} cannot run action {action}"


def _fields(table: str, found: Any, ours: Any) -> Iterator[str]:
    theirs = {f.name: f for f in found.match_fields}
    for field in ours.match_fields:
        got = theirs.get(field.name)
        if got is None:
            yield f"table {table} has no match field {field.name}"
        elif (got.id, got.bitwidth, got.match_type) != (field.id, field.bitwidth, field.match_type):
            yield (
                f"table {table} field {field.name}: id {got.id}, {got.bitwidth} bits, match "
                f"type {got.match_type}; ours id {field.id}, {field.bitwidth} bits, match type "
                f"{field.match_type}"
            )


def _actions(device: p4info_pb2.P4Info, ours: p4info_pb2.P4Info) -> Iterator[str]:
    theirs = _by_name(device.actions)
    for action in ours.actions:
        name = action.preamble.name
        found = theirs.get(name)
        if found is None:
            yield f"no action {name}"
            continue
        if found.preamble.id != action.preamble.id:
            yield f"action {name} has id {found.preamble.id:#x}, ours {action.preamble.id:#x}"
        got = [(p.id, p.name, p.bitwidth) for p in found.params]
        want = [(p.id, p.name, p.bitwidth) for p in action.params]
        if got != want:
            yield f"action {name} has parameters {got}, ours {want} (id, name, bits)"
