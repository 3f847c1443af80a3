"""Other writers' table entries: how every FlowProgrammer reads around them. Pure, no I/O.

A lab's switches are shared: topology discovery traps LLDP and BDDP to its controller, a
table-miss entry sends the rest to ``NORMAL``, a pipeline jumps with ``goto_table``, ODL's
l2switch matches MAC addresses. Our entries carry our cookies, so a driver:

- reads only entries under a cookie filter where the protocol can filter (OpenFlow 1.3
  flow stats, ofctl_rest's ``POST /stats/flow``), and filters itself where it cannot
  (OpenFlow 1.0, RESTCONF, P4Runtime's metadata);
- never fails on an entry outside the filter: one a ``FlowRule`` cannot say is skipped and
  counted (``Skips``: logged once per device), one inside it is a ``ProtocolError``;
- for the planner, ``sort``s a whole table into ours and ``ForeignEntry``s (``Survey``).

A driver gives ``select`` and ``sort`` its entries in its own form and a ``Reader`` of
that form: the cookie (cheap), the ``FlowRule`` and the ``ForeignEntry`` (each may raise
``ValueError``: the entry says more than the model can).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from drivers.base import FlowRule, ForeignEntry, Survey
from drivers.errors import ProtocolError

log = logging.getLogger("reroute.drivers")
ALL_COOKIE_BITS = 0xFFFF_FFFF_FFFF_FFFF
E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class Reader(Generic[E]):
    """How to read one entry of a driver's own form."""

    cookie: Callable[[E], int]
    rule: Callable[[E], FlowRule]  # ValueError when a FlowRule cannot say it
    foreign: Callable[[E], ForeignEntry]  # ValueError when not even this can be read
    text: Callable[[E], str] = str  # the entry's text, for the log


class Skips:
    """Entries of other writers that a device's reads left out because this driver cannot
    read them: counted, and logged once (a table is read many times per reroute)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.count = 0

    def skip(self, text: str, why: object) -> None:
        """Count one skipped entry (log the first)."""
        self.count += 1
        if self.count == 1:
            log.warning(
                "%s: skipping a table entry of another writer that reroute cannot read "
                "(%s): %s; further ones are only counted",
                self.device, why, text[:300],
            )  # fmt: skip


def cookie_filter(cookie: int | None, cookie_mask: int) -> tuple[int, int]:
    """``read``'s arguments as (cookie, mask): no cookie is no filter (mask 0), a cookie
    without a mask matches exactly."""
    if cookie is None:
        return 0, 0
    mask = cookie_mask or ALL_COOKIE_BITS
    return cookie & mask, mask


def wire_filter(cookie: int, mask: int) -> tuple[int, int]:
    """The cookie filter to put in an OpenFlow flow stats request for (cookie, mask): none
    when a cookie of 0 passes it. Asked for cookie 0, Open vSwitch (3.1) also lists its
    hidden entries (in-band control, with Nicira actions), which a dump never shows: the
    entries are then filtered here instead."""
    return (0, 0) if cookie & mask == 0 else (cookie, mask)


def select(
    entries: Iterable[E],
    reader: Reader[E],
    cookie: int,
    mask: int,
    skips: Skips,
    *,
    strict: bool = True,
) -> list[FlowRule]:
    """The rules of the entries under the filter (``mask`` 0: every entry). Under a filter
    an entry that does not read is a ProtocolError (it is ours) when ``strict``; without
    one, or not ``strict`` (a driver's own read around a batch), it is skipped."""
    want = cookie & mask
    rules = []
    for entry in entries:
        if reader.cookie(entry) & mask != want:
            continue
        try:
            rules.append(reader.rule(entry))
        except ValueError as exc:
            if mask and strict:
                raise _ours(skips.device, reader.text(entry), exc) from exc
            skips.skip(reader.text(entry), exc)
    return rules


def sort(entries: Iterable[E], reader: Reader[E], cookie: int, mask: int, skips: Skips) -> Survey:
    """Ours (cookie under the filter) as rules, the rest as foreign entries."""
    want = cookie & mask
    ours, foreign = [], []
    for entry in entries:
        try:
            if reader.cookie(entry) & mask == want:
                ours.append(reader.rule(entry))
                continue
        except ValueError as exc:
            raise _ours(skips.device, reader.text(entry), exc) from exc
        try:
            foreign.append(reader.foreign(entry))
        except ValueError as exc:
            skips.skip(reader.text(entry), exc)
    return Survey(ours=ours, foreign=foreign)


def _ours(device: str, text: str, exc: Exception) -> ProtocolError:
    return ProtocolError(
        device, f"an entry with our cookie does not read back as a flow rule ({exc}): {text}"
    )
