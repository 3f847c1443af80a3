"""The experiments' parameter files: defaults, --quick, --config FILE and --set, strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import catalog
from experiments.config import default_file, parse_set, resolve
from experiments.impulse_response import ImpulseConfig
from experiments.mptcp import MptcpConfig
from experiments.ost_vs_mbb import OstConfig
from experiments.rto_sweep import RtoConfig
from experiments.runner import Options
from services.reroute.errors import ConfigError


def test_every_experiment_has_a_parameter_file_its_model_accepts_at_both_scales() -> None:
    for name, exp in catalog.EXPERIMENTS.items():
        assert default_file(name).exists(), name
        full = resolve(name, exp.config_model)
        quick = resolve(name, exp.config_model, quick=True)
        assert full.runs >= quick.runs, name
        for cfg in (full, quick):  # both plan something
            assert exp.plan(Options(config=cfg, backend=exp.backends[0])), name


def test_the_seeds_window_at_full_scale_and_a_short_one_at_quick_scale() -> None:
    """Seed 003 Tables 4.2 / 4.7 and 4.2.2: a 20 s stream, the switch at T = 10 s (the loss
    ratio over the whole stream); --quick keeps the short stream of the e2e tests."""
    for name in ("ost-vs-mbb", "rto-sweep", "bandwidth-steering"):
        model = catalog.EXPERIMENTS[name].config_model
        full, quick = resolve(name, model), resolve(name, model, quick=True)
        assert (full.tcp_s, full.switch_at_s) == (20, 10), name  # type: ignore[attr-defined]
        assert full.probe_s > full.switch_at_s + 3, name  # type: ignore[attr-defined]
        assert (quick.tcp_s, quick.switch_at_s) == (7, 1), name  # type: ignore[attr-defined]
    full = resolve("ost-vs-mbb", OstConfig)
    assert (full.runs, full.probe_pps, full.tcp_mbps) == (20, 5000, 100)
    quick = resolve("ost-vs-mbb", OstConfig, quick=True)
    changed = {"runs", "tcp_s", "switch_at_s", "probe_s"}
    assert quick.runs == 3 and quick.model_dump(exclude=changed) == full.model_dump(exclude=changed)
    rto = resolve("rto-sweep", RtoConfig)
    assert rto.rto_min_ms == [200, 800, 900, 2000] and rto.runs == 5


def test_a_switch_outside_the_stream_is_refused() -> None:
    with pytest.raises(ConfigError, match="switch_at_s"):
        resolve("ost-vs-mbb", OstConfig, sets=["switch_at_s=19.5"])
    with pytest.raises(ConfigError, match="must outlast"):
        resolve("ost-vs-mbb", OstConfig, sets=["probe_s=5"])


def test_set_takes_yaml_values_at_dotted_keys() -> None:
    assert parse_set("runs=5") == (["runs"], 5)
    assert parse_set("rates_mbps=[50, 100]") == (["rates_mbps"], [50, 100])
    assert parse_set("cases.fail-10s.fail_s=2.5") == (["cases", "fail-10s", "fail_s"], 2.5)
    cfg = resolve("rto-sweep", RtoConfig, sets=["runs_at={900: 10}", "lock=700"])
    assert cfg.runs_at == {900: 10} and cfg.lock == 700
    # a dotted key changes one value; a whole mapping replaces the mapping
    one = resolve("mptcp", MptcpConfig, sets=["cases.fail-10s.fail_s=5"])
    assert one.cases["fail-10s"].fail_s == 5 and set(one.cases) == {"fail-10s", "fail-100ms",
                                                                      "mbb-reroute"}  # fmt: skip
    only = resolve("mptcp", MptcpConfig, sets=["cases={x: {stream_s: 5, fail_at_s: 1}}"])
    assert set(only.cases) == {"x"}
    none = resolve("impulse-response", ImpulseConfig, sets=["period_s_by_backend={}"])
    assert none.period_s_by_backend == {}
    for bad in ("runs", "=5", "a..b=1", "x=[1"):
        with pytest.raises(ConfigError, match="--set"):
            parse_set(bad)


def test_a_config_file_overrides_a_subset_and_says_which_experiment_it_is_for(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("experiment: ost-vs-mbb\ntcp_mbps: 50\nquick: {runs: 2}\n")
    cfg = resolve("ost-vs-mbb", OstConfig, file=mine, quick=True, sets=["probe_s=3"])
    assert (cfg.tcp_mbps, cfg.runs, cfg.probe_s, cfg.tcp_s) == (50, 2, 3.0, 7)
    other = tmp_path / "other.yaml"
    other.write_text("experiment: rto-sweep\nruns: 2\n")
    with pytest.raises(ConfigError, match="is for experiment 'rto-sweep'"):
        resolve("ost-vs-mbb", OstConfig, file=other)
    with pytest.raises(ConfigError, match="cannot read"):
        resolve("ost-vs-mbb", OstConfig, file=tmp_path / "missing.yaml")


def test_every_problem_is_named_with_the_nearest_known_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("tcp_mpbs: 50\nruns: 0\nprobe_pps: fast\n")
    with pytest.raises(ConfigError) as err:
        resolve("ost-vs-mbb", OstConfig, file=bad)
    text = str(err.value)
    assert str(bad) in text and "3 problem(s)" in text
    assert "tcp_mpbs: unknown key (did you mean `tcp_mbps`?)" in text
    assert "runs: Input should be greater than or equal to 1" in text
    assert "probe_pps:" in text
    dup = tmp_path / "dup.yaml"
    dup.write_text("runs: 1\nruns: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'runs'"):
        resolve("ost-vs-mbb", OstConfig, file=dup)
