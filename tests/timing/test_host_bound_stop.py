"""The host-bound stopping rule (harness.timing.stopping, "host_bound"): an eagerly timed cell
whose launches were not hidden stops after ``host_bound_max_time_s`` once ``min_samples`` are in;
nothing else changes, and a graph replay (never host-bound) keeps the plain rule. Synthesized
samples and elapsed times: no timing of this machine is involved."""

from __future__ import annotations

import random

import pytest

from harness.timing import TimingOptions
from harness.timing.stats import summarize
from harness.timing.stopping import (STOP_HOST_BOUND, STOP_MAX_SAMPLES, STOP_NOISE, STOP_TIME, describe_stop,
                                     stop_reason)


def _opts(**kw) -> TimingOptions:
    base = dict(min_samples=10, max_samples=500, target_rel_noise=0.01, max_time_s=2.0, host_bound_max_time_s=0.25)
    base.update(kw)
    return TimingOptions(**base)


def _noisy(n: int, seed: int = 7) -> list[float]:
    # Host time in every sample: +-40% around 300 us, never settling to 1%.
    rng = random.Random(seed)
    return sorted(300.0 * (1 + rng.uniform(-0.4, 0.4)) for _ in range(n))


def _run(opts: TimingOptions, host_bound: bool, step_s: float = 0.005, n_max: int = 1000) -> tuple[int, str, float]:
    """Feed the rule one synthesized sample every ``step_s`` seconds until it stops."""
    rng = random.Random(3)
    seq: list[float] = []
    for n in range(1, n_max + 1):
        seq.append(300.0 * (1 + rng.uniform(-0.4, 0.4)))
        r = stop_reason(sorted(seq), n * step_s, opts, host_bound=host_bound)
        if r:
            return n, r, n * step_s
    raise AssertionError("never stopped")


def test_a_host_bound_cell_stops_at_its_short_budget():
    n, reason, elapsed = _run(_opts(), host_bound=True)
    assert reason == STOP_HOST_BOUND
    assert n == 50 and elapsed == pytest.approx(0.25)  # the first sample at or past 0.25 s


def test_the_same_samples_not_host_bound_run_to_the_full_budget():
    n, reason, elapsed = _run(_opts(), host_bound=False)
    assert reason == STOP_TIME and n == 400 and elapsed == pytest.approx(2.0)


def test_host_bound_never_stops_below_min_samples():
    opts = _opts(min_samples=10)
    assert stop_reason(_noisy(9), 1.0, opts, host_bound=True) is None
    assert stop_reason(_noisy(10), 1.0, opts, host_bound=True) == STOP_HOST_BOUND
    assert stop_reason(_noisy(10), 0.2, opts, host_bound=True) is None  # budget not spent yet


def test_quiet_host_bound_rows_still_stop_on_noise_and_the_cap_still_bounds():
    opts = _opts(min_samples=10)
    assert stop_reason([100.0] * 10, 0.01, opts, host_bound=True) == STOP_NOISE
    assert stop_reason(_noisy(20), 0.01, _opts(min_samples=10, max_samples=20), host_bound=True) == STOP_MAX_SAMPLES


def test_the_host_bound_budget_never_exceeds_the_time_budget():
    opts = _opts(max_time_s=0.1, host_bound_max_time_s=0.25)
    assert stop_reason(_noisy(12), 0.1, opts, host_bound=True) == STOP_HOST_BOUND


def test_other_criteria_ignore_the_flag():
    assert stop_reason(_noisy(12), 5.0, _opts(stop_criterion="samples", max_samples=20), host_bound=True) is None
    assert stop_reason(_noisy(12), 5.0, _opts(stop_criterion="time"), host_bound=True) == STOP_TIME


def test_the_row_sentence_names_the_rule():
    opts = _opts()
    text = describe_stop(STOP_HOST_BOUND, summarize(_noisy(50)), opts)
    assert text.startswith("host-bound") and "0.25 s" in text and "50 samples" in text


def test_a_bad_host_bound_budget_is_one_clear_error():
    with pytest.raises(ValueError, match="host-bound time"):
        _opts(host_bound_max_time_s=0).validate()
