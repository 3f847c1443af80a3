"""Monitor trigger logic: hysteresis, consecutive samples, hold-down; one degradation, one
trigger."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.reroute.monitor.detector import Detector, Sense, Thresholds

RTT = Thresholds(trigger=10.0, clear=5.0, samples=3, hold_down_s=1.0)


def fires(d: Detector, values: list[float], dt: float = 0.05, t0: float = 0.0) -> list[int]:
    return [i for i, v in enumerate(values) if d.observe(v, t0 + i * dt)]


def test_fires_after_consecutive_bad_samples_only() -> None:
    d = Detector(RTT)
    assert fires(d, [1, 12, 1, 12, 12, 1, 12, 12, 12]) == [8]
    assert d.crossed_at == pytest.approx(6 * 0.05)


def test_one_degradation_one_trigger_then_rearm_after_hold_down_and_clear() -> None:
    d = Detector(RTT)
    bad_for_3s = [30.0] * 60
    assert fires(d, bad_for_3s) == [2]
    # still bad -> never fires again; good but within hysteresis band -> stays held
    assert fires(d, [30.0] * 20 + [7.0] * 40, t0=3.0) == []
    assert fires(d, [2.0] + [30.0] * 3, t0=6.0) == [3]


def test_no_answer_counts_as_bad() -> None:
    d = Detector(RTT)
    assert fires(d, [math.nan] * 3) == [2]


def test_throughput_low_is_bad() -> None:
    d = Detector(Thresholds(trigger=50e6, clear=80e6, samples=2, sense=Sense.LOW_IS_BAD))
    assert fires(d, [90e6, 10e6, 10e6, 10e6]) == [2]


@pytest.mark.parametrize(
    "kw",
    [
        {"trigger": 5.0, "clear": 10.0},
        {"trigger": 10.0, "clear": 5.0, "samples": 0},
        {"trigger": 50.0, "clear": 10.0, "sense": Sense.LOW_IS_BAD},
    ],
)
def test_bad_thresholds_are_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        Thresholds(**kw)


@given(st.lists(st.floats(min_value=0, max_value=100), max_size=300))
def test_fires_at_most_once_per_hold_down(values: list[float]) -> None:
    d = Detector(RTT)
    times = [i * 0.05 for i in fires(d, values)]
    assert all(b - a >= RTT.hold_down_s for a, b in itertools.pairwise(times))
