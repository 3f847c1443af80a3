"""The experiments' statistics: quantiles, bootstrap intervals, summaries. Pure."""

from __future__ import annotations

import statistics

import pytest

from experiments import markdown as md
from experiments.stats import bootstrap_ci, difference_ci, mean_band, percentile, summarize


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([1, 2, 3, 4, 5], 0.95) == pytest.approx(4.8)
    assert percentile([7.0], 0.95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_runs() -> None:
    few = [100.0, 120.0, 90.0, 110.0, 105.0]
    many = few * 20
    lo_few, hi_few = bootstrap_ci(few)
    lo_many, hi_many = bootstrap_ci(many)
    assert lo_few < statistics.fmean(few) < hi_few
    assert lo_many < statistics.fmean(many) < hi_many
    assert hi_many - lo_many < hi_few - lo_few
    assert bootstrap_ci(few) == bootstrap_ci(few)  # seeded: the report does not change


def test_below_five_runs_there_is_no_interval_and_the_values_are_given() -> None:
    s = summarize([42.0])
    assert (s.n, s.mean, s.std, s.median, s.p95, s.ci_low, s.ci_high) == (1, 42, 0, 42, 42, None,
                                                                          None)  # fmt: skip
    assert s.cell(0) == "42 (values 42)"  # not "42 [42, 42]"
    four = summarize([1149.2, 1150.0, 1200.0, 1100.0])
    assert four.ci_low is None and four.cell(1) == "1149.8 (values 1149.2, 1150.0, 1200.0, 1100.0)"
    five = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert five.ci_low is not None and five.cell(1).startswith("3.0 [")
    # two samples: no interval unless both sides have five
    assert difference_ci([3.0] * 4, [1.0] * 9) == (2.0, None, None)
    d, low, high = difference_ci([3.0, 3.5, 2.5, 3.0, 3.0], [1.0, 1.5, 0.5, 1.0, 1.0])
    assert d == 2.0 and low is not None and high is not None and low <= 2.0 <= high
    assert md.difference_cell([3.0] * 4, [1.0] * 9) == "+2.00 (n = 4 / 9: no interval)"
    assert md.difference_cell([3.0] * 5, [1.0] * 5) == "+2.00 [+2.00, +2.00]"


def test_summary_of_runs() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.n == 5 and s.mean == 22 and s.median == 3 and s.maximum == 100
    assert s.p95 == pytest.approx(80.8)
    assert s.ci_low < s.mean < s.ci_high


def test_mean_band_keeps_the_shape_and_holds_the_mean() -> None:
    runs = [[0.0, 10.0, 0.0], [0.0, 20.0, 0.0], [0.0, 30.0, 0.0]]
    assert mean_band(runs, resamples=200) == ([0.0, 20.0, 0.0], None, None)  # 3 runs: no band
    runs += [[0.0, 15.0, 0.0], [0.0, 25.0, 0.0]]
    mean, low, high = mean_band(runs, resamples=200)
    assert mean == [0.0, 20.0, 0.0] and low is not None and high is not None
    assert low[0] == high[0] == 0.0
    assert low[1] < 20.0 < high[1]
