"""The impulse-response analysis (seed 000 V) on synthetic trains, and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments import impulse_analysis as ia
from experiments.impulse_response import ImpulseResponse, by_config
from tests.unit.experiments.helpers import opts, report_text


def _train(dips: list[tuple[float, float]], *, n_samples: int = 160) -> dict[str, Any]:
    """100 Mbit/s, a degradation every 4 s from 3 s; each ``(zero_s, ramp_s)``: nothing
    gets through for zero_s, then a linear ramp back to B over ramp_s."""
    dt, series = 0.1, [100.0] * n_samples
    impulses: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for i, (zero, ramp) in enumerate(dips):
        at = 3.0 + 4 * i
        impulses.append({"at_s": at, "inject_ms": 2.0})
        events += [{"kind": "trigger", "t_s": at + 0.05}, {"kind": "failover", "t_s": at + 0.1}]
        for k in range(n_samples):
            t = (k + 0.5) * dt - at
            if 0 <= t < zero:
                series[k] = 0.0
            elif zero <= t < zero + ramp:
                series[k] = 100.0 * (t - zero) / ramp
    return {
        "topology": "two-site-dpctl", "degradation": "path", "extra_flows": 0, "n": len(dips),
        "period_s": 4.0, "interval_s": dt, "series_mbps": series, "impulses": impulses,
        "monitors": {"h1": events, "h2": events},
    }  # fmt: skip


def test_responses_are_aligned_at_the_degradation_and_recover() -> None:
    raw = _train([(0.5, 1.0), (1.0, 1.0)])
    assert ia.baseline_mbps(raw) == 100.0
    first, second = ia.impulses(raw)
    assert first.times[0] == pytest.approx(-ia.PRE_S + 0.05)
    at_zero = first.times.index(0.05)
    assert first.r[at_zero - 1] == 0.0 and first.r[at_zero] == 1.0  # B - T(t), normalized
    assert first.r[-1] == 0.0  # back to B before the next degradation
    assert first.recovery_s is not None and second.recovery_s is not None
    assert 1.2 <= first.recovery_s <= 1.5 and second.recovery_s == pytest.approx(
        first.recovery_s + 0.5
    )
    assert first.trigger_s == pytest.approx(0.05) and first.failover_s == pytest.approx(0.1)
    assert ia.relative_delays([second], [first]) == [pytest.approx(0.5)]


def test_no_dip_is_no_recovery_time_and_no_return_is_none() -> None:
    assert ia.recovery_s([-0.1, 0.0, 0.1, 0.2], [0.0, 0.05, 0.0, 0.0]) == 0.0
    assert ia.recovery_s([-0.1, 0.0, 0.1, 0.2, 0.3], [0.0, 1.0, 1.0, 0.5, 0.0]) is None


def test_report_covers_every_backend_in_raw(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    trains_made = (
        ("dpctl-rtt-01", 0.3), ("odl-rtt-01", 2.5), ("dpctl-path-01", 0.3), ("odl-path-01", 1.3),
    )  # fmt: skip
    for key, zero in trains_made:
        doc = _train([(zero, 0.5)] * 3, n_samples=160) | {"degradation": key.split("-")[1]}
        (tmp_path / "raw" / f"{key}.json").write_text(json.dumps(doc))
    exp = ImpulseResponse()
    trains = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "raw").glob("*.json")}
    assert list(by_config(trains)) == ["dpctl-path", "dpctl-rtt", "odl-path", "odl-rtt"]
    text = report_text(exp, tmp_path)
    assert "| dpctl-path | A |" in text and "| odl-rtt | D |" in text
    assert "| odl-path | C |" in text
    # ODL - dpctl over independent impulses (3 and 3 each: no interval, not [2.20, 2.20])
    assert "| rtt: ODL (D) - dpctl (-) | 3 / 3 | +2.20 (n = 3 / 3: no interval) |" in text
    assert "| path: ODL (C) - dpctl (A) | 3 / 3 | +1.00 (n = 3 / 3: no interval) |" in text
    assert "n < 10" in text  # said in words
    assert "ODL restored TCP later than dpctl by +1.00 s (n = 3 / 3: no interval)" in text
    for png in (
        "impulse_single",
        "impulse_means",
        "impulse_relative_delays",
    ):
        assert (tmp_path / f"{png}.png").stat().st_size > 5_000


def test_plan_names_a_train_per_configuration() -> None:
    exp = ImpulseResponse()
    keys = [r.key for r in exp.plan(opts("impulse-response", backend="dpctl", quick=True))]
    assert keys == ["dpctl-path-01", "dpctl-rtt-01"]
    full = exp.plan(opts("impulse-response", "runs=2", backend="odl"))
    assert [r.key for r in full] == ["odl-path-01", "odl-path-02", "odl-rtt-01", "odl-rtt-02"]
    assert full[2].params == {"degradation": "rtt", "extra_flows": 0, "n": 10, "period_s": 15.0}
    seeds = exp.plan(
        opts("impulse-response", "period_s=50", "period_s_by_backend={}",
             "n_by_config={dpctl-path: 100}", "max_n=100", backend="dpctl")
    )  # fmt: skip
    assert [(r.key, r.params["n"], r.params["period_s"]) for r in seeds] == [
        ("dpctl-path-01", 100, 50.0),
        ("dpctl-rtt-01", 10, 50.0),
    ]
    local = exp.plan(opts("impulse-response", backend="odl-local", quick=True))
    assert [r.key for r in local] == ["odl-local-path-01"]


def test_dips_between_the_degradations_are_counted_with_the_retransmissions_behind_them(
    tmp_path: Path,
) -> None:
    """The periodic spikes of the single responses: samples below half of B outside every
    response, each counted once, and whether iperf3 retransmitted there."""
    raw = _train([(0.5, 1.0), (0.5, 1.0)])
    series = raw["series_mbps"]
    resent = [0] * len(series)
    for k, lost in ((22, True), (55, False), (57, True)):  # 2.25 s, 5.55 s, 5.75 s
        series[k] = 20.0
        if lost:
            resent[k] = 3
    assert [round(t, 2) for t, _ in ia.train_dips(ia.impulses(raw))] == [-0.75, 2.55, 2.75]
    raw["retransmits_series"] = resent
    found = ia.train_dips(ia.impulses(raw))
    assert [(round(t, 2), n) for t, n in found] == [(-0.75, 3), (2.55, 0), (2.75, 3)]
    # the degradation's own dip (nothing gets through for 0.5 s) is not one of them
    assert all(t < -ia.DIP_MARGIN_S or t > 1.0 for t, _ in found)
    (tmp_path / "raw").mkdir()
    doc = raw | {"key": "dpctl-path-01", "params": {}, "backend": "dpctl"}
    (tmp_path / "raw" / "dpctl-path-01.json").write_text(json.dumps(doc))
    text = report_text(ImpulseResponse(), tmp_path)
    assert text.split("| dpctl-path |")[1].split("\n")[0].endswith("| 3 (2) |")
    assert "*dips*: 100 ms samples below half of B" in text
