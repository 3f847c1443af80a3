"""What a probe run's arrivals say: loss, duplicates, reordering, the longest gap, one-way
delay and the received rate over time. Pure: :func:`analyze` turns the receiver's records
into a :class:`ProbeReport`, no I/O (the probe itself is ``fabric.traffic.probe``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from services.reroute.errors import RerouteError


class ProbeError(RerouteError):
    """A probe could not be sent or received (bad arguments, address, socket)."""


class Arrival(NamedTuple):
    """One received data datagram."""

    seq: int
    recv_ns: int
    send_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Gap:
    """The longest time between two consecutive arrivals, and the seqs on either side of it."""

    ms: float
    start_ns: int
    last_seq_before: int
    first_seq_after: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Delay:
    """One-way delay (receive time minus send time) over all arrivals."""

    min_ms: float
    avg_ms: float
    max_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RateSeries:
    """Arrivals per bin; bin ``i`` covers ``[start_ns + i*bin, start_ns + (i+1)*bin)``."""

    start_ns: int
    bin_ms: float
    counts: tuple[int, ...]

    def rates_pps(self) -> tuple[float, ...]:
        """The rate of each bin, in packets/s."""
        return tuple(c * 1000.0 / self.bin_ms for c in self.counts)

    def dip_pps(self, *, event_start_ns: int, event_end_ns: int) -> float:
        """Mean rate of the whole bins before the event minus the lowest rate during it."""
        bin_ns = self.bin_ms * 1e6
        edges = [(self.start_ns + i * bin_ns, r) for i, r in enumerate(self.rates_pps())]
        before = [r for t0, r in edges if t0 + bin_ns <= event_start_ns]
        during = [r for t0, r in edges if t0 < event_end_ns and t0 + bin_ns > event_start_ns]
        if not before or not during:
            raise ProbeError("the rate series does not cover both the baseline and the event")
        return sum(before) / len(before) - min(during)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeReport:
    """Loss, order, gap, delay and rate of one run. ``received`` counts distinct seqs."""

    run_id: int | None
    end_seen: bool
    sent: int
    received: int
    lost: int
    duplicated: int
    reordered: int
    longest_gap: Gap | None
    delay: Delay | None
    rate: RateSeries

    @property
    def loss_ratio(self) -> float:
        """The share of sent packets lost."""
        return self.lost / self.sent if self.sent else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict, with the loss ratio."""
        return {**dataclasses.asdict(self), "loss_ratio": self.loss_ratio}

    def to_json(self, *, indent: int | None = None) -> str:
        """The report as JSON."""
        return json.dumps(self.to_dict(), indent=indent)


def analyze(
    arrivals: Sequence[Arrival],
    sent: int,
    *,
    bin_ms: float = 10.0,
    run_id: int | None = None,
    end_seen: bool = True,
) -> ProbeReport:
    """Turn arrival records (in arrival order) and the count sent into a report.

    ``lost`` counts seqs in ``range(sent)`` never seen; a seq seen again is ``duplicated``; a
    first arrival whose seq is below the highest seen so far is ``reordered``.
    """
    if bin_ms <= 0:
        raise ProbeError(f"bin_ms must be positive, got {bin_ms}")
    seen, duplicated, reordered = _order(arrivals)
    return ProbeReport(
        run_id=run_id,
        end_seen=end_seen,
        sent=sent,
        received=len(seen),
        lost=sent - sum(1 for s in seen if 0 <= s < sent),
        duplicated=duplicated,
        reordered=reordered,
        longest_gap=_longest_gap(arrivals),
        delay=_delay(arrivals),
        rate=_rate(arrivals, bin_ms),
    )


def _order(arrivals: Sequence[Arrival]) -> tuple[set[int], int, int]:
    seen: set[int] = set()
    duplicated = reordered = 0
    highest = -1
    for a in arrivals:
        if a.seq in seen:
            duplicated += 1
            continue
        seen.add(a.seq)
        if a.seq < highest:
            reordered += 1
        highest = max(highest, a.seq)
    return seen, duplicated, reordered


def _longest_gap(arrivals: Sequence[Arrival]) -> Gap | None:
    if len(arrivals) < 2:
        return None
    i = max(range(1, len(arrivals)), key=lambda k: arrivals[k].recv_ns - arrivals[k - 1].recv_ns)
    before, after = arrivals[i - 1], arrivals[i]
    return Gap(
        ms=(after.recv_ns - before.recv_ns) / 1e6,
        start_ns=before.recv_ns,
        last_seq_before=before.seq,
        first_seq_after=after.seq,
    )


def _delay(arrivals: Sequence[Arrival]) -> Delay | None:
    if not arrivals:
        return None
    delays = [a.recv_ns - a.send_ns for a in arrivals]
    return Delay(
        min_ms=min(delays) / 1e6, avg_ms=sum(delays) / len(delays) / 1e6, max_ms=max(delays) / 1e6
    )


def _rate(arrivals: Sequence[Arrival], bin_ms: float) -> RateSeries:
    if not arrivals:
        return RateSeries(start_ns=0, bin_ms=bin_ms, counts=())
    start, bin_ns = arrivals[0].recv_ns, bin_ms * 1e6
    counts = [0] * (int((max(a.recv_ns for a in arrivals) - start) // bin_ns) + 1)
    for a in arrivals:
        counts[max(0, int((a.recv_ns - start) // bin_ns))] += 1
    return RateSeries(start_ns=start, bin_ms=bin_ms, counts=tuple(counts))
