"""Timing options: what the loop may do (samples, budget, mode, graphs, flush) and the device's
defaults, validated once with one clear message."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

MODES = ("hot", "cold")
CPU_CLOCKS = ("wall", "process")  # CPU timing: elapsed time, or CPU time of this process (all threads)
FLUSH_METHODS = ("auto", "read", "write")  # auto: the method the probe verifies here (read preferred)


@dataclass
class TimingOptions:
    warmup: int = 3
    min_samples: int = 10
    max_samples: int = 500
    target_rel_noise: float = 0.01  # relative half-width of the median's CI
    max_time_s: float = 2.0  # sampling budget per cell (warm-up and capture not included)
    # Budget of an eagerly timed cell whose launches were not hidden behind the hold kernel
    # (host time in every sample; compare's noise-dominated "host-bound" class, not gated):
    # more samples do not make such a row repeatable (harness.timing.stopping, "host_bound").
    host_bound_max_time_s: float = 0.25
    mode: str = "hot"  # "hot" (L2 as the previous call left it) or "cold" (flushed per sample)
    cuda_graph: bool = True  # use CUDA graphs where the backend allows them
    confidence: float = 0.95
    min_sample_us: float = 200.0  # hot mode batches calls per sample until a sample lasts this long
    max_calls_per_sample: int = 64
    hide_launch: bool = True  # hold the stream with a spin kernel while the host enqueues
    max_hold_ms: float = 50.0
    flush_method: str = "auto"  # cold mode: "auto" (probe both, use a verified one), "read" or "write"
    keep_raw: bool = False  # raw per-sample times in the row (off: keep rows small)
    stop_criterion: str = "noise"  # which StoppingCriterion ends sampling (harness.timing.stopping)
    # CPU only. "process" counts the CPU time the call used, not time spent waiting for a core:
    # on a shared machine wall-clock medians move several-fold between runs, CPU time far less.
    cpu_clock: str = "wall"
    energy_window_s: float = 0.1  # NVML energy: back-to-back calls for this long after timing (0: off)

    @classmethod
    def for_device(cls, device: torch.device, **overrides: Any) -> "TimingOptions":
        """Defaults for the device (CPU: looser, shorter), then ``overrides`` (None = keep)."""
        if device.type == "cpu":
            base = cls(warmup=1, min_samples=3, max_samples=20, target_rel_noise=0.05, max_time_s=0.5)
        else:
            base = cls()
        given = {k: v for k, v in overrides.items() if v is not None}
        opts = replace(base, **given)
        # One bound given alone moves the other default out of its way.
        if "min_samples" in given and "max_samples" not in given and opts.max_samples < opts.min_samples:
            opts.max_samples = opts.min_samples
        if "max_samples" in given and "min_samples" not in given and opts.min_samples > opts.max_samples:
            opts.min_samples = opts.max_samples
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ValueError with one clear message for settings that cannot work."""
        if self.mode not in MODES:
            raise ValueError(f"timing mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.cpu_clock not in CPU_CLOCKS:
            raise ValueError(f"CPU clock {self.cpu_clock!r}: expected one of {', '.join(CPU_CLOCKS)}")
        if self.flush_method not in FLUSH_METHODS:
            raise ValueError(f"flush method {self.flush_method!r}: expected one of {', '.join(FLUSH_METHODS)}")
        if not 0 < self.target_rel_noise < 1:
            raise ValueError(f"target noise {self.target_rel_noise}: expected a fraction in (0, 1), e.g. 0.01 for 1%")
        if not self.energy_window_s >= 0:
            raise ValueError(f"energy window {self.energy_window_s}: must be 0 (off) or positive seconds")
        if self.max_samples < 1:  # before min: a small max alone pulls min down with it
            raise ValueError(f"max samples {self.max_samples}: must be at least 1")
        if self.min_samples < 1:
            raise ValueError(f"min samples {self.min_samples}: must be at least 1")
        if self.max_samples < self.min_samples:
            raise ValueError(f"max samples {self.max_samples} is below min samples {self.min_samples}")
        if not self.max_time_s > 0:
            raise ValueError(f"max time {self.max_time_s}: must be positive seconds")
        if not self.host_bound_max_time_s > 0:
            raise ValueError(f"host-bound time {self.host_bound_max_time_s}: must be positive seconds")
        if self.warmup < 0:
            raise ValueError(f"warm-up {self.warmup}: must not be negative")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence {self.confidence}: expected a fraction in (0, 1)")
        from harness.timing.stopping import STOPPING_CRITERIA  # the registry imports this module

        if self.stop_criterion not in STOPPING_CRITERIA:
            raise ValueError(f"stopping criterion {self.stop_criterion!r}: expected one of "
                             f"{', '.join(STOPPING_CRITERIA)}")
        if self.max_calls_per_sample < 1:
            raise ValueError("max_calls_per_sample must be at least 1")

