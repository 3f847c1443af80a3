"""A batch on a device without atomic batches (OpenFlow 1.0, REST northbounds): what it
should leave, what it left, how to undo it. Pure. Shared by the hp_dpctl and odl drivers.

OpenFlow 1.0 applies a batch one flow-mod at a time, so a failure in the middle leaves a
prefix applied (``ovs-ofctl`` stops at the first error) or, with the fire-and-forget
``dpctl``, any subset. The driver reads the table before the batch and afterwards compares
only the entries the batch touches (its keys: table, priority, match):

- ``expected(before, changes)``: each touched key's entry after the batch (None: absent);
- ``mismatches(expected, now)``: the touched keys that differ;
- ``restore(before, now, keys)``: the changes that put those keys back as they were, in
  the reverse order of the batch's first touches. For a batch that failed after a prefix,
  this walks back through the states the batch went through, so a table that held every
  one of them (e.g. a size limit) holds the undo too, and the make-before-break order of
  the batch is kept in reverse (old entries come back before new ones go).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from drivers.base import FlowChange, FlowMatch, FlowOp, FlowRule

Key = tuple[int, int, FlowMatch]
Table = Mapping[Key, FlowRule]
Expected = dict[Key, FlowRule | None]


def index(rules: Iterable[FlowRule]) -> dict[Key, FlowRule]:
    """Rules by their identity."""
    return {r.key: r for r in rules}


def touched(changes: Sequence[FlowChange]) -> list[Key]:
    """The keys a batch touches, in the order it first touches them."""
    return list(dict.fromkeys(c.rule.key for c in changes))


def expected(before: Table, changes: Sequence[FlowChange]) -> Expected:
    """What every touched key holds once ``changes`` are applied to ``before`` (None: absent)."""
    state: Expected = {k: before.get(k) for k in touched(changes)}
    for change in changes:
        state[change.rule.key] = change.rule if change.op is FlowOp.ADD else None
    return state


def mismatches(want: Mapping[Key, FlowRule | None], now: Table) -> list[Key]:
    """The keys whose rule in ``now`` is not the wanted one."""
    return [k for k, rule in want.items() if now.get(k) != rule]


def restore(before: Table, now: Table, keys: Sequence[Key]) -> list[FlowChange]:
    """Changes that bring ``keys`` back from ``now`` to ``before``, last touched first."""
    undo: list[FlowChange] = []
    for key in reversed(keys):
        was, is_now = before.get(key), now.get(key)
        if was == is_now:
            continue
        if was is not None:
            undo.append(FlowChange(op=FlowOp.ADD, rule=was))
        elif is_now is not None:
            undo.append(FlowChange(op=FlowOp.DELETE, rule=is_now))
    return undo


def cookies(changes: Sequence[FlowChange]) -> tuple[int, int]:
    """The narrowest (cookie, mask) filter every change's cookie matches: the bits they all
    share. A read under it sees every entry the batch writes and leaves the other writers'
    entries on the device (its cookie bits differ) out."""
    if not changes:
        return 0, 0
    first = changes[0].rule.cookie
    differ = 0
    for change in changes:
        differ |= change.rule.cookie ^ first
    mask = ~differ & 0xFFFF_FFFF_FFFF_FFFF
    return first & mask, mask
