"""The monitor loop: sample at a steady rate, feed the detector, fire the failover.

Each sample and each trigger is reported as one JSON line (``Event``), so experiments can
read when the threshold was first crossed, when the trigger fired and when the service
answered. The failover call runs in this loop: sampling pauses while it runs (tens of ms).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

from services.reroute.monitor.detector import Detector


class Sampler(Protocol):
    def sample(self) -> float:
        """One measurement (NaN: none this time)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: str  # sample | trigger | failover | error
    t: float  # time.time() of the event
    value: float | None = None
    crossed_at: float | None = None  # trigger: the first bad sample of the run
    reroute: str | None = None
    state: str | None = None
    api_ms: float | None = None
    error: str | None = None

    def to_json(self) -> str:
        """The event as one JSON object (NaN as null, unset fields left out)."""
        data = {k: v for k, v in asdict(self).items() if v is not None}
        if isinstance(self.value, float) and math.isnan(self.value):
            data["value"] = None  # JSON has no NaN: no answer
        return json.dumps(data)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failover:
    """What the trigger did: the reroute's id and final state."""

    reroute: str
    state: str


def run(
    sampler: Sampler,
    detector: Detector,
    fire: Callable[[int], Failover],
    emit: Callable[[Event], None],
    *,
    rate_hz: float,
    duration_s: float | None = None,
    once: bool = False,
    verbose: bool = False,
    clock: Callable[[], float] = time.time,
) -> int:
    """Monitor until ``duration_s`` passes (or the first failover with ``once``). ``fire``
    gets the trigger's sequence number (for the idempotency key). Returns the failovers."""
    period = 1.0 / rate_hz
    start = clock()
    fired = 0
    next_at = time.monotonic()
    while duration_s is None or clock() - start < duration_s:
        value = sampler.sample()
        now = clock()
        if verbose:
            emit(Event(kind="sample", t=now, value=value))
        if detector.observe(value, now):
            fired += 1
            emit(Event(kind="trigger", t=now, value=value, crossed_at=detector.crossed_at))
            emit(_failover(fire, fired, clock))
            if once:
                break
        next_at += period
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # a slow sample (timeout): do not try to catch up
    return fired


def _failover(fire: Callable[[int], Failover], n: int, clock: Callable[[], float]) -> Event:
    t0 = time.perf_counter()
    try:
        done = fire(n)
    except Exception as exc:  # reported, and monitoring goes on
        ms = (time.perf_counter() - t0) * 1000
        return Event(kind="error", t=clock(), api_ms=ms, error=f"{type(exc).__name__}: {exc}")
    ms = (time.perf_counter() - t0) * 1000
    return Event(kind="failover", t=clock(), reroute=done.reroute, state=done.state, api_ms=ms)
