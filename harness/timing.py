"""Timing a forward call the same way for every backend.

GPU: CUDA events around each sample after a warm-up; CPU: wall clock around a synchronized
call. Sampling stops when the estimate is stable (relative half-width of the median's
confidence interval under ``target_rel_noise``), or at ``max_samples`` / ``max_time_s``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch


@dataclass
class TimingOptions:
    warmup: int = 3
    min_samples: int = 10
    max_samples: int = 300
    target_rel_noise: float = 0.01
    max_time_s: float = 2.0

    @classmethod
    def for_device(cls, device: torch.device) -> "TimingOptions":
        if device.type == "cpu":
            return cls(warmup=1, min_samples=3, max_samples=20, target_rel_noise=0.05, max_time_s=0.5)
        return cls()


def median_ci(samples: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median (order statistics)."""
    s = sorted(samples)
    n = len(s)
    if n < 3:
        return s[0], s[-1]
    half = z * (n ** 0.5) / 2
    lo = max(0, int((n / 2) - half))
    hi = min(n - 1, int(-(-((n / 2) + half) // 1)))
    return s[lo], s[hi]


def summarize(samples_s: list[float]) -> dict:
    us = [x * 1e6 for x in samples_s]
    q = statistics.quantiles(us, n=4) if len(us) >= 2 else [us[0]] * 3
    lo, hi = median_ci(us)
    med = statistics.median(us)
    return {
        "median_us": med,
        "min_us": min(us),
        "mean_us": statistics.fmean(us),
        "stdev_us": statistics.stdev(us) if len(us) > 1 else 0.0,
        "iqr_us": q[2] - q[0],
        "ci_low_us": lo,
        "ci_high_us": hi,
        "rel_ci_half_width": (hi - lo) / (2 * med) if med else 0.0,
        "samples": len(us),
    }


def time_callable(fn: Callable[[], object], device: torch.device, opts: TimingOptions) -> dict:
    """Time ``fn`` (which launches the work) and return summary statistics in microseconds."""
    cuda = device.type == "cuda"
    for _ in range(opts.warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
    samples: list[float] = []
    start_all = time.perf_counter()
    while True:
        if cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        n = len(samples)
        if n >= opts.max_samples or time.perf_counter() - start_all > opts.max_time_s and n >= opts.min_samples:
            break
        if n >= opts.min_samples:
            s = summarize(samples)
            if s["rel_ci_half_width"] <= opts.target_rel_noise:
                break
    out = summarize(samples)
    out["method"] = "cuda_event" if cuda else "wall_clock"
    out["options"] = asdict(opts)
    return out
