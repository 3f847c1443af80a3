"""``reroute experiment full``: the plan at the seeds' sample sizes, its estimate, and what it
refuses (no fabric: the dry run and the checks before anything runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from experiments import full
from experiments.runner import Progress, write_raw
from services.reroute.errors import ConfigError


@contextmanager
def _quiet(total: int, done: int) -> Iterator[Progress]:
    raise AssertionError("nothing runs in these tests")
    yield  # pragma: no cover


def _planned(quick: bool = False, sets: list[str] | None = None) -> dict[str, int]:
    plan = full._planned(full.load_plan(), Path("/nonexistent"), quick=quick, sets=sets or [],
                         seed=0)  # fmt: skip
    counts: dict[str, int] = {}
    for p in plan:
        key = f"{p.entry.experiment}/{p.entry.backend or '-'}"
        counts[key] = counts.get(key, 0) + len(p.reps)
    return counts


def test_the_plan_runs_the_seeds_sample_sizes() -> None:
    n = _planned()
    assert n["ost-vs-mbb/ovs"] == 50 * 2 + 20 * 2  # seed 003: 50 + 50; and beside the others
    assert n["bandwidth-steering/-"] == 50 * 2
    assert n["rto-sweep/-"] == 5 + 5 + 10 + 5 + 5  # 200 and MBB beside the seed's 5/10/5
    assert n["switching-delay/dpctl"] == 50 * 2  # Table 4.5: 50 per strategy
    assert n["mptcp/-"] == 3 * 2 * 10 and n["mptcp-bdp/-"] == 2 * 2 * 10
    impulse = full._planned(full.load_plan(), Path("/nonexistent"), quick=False, sets=[], seed=0)
    trains = {r.key: r.params for p in impulse if p.entry.experiment == "impulse-response"
              for r in p.reps}  # fmt: skip
    pieces = [trains[f"dpctl-path-{i:02d}"] for i in (1, 2, 3, 4)]  # 100 as 4 x 25 (max_n)
    assert pieces == [{"degradation": "path", "extra_flows": 0, "n": 25, "period_s": 50.0,
                       "piece_of": 100}] * 4  # fmt: skip
    assert "dpctl-path-05" not in trains
    assert sum(trains[f"odl-path-{i:02d}"]["n"] for i in (1, 2, 3, 4)) == 100
    assert trains["odl-rtt-01"]["n"] == 10 and "piece_of" not in trains["odl-rtt-01"]
    assert {p["period_s"] for p in trains.values()} == {50.0}
    assert "odl-local-path-01" in trains  # configuration B


def test_quick_and_a_global_set_shrink_it_for_a_smoke_run() -> None:
    n = _planned(quick=True, sets=["runs=1"])
    assert n["ost-vs-mbb/ovs"] == 2 + 2 and n["rto-sweep/-"] == 5
    assert sum(n.values()) < 70


def test_the_estimate_adds_the_repetitions_lengths(capsys: pytest.CaptureFixture[str]) -> None:
    code = full.run_all(full.load_plan(), Path("/nonexistent"), quick=False, sets=[], seed=0,
                        dry_run=True, allow_dirty=False, progress=_quiet)  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "total estimated: " in out and " h " in out
    assert full.rep_seconds("impulse-response", {"n": 100, "period_s": 50}, {}) > 5000
    assert full.rep_seconds("ost-vs-mbb", {}, {"tcp_s": 7}) == 7 + full.OVERHEAD_S["ost-vs-mbb"]


def test_a_plan_file_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "plan.yaml"
    bad.write_text("entries:\n  - {experiment: ost-vs-mbb, runs: 3}\n")
    with pytest.raises(ConfigError, match="entry 1: keys are"):
        full.load_plan(bad)
    bad.write_text("entries:\n  - {experiment: nope}\n")
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        full.load_plan(bad)


def test_results_of_another_commit_are_not_mixed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(full, "git_head", lambda: "abc1234")
    (tmp_path / "ost-vs-mbb" / "raw").mkdir(parents=True)
    write_raw(tmp_path / "ost-vs-mbb", "bbm-01", {"git": "0ld0ld0"})
    with pytest.raises(ConfigError, match="runs of commit"):
        full._check_commit(tmp_path, allow_dirty=False)
    assert full._check_commit(tmp_path, allow_dirty=True) == "abc1234"
    monkeypatch.setattr(full, "git_head", lambda: "abc1234-dirty")
    with pytest.raises(ConfigError, match="the tree is modified"):
        full._check_commit(tmp_path / "new", allow_dirty=False)


def test_list_says_how_long_each_experiment_runs_and_what_quick_means(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    from experiments import catalog, cli

    assert cli._list(argparse.Namespace()) == 0
    said = capsys.readouterr().out
    lengths = [line for line in said.splitlines() if "on its first backend" in line]
    assert len(lengths) == len(catalog.EXPERIMENTS)
    assert all("with --quick)" in line and "about " in line for line in lengths)
    assert "--quick: the short scale CI runs" in said
