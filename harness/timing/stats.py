"""Statistics of per-call times: the median's distribution-free confidence interval (order
statistics) and the summary every timed row carries."""

from __future__ import annotations

import math
import statistics
from functools import lru_cache
from typing import Any, Sequence


@lru_cache(maxsize=8192)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int, float]:
    """0-based order-statistic indices (lo, hi) of a distribution-free CI of the median, and
    its exact coverage.

    With B ~ Binomial(n, 1/2), the interval [x_(l), x_(n+1-l)] (1-based) covers the true median
    with probability 1 - 2 P(B <= l-1); l is the largest rank keeping that >= ``confidence``.
    When even [min, max] falls short (n < 6 at 95%), that is returned with its lower coverage.
    """
    if n < 1:
        raise ValueError("no samples")
    half_alpha = (1.0 - confidence) / 2
    log_half_n = n * math.log(0.5)
    lgn = math.lgamma(n + 1)
    cum = 0.0
    k = -1  # largest k with P(B <= k) <= alpha/2
    cum_at_k = 0.0
    for j in range(0, n // 2 + 1):
        cum += math.exp(lgn - math.lgamma(j + 1) - math.lgamma(n - j + 1) + log_half_n)
        if cum > half_alpha:
            break
        k, cum_at_k = j, cum
    if k < 0:
        return 0, n - 1, max(0.0, 1.0 - 2.0 * math.exp(log_half_n))
    return k, n - 1 - k, 1.0 - 2.0 * cum_at_k


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics)."""
    s = sorted(samples)
    lo, hi, _ = median_ci_ranks(len(s), confidence)
    return s[lo], s[hi]


def rel_ci_half_width(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the width of the median's CI over the median: the noise the stopping rule targets."""
    s = sorted(samples)
    lo, hi, _ = median_ci_ranks(len(s), confidence)
    med = statistics.median(s)
    return (s[hi] - s[lo]) / (2 * abs(med)) if med else 0.0


def summarize(samples_us: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Median, min, max, mean, stdev, quartiles/IQR (linear interpolation, numpy's default) and
    the median's CI of per-call times in microseconds."""
    us = sorted(float(x) for x in samples_us)
    if not us:
        raise ValueError("no samples")
    n = len(us)
    lo, hi, coverage = median_ci_ranks(n, confidence)
    med = statistics.median(us)
    q1, _, q3 = statistics.quantiles(us, n=4, method="inclusive") if n >= 2 else (us[0], us[0], us[0])
    return {
        "median_us": med,
        "min_us": us[0],
        "max_us": us[-1],
        "mean_us": statistics.fmean(us),
        "stdev_us": statistics.stdev(us) if n > 1 else 0.0,
        "q1_us": q1,
        "q3_us": q3,
        "iqr_us": q3 - q1,
        "ci_low_us": us[lo],
        "ci_high_us": us[hi],
        "ci_coverage": coverage,
        "rel_ci_half_width": (us[hi] - us[lo]) / (2 * med) if med else 0.0,
        "samples": n,
    }

