"""Timing options: what the loop may do (samples, budget, mode, graphs, flush) and the device's
defaults, validated once with one clear message."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.timing.clocks import DEFAULT_RECOVERY_S, DEFAULT_REGIME, DEFAULT_THROTTLE_THRESHOLD

MODES = ("hot", "cold")
CPU_CLOCKS = ("wall", "process")  # CPU timing: elapsed time, or CPU time of this process (all threads)
FLUSH_METHODS = ("auto", "read", "write")  # auto: the method the probe verifies here (read preferred)

# One message per field whose value breaks its constraint, in the order they are reported (a
# small max_samples alone pulls min_samples down with it: max is named first).
_MESSAGES = {
    "mode": "timing mode {!r}: expected one of " + ", ".join(MODES),
    "cpu_clock": "CPU clock {!r}: expected one of " + ", ".join(CPU_CLOCKS),
    "flush_method": "flush method {!r}: expected one of " + ", ".join(FLUSH_METHODS),
    "target_rel_noise": "target noise {}: expected a fraction in (0, 1), e.g. 0.01 for 1%",
    "energy_window_s": "energy window {}: must be 0 (off) or positive seconds",
    "max_samples": "max samples {}: must be at least 1",
    "min_samples": "min samples {}: must be at least 1",
    "max_time_s": "max time {}: must be positive seconds",
    "host_bound_max_time_s": "host-bound time {}: must be positive seconds",
    "warmup": "warm-up {}: must not be negative",
    "confidence": "confidence {}: expected a fraction in (0, 1)",
    "max_calls_per_sample": "max_calls_per_sample must be at least 1",
    "clock_regime": "clock regime {!r}: expected burst or sustained",
    "throttle_threshold": "throttle threshold {}: expected a fraction of the maximum SM clock in (0, 1], e.g. 0.75",
    "throttle_recovery_s": "throttle recovery delay {}: must be 0 or positive seconds",
    "sampling": "sampling {!r}: expected auto, interleaved or sequential",
    "warm_samples": "warm-up samples {}: must be 0 or more",
}


def _message(err: ValidationError) -> str:
    """The clear message of the first bad field (pydantic's own text for anything else)."""
    bad = {e["loc"][0]: e for e in err.errors() if e["loc"]}
    for field, text in _MESSAGES.items():
        if field in bad:
            return text.format(bad[field]["input"])
    first = err.errors()[0]
    return f"{'.'.join(map(str, first['loc'])) or 'timing options'}: {first['msg']}"


class TimingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    warmup: Annotated[int, Field(ge=0)] = 3
    min_samples: Annotated[int, Field(ge=1)] = 10
    max_samples: Annotated[int, Field(ge=1)] = 500
    target_rel_noise: Annotated[float, Field(gt=0, lt=1)] = 0.01  # relative half-width of the median's CI
    max_time_s: Annotated[float, Field(gt=0)] = 2.0  # sampling budget per cell (warm-up and capture not included)
    # Budget of an eagerly timed cell whose launches were not hidden behind the hold kernel
    # (host time in every sample; compare's noise-dominated "host-bound" class, not gated):
    # more samples do not make such a row repeatable (harness.timing.stopping, "host_bound").
    host_bound_max_time_s: Annotated[float, Field(gt=0)] = 0.25
    # A call at least this long (its running median) may stop on the noise target as soon as the
    # median's CI reaches its confidence (6 samples at 95%) instead of after min_samples: on the
    # H200 decode run (2026-12-02) sdpa's padded calls of 4.6-138 ms all stopped at exactly 10
    # samples with CI half-widths of 0.02-0.3%, 3-50x inside the 1% target; their 10 samples were
    # 57% of the run's cell time. None: min_samples for every call.
    long_call_ms: Annotated[float | None, Field(gt=0)] = 20.0
    mode: Literal["hot", "cold"] = "hot"  # "hot" (L2 holds the call's own data) or "cold" (flushed per sample)
    # On a GPU: untimed warm-ups right before every timed sample, so the sample finds the GPU as
    # its own previous sample left it whatever ran before it (in interleaved rounds, another
    # candidate): hot, this many untimed copies of the sample's work; cold, this many calls before
    # the flush. 0: none (before issue 44: small decode rows 4-10% slower interleaved than
    # sequential on an H100). None (auto): ``warm_samples_for`` in harness/timing/loop.py, two
    # copies before a work under 1 ms hot in interleaved rounds and one otherwise. docs/measurement.md, "Hot means hot".
    warm_samples: Annotated[int, Field(ge=0)] | None = None
    cuda_graph: bool = True  # use CUDA graphs where the backend allows them
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95
    min_sample_us: float = 200.0  # hot mode batches calls per sample until a sample lasts this long
    max_calls_per_sample: Annotated[int, Field(ge=1)] = 64
    hide_launch: bool = True  # hold the stream with a spin kernel while the host enqueues
    max_hold_ms: float = 50.0
    # cold mode: "auto" (probe both, use a verified one), "read" or "write"
    flush_method: Literal["auto", "read", "write"] = "auto"
    keep_raw: bool = False  # raw per-sample times in the row (off: keep rows small)
    stop_criterion: str = "noise"  # which StoppingCriterion ends sampling (harness.timing.stopping)
    # CPU only. "process" counts the CPU time the call used, not time spent waiting for a core:
    # on a shared machine wall-clock medians move several-fold between runs, CPU time far less.
    cpu_clock: Literal["wall", "process"] = "wall"
    # NVML energy: back-to-back calls for this long after timing; 0 = off (the default: short
    # windows do not resolve the counter, harness/timing/energy.py DISABLED says why)
    energy_window_s: Annotated[float, Field(ge=0)] = 0.0
    # GPU clock state (harness/timing/clocks.py, docs/measurement.md "Clock regimes"): burst samples
    # as they come and discards throttled ones; sustained brings the GPU to its power steady
    # state first and keeps it under load while sampling.
    clock_regime: Literal["burst", "sustained"] = DEFAULT_REGIME
    throttle_threshold: Annotated[float, Field(gt=0, le=1)] = DEFAULT_THROTTLE_THRESHOLD  # of the max SM clock
    throttle_recovery_s: Annotated[float, Field(ge=0)] = DEFAULT_RECOVERY_S  # idle after a throttled sample
    # The candidates of one case: "auto" samples them in interleaved rounds on a GPU when they
    # fit in memory together (harness/timing/interleave.py), else one after another; CPU: one
    # after another unless "interleaved" is asked for.
    sampling: Literal["auto", "interleaved", "sequential"] = "auto"

    @model_validator(mode="wrap")
    @classmethod
    def _one_clear_error(cls, data: Any, handler: Any) -> "TimingOptions":
        # Field constraints fail as pydantic errors; the CLI shows one line naming the setting.
        try:
            return handler(data)
        except ValidationError as e:
            raise ValueError(_message(e)) from None

    @model_validator(mode="after")
    def _consistent(self) -> "TimingOptions":
        if self.max_samples < self.min_samples:
            raise ValueError(f"max samples {self.max_samples} is below min samples {self.min_samples}")
        from harness.timing.stopping import STOPPING_CRITERIA  # the registry imports this module

        if self.stop_criterion not in STOPPING_CRITERIA:
            raise ValueError(f"stopping criterion {self.stop_criterion!r}: expected one of "
                             f"{', '.join(STOPPING_CRITERIA)}")
        return self

    @classmethod
    def for_device(cls, device: torch.device, **overrides: Any) -> "TimingOptions":
        """Defaults for the device (CPU: looser, shorter), then ``overrides`` (None = keep)."""
        cpu = dict(warmup=1, min_samples=3, max_samples=20, target_rel_noise=0.05, max_time_s=0.5)
        base = {name: f.default for name, f in cls.model_fields.items()} | (cpu if device.type == "cpu" else {})
        given = {k: v for k, v in overrides.items() if v is not None}
        values = {**base, **given}
        # One bound given alone moves the other default out of its way.
        if "min_samples" in given and "max_samples" not in given and values["max_samples"] < values["min_samples"]:
            values["max_samples"] = values["min_samples"]
        if "max_samples" in given and "min_samples" not in given and values["min_samples"] > values["max_samples"]:
            values["min_samples"] = values["max_samples"]
        return cls.checked(**values)

    @classmethod
    def checked(cls, **values: Any) -> "TimingOptions":
        """Construct, raising ValueError with one clear message (not pydantic's report)."""
        try:
            return cls(**values)
        except ValidationError as e:
            raise ValueError(_clear(e)) from None

    def validate(self) -> None:  # type: ignore[override]  # pydantic's deprecated classmethod of that name
        """Raise ValueError with one clear message for settings that cannot work (fields set
        after construction included)."""
        type(self).checked(**self.model_dump())


def _clear(err: ValidationError) -> str:
    """The message our validators raised, without pydantic's framing."""
    first = err.errors()[0]
    ctx = first.get("ctx") or {}
    return str(ctx["error"]) if "error" in ctx else _message(err)
