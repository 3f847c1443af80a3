"""The mptcp experiment's plan, goodput phases, report and skip, without a fabric (the
fabric run is tests/e2e/test_experiments.py::test_mptcp_quick)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from experiments import mptcp
from experiments.mptcp import Mptcp, phase_mbps, stalled_ms
from experiments.runner import Options, Skipped


def _raw(case: str, proto: str, during: float) -> dict[str, Any]:
    # 6 s at 100 ms: 40 Mbit/s, `during` from 3.0 to 4.0 s, 40 again from 4.0 s
    series = [40.0] * 30 + [during] * 10 + [40.0] * 20
    return {
        "key": f"{case}-{proto}-01",
        "params": {"case": case, "proto": proto},
        "proto": proto,
        "subflows": 2 if proto == "mptcp" else 1,
        "rate_mbps": 40,
        "window_s": 0.1,
        "series_mbps": series,
        "down_s": 3.0,
        "up_s": 4.0,
        "stream_s": 6.0,
    }


def test_plan_has_every_case_for_both_protocols() -> None:
    keys = [r.key for r in Mptcp().plan(Options(quick=True))]
    assert keys == [
        f"{c}-{p}-01" for c in ("fail-10s", "fail-100ms", "mbb-reroute") for p in ("mptcp", "tcp")
    ]
    full = Mptcp().plan(Options())
    assert len(full) == 3 * 2 * mptcp.FULL_RUNS
    assert {r.params["stream_s"] for r in full if r.params["case"] == "fail-10s"} == {30.0}


def test_goodput_phases() -> None:
    r = _raw("fail-10s", "mptcp", 12.0)
    assert phase_mbps(r, "before") == pytest.approx(40.0)
    assert phase_mbps(r, "during") == pytest.approx(12.0)
    assert phase_mbps(r, "after") == pytest.approx(40.0)
    assert stalled_ms(r) == pytest.approx(1000.0)
    assert stalled_ms(_raw("fail-10s", "mptcp", 25.0)) == 0.0


def test_report_has_a_table_and_plot_per_case(tmp_path: Path) -> None:
    raws = {
        f"{c}-{p}-01": _raw(c, p, 20.0 if p == "mptcp" else 0.0)
        for c in ("fail-10s", "fail-100ms", "mbb-reroute")
        for p in ("mptcp", "tcp")
    }
    text = Mptcp().report(Options(quick=True), raws, tmp_path)
    for case in ("fail-10s", "fail-100ms", "mbb-reroute"):
        assert f"## {case}" in text and (tmp_path / f"mptcp_{case}.png").exists()
    assert "goodput during the failure (Mbit/s)" in text


def test_without_mptcp_the_session_is_skipped_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mptcp, "mptcp_missing", lambda: "the kernel has no MPTCP")
    with pytest.raises(Skipped, match="the kernel has no MPTCP"):
        Mptcp().session(Options(quick=True), print, seed=0)
