"""A batch on an OpenFlow 1.3 switch without ONF bundles: ordered, verified, undone on failure.

An OpenFlow switch may reorder messages that no barrier separates, so each flow-mod is
followed by a BARRIER, all in one write (pipelined, one round trip for the batch). A switch
goes on after a rejected flow-mod, so the batch is not all-or-nothing; the driver:

1. reads the entries under the batch's cookies (``drivers.batch.cookies``: the undo point;
   other writers' entries are not ours to read or undo) and sends the batch;
2. on any error (a flow-mod rejected, connection lost, timeout) or when the entries the
   batch touches do not read back as it should leave them, puts those entries back as
   they were (``drivers.batch.restore``, in reverse order of first touch, also ordered
   and verified) and raises: ``DeviceRejected`` naming the first failed change, or
   ``DeviceRejected(code="NOT_APPLIED")`` for a read-back that differs;
3. when the undo fails too, a plain ``DriverError`` says the table is in an unknown state.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from drivers import batch
from drivers.base import FlowChange, FlowRule
from drivers.batch import Key
from drivers.errors import DeviceRejected, DriverError
from drivers.ovs import ofp13
from drivers.ovs.channel import Channel, OpenFlowError
from drivers.ovs.ofp13 import ErrorMsg
from protocols.openflow13.errors import code_name

log = logging.getLogger("reroute.drivers.ovs")

Encode = Callable[[Sequence[FlowChange], int], list[bytes]]
Read = Callable[[], Awaitable[list[FlowRule]]]


async def apply_ordered(
    device: str, chan: Channel, changes: Sequence[FlowChange], encode: Encode, read: Read
) -> None:
    """Apply ``changes`` in order (see the module docstring); the table is as before on error."""
    before = batch.index(await read())
    keys = batch.touched(changes)
    try:
        await _send(device, chan, changes, encode)
        wrong = batch.mismatches(batch.expected(before, changes), batch.index(await read()))
        if wrong:
            raise _not_applied(device, changes, wrong)
    except DriverError as exc:
        await _undo(device, chan, encode, read, before, keys, exc)
        raise


async def _send(device: str, chan: Channel, changes: Sequence[FlowChange], encode: Encode) -> None:
    first = chan.xids(len(changes))
    flow_mods = encode(changes, first)
    barrier = chan.xids(len(changes))
    msgs: list[bytes] = []
    for i, flow_mod in enumerate(flow_mods):
        msgs += [flow_mod, ofp13.encode_barrier_request(barrier + i)]
    with chan.watch(range(first, first + len(changes))) as watch:
        await chan.transact(msgs, range(barrier, barrier + len(changes)))
    if watch.errors:
        raise _rejected(device, changes, first, watch.errors)


def _rejected(
    device: str, changes: Sequence[FlowChange], first: int, errors: list[tuple[int, ErrorMsg]]
) -> DeviceRejected:
    xid, error = min(errors)
    index = xid - first
    others = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    exc = DeviceRejected(
        device,
        f"change #{index} ({changes[index].op} {changes[index].rule}) rejected: "
        f"{error.name}{others}; the batch of {len(changes)} was undone",
        code_name(error.type, error.code, error.experimenter),
    )
    exc.__cause__ = OpenFlowError(error)
    return exc


def _not_applied(device: str, changes: Sequence[FlowChange], wrong: list[Key]) -> DeviceRejected:
    i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
    return DeviceRejected(
        device,
        f"change #{i} ({changes[i].op} {changes[i].rule}) is not in the table read back "
        f"({len(wrong)} entries differ); the batch of {len(changes)} was undone",
        "NOT_APPLIED",
    )


async def _undo(
    device: str,
    chan: Channel,
    encode: Encode,
    read: Read,
    before: batch.Table,
    keys: list[Key],
    error: DriverError,
) -> None:
    """Put ``keys`` back as they were in ``before``; DriverError when that fails."""
    try:
        fix = batch.restore(before, batch.index(await read()), keys)
        if fix:
            log.warning("%s: undoing %d change(s) after: %s", device, len(fix), error)
            await _send(device, chan, fix, encode)
            now = batch.index(await read())
            if wrong := batch.mismatches({k: before.get(k) for k in keys}, now):
                raise _not_applied(device, fix, wrong)
    except DriverError as undo_error:
        raise DriverError(
            device,
            f"{error}; undoing the batch failed too ({undo_error}): the table is in an "
            "unknown state, read it back",
        ) from undo_error
