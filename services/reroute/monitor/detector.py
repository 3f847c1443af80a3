"""When a monitored value means "degraded": thresholds with hysteresis and hold-down. Pure.

A ``Detector`` fires once when ``samples`` consecutive values are beyond ``trigger``
(above it for rtt and loss, below it for throughput). It then holds: it cannot fire again
until ``hold_down_s`` has passed AND a value is back on the good side of ``clear`` (the
hysteresis band between ``clear`` and ``trigger`` keeps a flapping value from firing
twice). One degradation, one trigger, one reroute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Sense(StrEnum):
    HIGH_IS_BAD = "high"  # rtt, loss
    LOW_IS_BAD = "low"  # throughput


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    trigger: float
    clear: float
    samples: int = 3
    hold_down_s: float = 5.0
    sense: Sense = Sense.HIGH_IS_BAD

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("samples must be at least 1")
        if self.hold_down_s < 0:
            raise ValueError("hold_down_s must not be negative")
        wrong = (
            self.clear > self.trigger
            if self.sense is Sense.HIGH_IS_BAD
            else (self.clear < self.trigger)
        )
        if wrong:
            raise ValueError(
                f"clear ({self.clear}) must be on the good side of trigger ({self.trigger})"
            )

    def bad(self, value: float) -> bool:
        """NaN (no answer) is bad."""
        if math.isnan(value):
            return True
        return value > self.trigger if self.sense is Sense.HIGH_IS_BAD else value < self.trigger

    def good(self, value: float) -> bool:
        """``value`` is back on the good side of the clear threshold (NaN never is)."""
        if math.isnan(value):
            return False
        return value <= self.clear if self.sense is Sense.HIGH_IS_BAD else value >= self.clear


class Detector:
    def __init__(self, thresholds: Thresholds) -> None:
        self.t = thresholds
        self.run = 0  # consecutive bad samples
        self.fired_at: float | None = None  # holding since (None: armed)
        self.crossed_at: float | None = None  # first bad sample of the current run

    def observe(self, value: float, now: float) -> bool:
        """Feed one sample taken at ``now``; True exactly when this sample fires."""
        if self.fired_at is not None:
            if now - self.fired_at >= self.t.hold_down_s and self.t.good(value):
                self.fired_at = None  # re-armed
            self.run = 0
            return False
        if not self.t.bad(value):
            self.run, self.crossed_at = 0, None
            return False
        if self.run == 0:
            self.crossed_at = now
        self.run += 1
        if self.run >= self.t.samples:
            self.fired_at, self.run = now, 0
            return True
        return False
