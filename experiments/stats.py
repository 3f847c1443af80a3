"""Statistics of repeated runs: mean, std, median, p95 and bootstrap 95 % confidence
intervals (of a mean, of a difference of two independent means, of a mean curve). Pure and
deterministic (the resampling is seeded); numpy does the resampling, so a report of
thousands of runs still renders in seconds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """One metric over ``n`` runs; ``ci_low``/``ci_high`` bound the mean (bootstrap, 95 %)."""

    n: int
    mean: float
    std: float
    median: float
    p95: float
    minimum: float
    maximum: float
    ci_low: float
    ci_high: float

    def cell(self, digits: int = 1) -> str:
        """``mean [ci_low, ci_high]`` for a table."""
        f = f"{{:.{digits}f}}"
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
) -> tuple[float, float, float]:
    """mean(a) - mean(b) with the two-sample percentile bootstrap interval: ``a`` and ``b``
    resampled independently (each impulse counted once, unlike every cross pair)."""
    if not a or not b:
        raise ValueError("difference of means needs values on both sides")
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, len(xa), size=(resamples, len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(resamples, len(xb)))].mean(axis=1)
    low, high = _tails(ma - mb, confidence)
    return float(xa.mean() - xb.mean()), low, high


def summarize(values: Sequence[float], *, seed: int = 0) -> Summary:
    """The :class:`Summary` of ``values`` (at least one)."""
    if not values:
        raise ValueError("summary of no values")
    low, high = bootstrap_ci(values, seed=seed)
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
    )


def mean_band(
    series: Sequence[Sequence[float]], *, resamples: int = 500, seed: int = 0
) -> tuple[list[float], list[float], list[float]]:
    """Point by point over equally long ``series``: the mean and its bootstrap 95 % band
    (the runs are resampled whole, so the band keeps each run's shape)."""
    if not series:
        raise ValueError("band of no series")
    length = min(len(s) for s in series)
    data = np.asarray([list(s[:length]) for s in series], dtype=float)
    rng = np.random.default_rng(seed)
    n = len(data)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=resamples)  # resamples x runs
    boots = counts @ data / n  # resamples x length, without a resamples x runs x length copy
    low, high = np.quantile(boots, [0.025, 0.975], axis=0)
    return data.mean(axis=0).tolist(), low.tolist(), high.tolist()
