"""When sampling stops: pluggable stopping criteria, chosen by name (``TimingOptions.stop_criterion``,
``harness run --stop NAME``), in the manner of nvbench's ``stopping_criterion_base``.

A criterion is pure: after every sample the loop hands it the samples so far (sorted), the
seconds spent sampling and whether the cell is host-bound so far (eagerly timed, most samples'
launches not hidden behind the hold kernel; never for a graph replay), and it answers a reason to stop (one of the ``STOP_*`` strings) or None.
It also writes the row's one-line ``stop`` sentence. The row records the criterion's name
(``stop_criterion``), the reason (``stop_reason``) and the sentence (``stop``).

Adding a criterion: subclass ``StoppingCriterion`` here, give it a ``name`` and decorate it with
``@register_criterion``; ``--stop`` and option validation pick it up from ``STOPPING_CRITERIA``.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol, Sequence

from harness.timing.stats import median_ci_ranks, rel_ci_half_width



class StopOptions(Protocol):
    """The sampling options a criterion reads (``harness.timing.options.TimingOptions`` has them;
    that module asks this one's registry to validate ``stop_criterion``: a protocol here keeps
    the two apart)."""

    confidence: float
    host_bound_max_time_s: float
    long_call_ms: float | None
    max_samples: int
    max_time_s: float
    min_samples: int
    stop_criterion: str
    target_rel_noise: float

STOP_NOISE = "noise_target"
STOP_MAX_SAMPLES = "max_samples"
STOP_TIME = "time_budget"
STOP_HOST_BOUND = "host_bound"  # host time in every sample: the short host-bound budget spent
MIN_SAMPLES_ON_TIMEOUT = 3  # the time budget never leaves fewer samples than this


class StoppingCriterion(ABC):
    """Decides after each sample whether to take another. Built from the cell's options."""

    name: ClassVar[str]
    help: ClassVar[str]  # one line for --help and the docs

    def __init__(self, opts: StopOptions):
        self.opts = opts

    @abstractmethod
    def stop_reason(self, samples: Sequence[float], elapsed_s: float, host_bound: bool = False) -> str | None:
        """Why sampling should stop now, or None. ``samples`` are sorted ascending."""

    def describe(self, reason: str, summary: dict[str, Any]) -> str:
        """One sentence for the row: why it stopped, with the noise reached."""
        opts = self.opts
        noise = summary["rel_ci_half_width"]
        n = summary["samples"]
        if reason == STOP_NOISE:
            return f"noise {noise:.2%} <= target {opts.target_rel_noise:.2%} after {n} samples"
        if reason == STOP_MAX_SAMPLES:
            return f"sample cap {opts.max_samples} reached; noise {noise:.2%} (target {opts.target_rel_noise:.2%})"
        if reason == STOP_HOST_BOUND:
            return (f"host-bound (launches not hidden: host time in every sample): "
                    f"{opts.host_bound_max_time_s:g} s budget spent after {n} samples; noise {noise:.2%} "
                    f"(target {opts.target_rel_noise:.2%}, not gated by compare)")
        extra = f", below min samples {opts.min_samples}" if n < opts.min_samples else ""
        return (f"time budget {opts.max_time_s:g} s spent after {n} samples{extra}; "
                f"noise {noise:.2%} (target {opts.target_rel_noise:.2%})")


STOPPING_CRITERIA: dict[str, type[StoppingCriterion]] = {}


def register_criterion(cls: type[StoppingCriterion]) -> type[StoppingCriterion]:
    """Class decorator: make a criterion selectable by its ``name``."""
    if cls.name in STOPPING_CRITERIA:
        raise ValueError(f"stopping criterion {cls.name!r} registered twice")
    STOPPING_CRITERIA[cls.name] = cls
    return cls


@functools.lru_cache(maxsize=None)
def _takes_host_bound(cls: type[StoppingCriterion]) -> bool:
    return "host_bound" in inspect.signature(cls.stop_reason).parameters


def ask(criterion: StoppingCriterion, samples: Sequence[float], elapsed_s: float, host_bound: bool) -> str | None:
    """``criterion.stop_reason``, with ``host_bound`` for criteria that take it (one written
    before the flag existed is asked as before)."""
    if _takes_host_bound(type(criterion)):
        return criterion.stop_reason(samples, elapsed_s, host_bound=host_bound)
    return criterion.stop_reason(samples, elapsed_s)


def criterion_for(opts: StopOptions) -> StoppingCriterion:
    """The criterion the options name, built for them."""
    try:
        return STOPPING_CRITERIA[opts.stop_criterion](opts)
    except KeyError:
        raise ValueError(f"stopping criterion {opts.stop_criterion!r}: expected one of "
                         f"{', '.join(STOPPING_CRITERIA)}") from None


