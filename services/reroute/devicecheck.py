"""Every device's state asked once, for the command line (``reroute inventory check``,
``reroute fabric status``): the inventory's drivers opened (each within its timeout, as
a backup where the device elects a primary: a running service keeps its session), probed
as the service's tracker probes (``devicestate``), their rules compared with what the
inventory's journal expects, and closed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from drivers.base import FlowRule, Session
from services.reroute.devicestate import DeviceStatus, DeviceTracker, classify
from services.reroute.engine.resync import intended, wanted
from services.reroute.model.inventory import Inventory, build_drivers
from services.reroute.model.topology import Topology
from services.reroute.store.sqlite import Journal
from services.reroute.tables import RuleKey


async def check_devices(
    inv: Inventory, topo: Topology, scope: Iterable[str] | None = None
) -> list[DeviceStatus]:
    """Each device of ``inv`` in ``scope``: up, down, hung, no_pipeline or out_of_sync
    (against the journal in the inventory's state directory: without one, the initial
    paths)."""
    drivers = build_drivers(inv, topo, scope)
    expected = _expected(inv, topo)
    tracker = DeviceTracker(
        drivers,  # type: ignore[arg-type]  # every switching node's driver is one
        timeouts={n: inv.devices[n].timeout_s for n in drivers},
        kinds={n: inv.devices[n].driver for n in drivers},
        expected=lambda name: expected.get(name, {}),
    )
    try:
        await asyncio.gather(*(_check(tracker, n, d) for n, d in drivers.items()))
    finally:
        await asyncio.gather(*(d.close() for d in drivers.values()), return_exceptions=True)
    return tracker.statuses()


async def _check(tracker: DeviceTracker, name: str, driver: Session) -> None:
    timeout = tracker.timeout(name)
    share = getattr(driver, "share", None)
    if share is not None:
        share()  # a backup session: never take a running service's primacy
    try:
        async with asyncio.timeout(timeout):
            await driver.open()
    except Exception as exc:  # every failure is a state to report
        tracker.record(name, classify(exc, False, timeout))
        return
    await tracker.probe(name, check_sync=True)


def _expected(inv: Inventory, topo: Topology) -> dict[str, dict[RuleKey, FlowRule]]:
    """Our rules by switch, as the inventory's journal places the flows (no journal yet:
    every flow on its initial path)."""
    path = inv.journal if inv.journal.exists() else None
    with contextlib.closing(Journal(path)) as journal:
        return wanted(topo, intended(topo, journal))


def table(statuses: list[DeviceStatus]) -> str:
    """One line per device: name, driver, state, since when (this check, for a first look),
    the error."""
    head = ("DEVICE", "DRIVER", "STATE", "SINCE", "ERROR")
    rows = [head] + [(s.name, s.kind, s.state.value, _since(s), s.error or "-") for s in statuses]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )


def _since(status: DeviceStatus) -> str:
    return time.strftime("%H:%M:%S", time.localtime(status.since)) if status.since else "-"
