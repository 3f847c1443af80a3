"""A batch on a device that declares no atomic batches (``Capabilities.atomic_batch`` False):
applied, read back, and on failure its applied part undone, by the executor itself.

A non-atomic device may leave any part of a failed batch applied (OpenFlow 1.0, REST
northbounds, OpenFlow 1.3 without bundles), or report success for a batch it did not
apply (``dpctl`` does not wait for the switch). The executor cannot assume the driver
cleaned up, so for such a device it:

1. reads the entries under the batch's cookies (``drivers.batch.cookies``; the device
   filters where its protocol can: other writers' entries are neither read nor undone)
   and applies the batch;
2. reads back the entries the batch touches and compares them with what it should leave
   (``drivers.batch``): a difference is a ``VerifyError``;
3. on any failure of 1-2 puts the touched entries back as they were before (in reverse
   order of first touch, so a make-before-break batch is walked back in order), reads
   them back, and raises the original error; when the undo fails too, a ``DriverError``
   says the table is in an unknown state.

An atomic device's batch is applied as it is: the device itself leaves all or nothing. So
is the batch of a driver that declares ``self_undoing``: it confirms each batch and undoes
a failed one itself (``hp_dpctl``: one tool run per batch, the undo point the table it last
read or left), and reading the table around it would only double the device's work.

A batch larger than the device's ``max_batch`` is sent in requests of at most that many
changes, in order; the device then cannot leave all or nothing of the whole, so the batch
goes the guarded way above whatever the device declares (read, apply, read back, undo).

An optical circuit step is two commands (remove, then add; a Polatis SUB then ADD):
``circuits`` reads the connections first and, when the add fails after the removal, puts
the touched ingress ports back as they were. ``undo_circuits`` undoes a circuit step from
what the switch has now, so undoing a step that failed part-way never removes or adds
what is not there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from drivers import batch
from drivers.base import CrossConnectSwitch, FlowChange, FlowProgrammer, FlowRule
from drivers.batch import Key
from services.reroute.errors import DriverError
from services.reroute.model.topology import Circuit

log = logging.getLogger("reroute.executor")


class VerifyError(DriverError):
    """A device read back without rules it should have."""


async def apply(driver: FlowProgrammer, changes: Sequence[FlowChange]) -> None:
    """Apply ``changes`` on ``driver`` as its capabilities allow (see the module docstring)."""
    if not changes:
        return
    caps = driver.capabilities
    whole = not caps.max_batch or len(changes) <= caps.max_batch
    if whole and (caps.atomic_batch or caps.self_undoing):
        await driver.apply(changes)
        return
    read = _reader(driver, changes)
    before = batch.index(await read())
    keys = batch.touched(changes)
    try:
        await _in_batches(driver, changes)
        wrong = batch.mismatches(batch.expected(before, changes), batch.index(await read()))
        if wrong:
            raise _differs(driver.name, changes, wrong)
    except DriverError as exc:
        await _undo(driver, read, before, keys, exc)
        raise


async def _in_batches(driver: FlowProgrammer, changes: Sequence[FlowChange]) -> None:
    """``changes`` applied in order, at most ``max_batch`` a request (0: all at once)."""
    size = driver.capabilities.max_batch or len(changes)
    for start in range(0, len(changes), size):
        await driver.apply(changes[start : start + size])


def _reader(
    driver: FlowProgrammer, changes: Sequence[FlowChange]
) -> Callable[[], Awaitable[list[FlowRule]]]:
    """A read of the entries under the batch's cookies."""
    cookie, mask = batch.cookies(changes)

    async def read() -> list[FlowRule]:
        """The driver's entries under (cookie, mask); all of them when mask is 0."""
        return await (driver.read(cookie, mask) if mask else driver.read())

    return read


def _differs(device: str, changes: Sequence[FlowChange], wrong: list[Key]) -> VerifyError:
    i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
    return VerifyError(
        device,
        f"change #{i} ({changes[i].op} {changes[i].rule}) is not in the table read back "
        f"after the batch of {len(changes)} ({len(wrong)} entries differ)",
    )


async def _undo(
    driver: FlowProgrammer,
    read: Callable[[], Awaitable[list[FlowRule]]],
    before: batch.Table,
    keys: list[Key],
    error: DriverError,
) -> None:
    try:
        fix = batch.restore(before, batch.index(await read()), keys)
        if not fix:
            return
        log.warning("%s: undoing %d change(s) of a failed batch: %s", driver.name, len(fix), error)
        await _in_batches(driver, fix)
        wrong = batch.mismatches({k: before.get(k) for k in keys}, batch.index(await read()))
        if wrong:
            raise _differs(driver.name, fix, wrong)
    except DriverError as undo_error:
        raise DriverError(
            driver.name,
            f"{error}; undoing the applied part of the batch failed too ({undo_error}): "
            "the table is in an unknown state, read it back",
        ) from undo_error


# --------------------------------------------------------------------------------------
# optical circuits: SUB then ADD are two commands


async def circuits(
    driver: CrossConnectSwitch,
    remove: Sequence[Circuit],
    add: Sequence[Circuit],
    *,
    before: dict[int, int] | None = None,
) -> None:
    """Remove the circuits ``remove`` (by ingress), then add ``add``. On a device without
    atomic batches a failure after the removal puts the touched ingress ports back as
    they were (read back first; ``before``: already read, by a caller that holds the
    device since), then raises the original error."""
    if driver.capabilities.atomic_batch:
        await _circuits(driver, remove, add)
        return
    if before is None:
        before = await driver.connections()
    try:
        await _circuits(driver, remove, add)
    except DriverError as exc:
        await _restore_circuits(driver, before, {c.ingress for c in (*remove, *add)}, exc)
        raise


async def undo_circuits(
    driver: CrossConnectSwitch, removed: Sequence[Circuit], added: Sequence[Circuit]
) -> None:
    """Undo a circuit step from what the device has now: remove those of ``added`` that
    exist, add back those of ``removed`` that do not (a step that failed part-way, or was
    already put back, leaves less to undo)."""
    now = await driver.connections()
    drop = [c for c in added if now.get(c.ingress) == c.egress]
    back = [c for c in removed if now.get(c.ingress) != c.egress]
    await circuits(driver, drop, back)


async def _circuits(
    driver: CrossConnectSwitch, remove: Sequence[Circuit], add: Sequence[Circuit]
) -> None:
    if remove:
        await driver.disconnect([c.ingress for c in remove])
    if add:
        await driver.connect([(c.ingress, c.egress) for c in add])


async def _restore_circuits(
    driver: CrossConnectSwitch, before: dict[int, int], ingresses: set[int], error: DriverError
) -> None:
    try:
        now = await driver.connections()
        changed = sorted(i for i in ingresses if now.get(i) != before.get(i))
        if not changed:
            return
        log.warning("%s: putting back circuits of %s after: %s", driver.name, changed, error)
        if gone := [i for i in changed if i in now]:
            await driver.disconnect(gone)
        if back := [(i, before[i]) for i in changed if i in before]:
            await driver.connect(back)
        now = await driver.connections()
        if wrong := [i for i in changed if now.get(i) != before.get(i)]:
            raise DriverError(driver.name, f"ingress port(s) {wrong} did not read back as before")
    except DriverError as undo_error:
        raise DriverError(
            driver.name,
            f"{error}; putting the circuits back failed too ({undo_error}): the switch is in "
            "an unknown state, read its connections",
        ) from undo_error