@register_criterion
class NoiseCriterion(StoppingCriterion):
    """The default: stop once the median's CI is tight enough, bounded by the sample cap and the
    time budget.

    Order: the sample cap; the noise target once ``min_samples`` are in and the median's CI
    reaches its confidence; for a host-bound cell, ``host_bound_max_time_s`` once
    ``min_samples`` are in (its noise is the host's: on the H200 such rows moved by -14% to
    +155% between two idle runs at the full budget, so the full budget buys no repeatability);
    the time budget (which may stop below ``min_samples``, but never below 3 samples, or
    ``min_samples`` if that is smaller).
    """

    name = "noise"
    help = "until the median's CI half-width is under --target-noise (bounded by --max-samples, --max-time)"

    def stop_reason(self, samples: Sequence[float], elapsed_s: float, host_bound: bool = False) -> str | None:
        opts = self.opts
        n = len(samples)
        if n >= opts.max_samples:
            return STOP_MAX_SAMPLES
        # The noise target counts only once the CI reaches its confidence (n >= 6 at 95%); a long
        # call (samples in seconds, as the loop takes them) need not reach min_samples first.
        long_call = opts.long_call_ms is not None and n > 0 and samples[n // 2] * 1e3 >= opts.long_call_ms
        if ((n >= opts.min_samples or long_call) and median_ci_ranks(n, opts.confidence)[2] >= opts.confidence
                and rel_ci_half_width(samples, opts.confidence) <= opts.target_rel_noise):
            return STOP_NOISE
        if host_bound and n >= opts.min_samples and elapsed_s >= min(opts.host_bound_max_time_s, opts.max_time_s):
            return STOP_HOST_BOUND
        if elapsed_s >= opts.max_time_s and n >= min(MIN_SAMPLES_ON_TIMEOUT, opts.min_samples):
            return STOP_TIME
        return None


@register_criterion
class SampleCountCriterion(StoppingCriterion):
    """Exactly ``max_samples`` samples, whatever the noise or the time they take (comparable
    sample counts across cells, e.g. for a distribution plot)."""

    name = "samples"
    help = "exactly --max-samples samples (no noise target, no time budget)"

    def stop_reason(self, samples: Sequence[float], elapsed_s: float, host_bound: bool = False) -> str | None:
        return STOP_MAX_SAMPLES if len(samples) >= self.opts.max_samples else None

    def describe(self, reason: str, summary: dict[str, Any]) -> str:
        if reason != STOP_MAX_SAMPLES:  # the loop's guard against samples it keeps rejecting
            return super().describe(reason, summary)
        return (f"fixed count of {summary['samples']} samples taken; "
                f"noise {summary['rel_ci_half_width']:.2%} (no target)")


@register_criterion
class TimeBudgetCriterion(StoppingCriterion):
    """Sample for the whole time budget (``max_time_s``), whatever the noise; the sample cap
    still bounds it, and it never stops on time below ``min_samples``."""

    name = "time"
    help = "for the whole --max-time budget (at least --min-samples, at most --max-samples)"

    def stop_reason(self, samples: Sequence[float], elapsed_s: float, host_bound: bool = False) -> str | None:
        n = len(samples)
        if n >= self.opts.max_samples:
            return STOP_MAX_SAMPLES
        if elapsed_s >= self.opts.max_time_s and n >= self.opts.min_samples:
            return STOP_TIME
        return None

    def describe(self, reason: str, summary: dict[str, Any]) -> str:
        noise = summary["rel_ci_half_width"]
        n = summary["samples"]
        if reason == STOP_TIME:
            return f"time budget {self.opts.max_time_s:g} s spent after {n} samples; noise {noise:.2%} (no target)"
        if reason == STOP_MAX_SAMPLES:
            return (f"sample cap {self.opts.max_samples} reached before the {self.opts.max_time_s:g} s budget; "
                    f"noise {noise:.2%} (no target)")
        return super().describe(reason, summary)


def stop_reason(samples: Sequence[float], elapsed_s: float, opts: StopOptions,
                host_bound: bool = False) -> str | None:
    """Why sampling should stop now, or None to take another sample, by the options' criterion.
    Pure: the loop feeds it the samples so far, the seconds spent sampling and whether the cell
    is host-bound so far."""
    return ask(criterion_for(opts), samples, elapsed_s, host_bound)


def describe_stop(reason: str, summary: dict[str, Any], opts: StopOptions) -> str:
    """The row's ``stop`` sentence, by the options' criterion."""
    return criterion_for(opts).describe(reason, summary)
