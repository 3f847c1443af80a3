"""The impulse-response method of seed 000 V on raw trains. Pure.

A train's throughput T(t) (Mbit/s, one sample per ``interval_s``) is cut at each degradation
start; the baseline B is the median of the samples in the second before the degradations
(pooled over the train). The response of impulse i is R_i(t) = B - T(t), here normalized:
r_i(t) = R_i(t) / B = 1 - T(t)/B (0: at the baseline, 1: nothing gets through), so that
backends of different peak rates share an axis. Times are seconds from the degradation start.

*Dips* (:func:`dips`): samples where the throughput fell below half of B outside any
degradation's response (before it, or after its recovery), the periodic spikes of the single
responses; each is said with whether iperf3 counted retransmissions in that sample or the one
before, i.e. whether the stream lost packets there (trains that recorded it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PRE_S = 1.0  # shown before the degradation; also the baseline's window
RECOVERED = 0.9  # "recovered": throughput back to 90 % of B ...
HOLD = 3  # ... on average over this many samples (the fabric's own 100 ms dips are noise)
DIP = 0.5  # a dip: below half of B (r above this) outside a response
DIP_MARGIN_S = 0.3  # ... and this far from a degradation's start or its recovery

Raw = Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Impulse:
    """One degradation's response: ``r`` at ``times`` (s from the degradation start)."""

    times: tuple[float, ...]
    r: tuple[float, ...]
    recovery_s: float | None  # to 90 % of B; None: not within the period
    trigger_s: float | None  # the first site's monitor fired
    failover_s: float | None  # the last site's failover call returned
    retransmits: tuple[int | None, ...] = ()  # iperf3's per sample, with ``times`` (if recorded)


def _shift(raw: Raw) -> float:
    """When the stream's first sample began, in the train's time (0 in trains before the
    field was recorded: their samples then show up to ~0.1 s early)."""
    return float(raw.get("stream_start_s", 0.0))


def baseline_mbps(raw: Raw) -> float:
    """B: the median throughput in the ``PRE_S`` before each degradation, pooled."""
    dt, series, shift = raw["interval_s"], raw["series_mbps"], _shift(raw)
    before = [
        v
        for imp in raw["impulses"]
        for k, v in enumerate(series)
        if imp["at_s"] - PRE_S <= shift + (k + 0.5) * dt < imp["at_s"]
    ]
    return statistics.median(before) if before else 0.0


def impulses(raw: Raw) -> list[Impulse]:
    """The responses of a train's degradations (each cut to the period)."""
    dt, series = raw["interval_s"], raw["series_mbps"]
    b = baseline_mbps(raw)
    pre, width = round(PRE_S / dt), round(raw["period_s"] / dt)
    out = []
    for imp in raw["impulses"]:
        at = imp["at_s"] - _shift(raw)
        first = math.floor(at / dt)
        ks = range(first - pre, min(first + width, len(series)))
        times = tuple(round((k + 0.5) * dt - at, 4) for k in ks if k >= 0)
        r = tuple(1 - series[k] / b if b > 0 else 1.0 for k in ks if k >= 0)
        trig, done = _monitor_times(raw, imp["at_s"], imp["at_s"] + raw["period_s"])
        resent = raw.get("retransmits_series") or []
        out.append(
            Impulse(
                times=times,
                r=r,
                recovery_s=recovery_s(times, r),
                trigger_s=trig,
                failover_s=done,
                retransmits=tuple(
                    _resent(resent, k) for k in ks if k >= 0 and len(resent) == len(series)
                ),
            )
        )
    return out


def _resent(series: Sequence[int | None], k: int) -> int | None:
    """Retransmissions in sample ``k`` and the one before (a loss shows in the sample where
    TCP noticed it, the dip it causes in that one or the next)."""
    here = [series[i] for i in (k - 1, k) if 0 <= i < len(series)]
    return None if any(v is None for v in here) else sum(v for v in here if v is not None)


def dips(imp: Impulse, *, before: bool = False) -> list[tuple[float, int | None]]:
    """The samples of ``imp`` below half of B outside its response (after its recovery, and
    with ``before`` more than ``DIP_MARGIN_S`` before the degradation: for a train's first
    impulse only, the others' "before" being the previous one's "after"), with the
    retransmissions counted there (None: not recorded). None after an unrecovered one."""
    resent = imp.retransmits or (None,) * len(imp.times)
    end = None if imp.recovery_s is None else imp.recovery_s + DIP_MARGIN_S
    return [
        (t, n)
        for t, v, n in zip(imp.times, imp.r, resent, strict=True)
        if v > DIP and ((before and t < -DIP_MARGIN_S) or (end is not None and t > end))
    ]


def train_dips(responses: Sequence[Impulse]) -> list[tuple[float, int | None]]:
    """Every dip of a train's responses (in order), each sample once."""
    return [d for i, imp in enumerate(responses) for d in dips(imp, before=i == 0)]


def recovery_s(times: Sequence[float], r: Sequence[float]) -> float | None:
    """From the degradation start to the first of ``HOLD`` samples back within 10 % of B on
    average, after the first one below it; 0 when the throughput never fell below 90 % of B."""
    limit = 1 - RECOVERED
    dip = next((i for i, (t, v) in enumerate(zip(times, r, strict=True)) if t >= 0 and v > limit),
               None)  # fmt: skip
    if dip is None:
        return 0.0
    for i in range(dip + 1, len(r) - HOLD + 1):
        if sum(r[i : i + HOLD]) / HOLD <= limit:
            return round(max(times[i], 0.0), 4)
    return None


def _monitor_times(raw: Raw, start: float, end: float) -> tuple[float | None, float | None]:
    """(first trigger of either site, last site's failover) in [start, end), from start."""
    triggers, failovers = [], []
    for events in raw["monitors"].values():
        inside = [e for e in events if start <= e["t_s"] < end]
        trig = next((e["t_s"] for e in inside if e["kind"] == "trigger"), None)
        done = next((e["t_s"] for e in inside if e["kind"] == "failover"), None)
        if trig is not None:
            triggers.append(trig - start)
        failovers.append(None if done is None else done - start)
    trigger = min(triggers) if triggers else None
    failover = None if None in failovers or not failovers else max(f for f in failovers if f)
    return trigger, failover


def common_length(responses: Sequence[Impulse]) -> int:
    return min((len(i.r) for i in responses), default=0)


def relative_delays(slow: Sequence[Impulse], fast: Sequence[Impulse]) -> list[float]:
    """Every pair's difference of recovery times, slow minus fast (seed 000 Figure 10b)."""
    a = [i.recovery_s for i in slow if i.recovery_s is not None]
    b = [i.recovery_s for i in fast if i.recovery_s is not None]
    return [x - y for x in a for y in b]


def spurious_triggers(raw: Raw, *, within_s: float = 2.0) -> int:
    """Monitor triggers not within ``within_s`` after a degradation (false alarms)."""
    starts = [imp["at_s"] for imp in raw["impulses"]]
    return sum(
        1
        for events in raw["monitors"].values()
        for e in events
        if e["kind"] == "trigger" and not any(a <= e["t_s"] < a + within_s for a in starts)
    )
