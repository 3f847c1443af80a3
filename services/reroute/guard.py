"""A batch on a device that declares no atomic batches (``Capabilities.atomic_batch`` False):
applied, read back, and on failure its applied part undone, by the executor itself.

A non-atomic device may leave any part of a failed batch applied (OpenFlow 1.0, REST
northbounds, OpenFlow 1.3 without bundles), or report success for a batch it did not
apply (``dpctl`` does not wait for the switch). The executor cannot assume the driver
cleaned up, so for such a device it:

1. reads the table (the undo point) and applies the batch;
2. reads back the entries the batch touches and compares them with what it should leave
   (``drivers.batch``): a difference is a ``VerifyError``;
3. on any failure of 1-2 puts the touched entries back as they were before (in reverse
   order of first touch, so a make-before-break batch is walked back in order), reads
   them back, and raises the original error; when the undo fails too, a ``DriverError``
   says the table is in an unknown state.

An atomic device's batch is applied as it is: the device itself leaves all or nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from drivers import batch
from drivers.base import FlowChange, FlowProgrammer
from drivers.batch import Key
from services.reroute.errors import DriverError

log = logging.getLogger("reroute.executor")


class VerifyError(DriverError):
    """A device read back without rules it should have."""


async def apply(driver: FlowProgrammer, changes: Sequence[FlowChange]) -> None:
    """Apply ``changes`` on ``driver`` as its capabilities allow (see the module docstring)."""
    if not changes:
        return
    if driver.capabilities.atomic_batch:
        await driver.apply(changes)
        return
    before = batch.index(await driver.read())
    keys = batch.touched(changes)
    try:
        await driver.apply(changes)
        wrong = batch.mismatches(batch.expected(before, changes), batch.index(await driver.read()))
        if wrong:
            raise _differs(driver.name, changes, wrong)
    except DriverError as exc:
        await _undo(driver, before, keys, exc)
        raise


def _differs(device: str, changes: Sequence[FlowChange], wrong: list[Key]) -> VerifyError:
    i = next(i for i, c in enumerate(changes) if c.rule.key in wrong)
    return VerifyError(
        device,
        f"change #{i} ({changes[i].op} {changes[i].rule}) is not in the table read back "
        f"after the batch of {len(changes)} ({len(wrong)} entries differ)",
    )


async def _undo(
    driver: FlowProgrammer, before: batch.Table, keys: list[Key], error: DriverError
) -> None:
    try:
        fix = batch.restore(before, batch.index(await driver.read()), keys)
        if not fix:
            return
        log.warning("%s: undoing %d change(s) of a failed batch: %s", driver.name, len(fix), error)
        await driver.apply(fix)
        wrong = batch.mismatches({k: before.get(k) for k in keys}, batch.index(await driver.read()))
        if wrong:
            raise _differs(driver.name, fix, wrong)
    except DriverError as undo_error:
        raise DriverError(
            driver.name,
            f"{error}; undoing the applied part of the batch failed too ({undo_error}): "
            "the table is in an unknown state, read it back",
        ) from undo_error
