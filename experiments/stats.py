"""Statistics of repeated runs: mean, std, median, p95 and a bootstrap 95 % confidence interval
of the mean. Pure, and deterministic (the bootstrap's resampling is seeded).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

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
    rng = random.Random(seed)
    n = len(values)
    means = [sum(rng.choices(values, k=n)) / n for _ in range(resamples)]
    tail = (1 - confidence) / 2
    return percentile(means, tail), percentile(means, 1 - tail)


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
    rng = random.Random(seed)
    boots = []
    for _ in range(resamples):
        pick = rng.choices(series, k=len(series))
        boots.append([statistics.fmean(s[i] for s in pick) for i in range(length)])
    mean = [statistics.fmean(s[i] for s in series) for i in range(length)]
    low = [percentile([b[i] for b in boots], 0.025) for i in range(length)]
    high = [percentile([b[i] for b in boots], 0.975) for i in range(length)]
    return mean, low, high
