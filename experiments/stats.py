"""Statistics of repeated runs: mean, std, median, p95 and bootstrap 95 % confidence
intervals (of a mean, of a difference of two independent means, of a mean curve). Pure and
deterministic (the resampling is seeded); numpy does the resampling, so a report of
thousands of runs still renders in seconds.

Below ``MIN_CI_N`` values (on either side of a difference, or curves of a band) there is no
interval: a bootstrap of 1-4 values resamples the same few numbers and its "interval" says
nothing (one value gives [v, v]). The summaries then carry the values themselves, for the
report to print.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_CI_N = 5  # fewer values than this: no interval, the values are given instead


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """One metric over ``n`` runs; ``ci_low``/``ci_high`` bound the mean (bootstrap, 95 %),
    None below ``MIN_CI_N`` runs (then ``values`` are what a table shows)."""

    n: int
    mean: float
    std: float
    median: float
    p95: float
    minimum: float
    maximum: float
    ci_low: float | None
    ci_high: float | None
    values: tuple[float, ...] = ()

    def cell(self, digits: int = 1) -> str:
        """``mean [ci_low, ci_high]`` for a table; below ``MIN_CI_N`` runs ``mean (values
        a, b, c)``, no interval."""
        f = f"{{:.{digits}f}}"
        if self.ci_low is None or self.ci_high is None:
            listed = ", ".join(f.format(v) for v in self.values)
            return f"{f.format(self.mean)} (values {listed})"
        return f"{f.format(self.mean)} [{f.format(self.ci_low)}, {f.format(self.ci_high)}]"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` (0..1) quantile, linear between the closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _tails(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_ci(
    values: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean: resample ``values`` with replacement
    ``resamples`` times, take the means' ``(1-confidence)/2`` and ``(1+confidence)/2``
    quantiles. One value gives the degenerate interval ``(v, v)``."""
    if not values:
        raise ValueError("bootstrap of no values")
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    return _tails(means, confidence)


def difference_ci(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float | None, float | None]:
    """mean(a) - mean(b) with the two-sample percentile bootstrap interval: ``a`` and ``b``
    resampled independently (each impulse counted once, unlike every cross pair). No
    interval (None, None) when either side has fewer than ``MIN_CI_N`` values."""
    if not a or not b:
        raise ValueError("difference of means needs values on both sides")
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if min(len(xa), len(xb)) < MIN_CI_N:
        return float(xa.mean() - xb.mean()), None, None
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, len(xa), size=(resamples, len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(resamples, len(xb)))].mean(axis=1)
    low, high = _tails(ma - mb, confidence)
    return float(xa.mean() - xb.mean()), low, high


def summarize(values: Sequence[float], *, seed: int = 0) -> Summary:
    """The :class:`Summary` of ``values`` (at least one)."""
    if not values:
        raise ValueError("summary of no values")
    low, high = bootstrap_ci(values, seed=seed) if len(values) >= MIN_CI_N else (None, None)
    return Summary(
        n=len(values),
        mean=statistics.fmean(values),
        std=statistics.stdev(values) if len(values) > 1 else 0.0,
        median=statistics.median(values),
        p95=percentile(values, 0.95),
        minimum=min(values),
        maximum=max(values),
        ci_low=low,
        ci_high=high,
        values=tuple(float(v) for v in values),
    )


def mean_band(
    series: Sequence[Sequence[float]], *, resamples: int = 500, seed: int = 0
) -> tuple[list[float], list[float] | None, list[float] | None]:
    """Point by point over equally long ``series``: the mean and its bootstrap 95 % band
    (the runs are resampled whole, so the band keeps each run's shape); no band (None,
    None) below ``MIN_CI_N`` series."""
    if not series:
        raise ValueError("band of no series")
    length = min(len(s) for s in series)
    data = np.asarray([list(s[:length]) for s in series], dtype=float)
    if len(data) < MIN_CI_N:
        return data.mean(axis=0).tolist(), None, None
    rng = np.random.default_rng(seed)
    n = len(data)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=resamples)  # resamples x runs
    boots = counts @ data / n  # resamples x length, without a resamples x runs x length copy
    low, high = np.quantile(boots, [0.025, 0.975], axis=0)
    return data.mean(axis=0).tolist(), low.tolist(), high.tolist()
