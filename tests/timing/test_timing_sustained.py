"""The sustained regime's settle rule on synthetic clock traces (harness/timing/sustained.py): no
GPU. The traces follow the H200 probe (reports/h200/2026-12-02/probes/clocks.json): NVML's power
is a ~1 s average, so under continuous load it rises linearly for about a second; a
power-hungry call's clock drops from 1980 to ~1485 MHz within 43 ms and, once the averaged
power reaches the 700 W limit, to the 1230-1440 MHz the controller holds it at."""

from __future__ import annotations

import pytest

from harness.timing.clocks import ClockRead
from harness.timing.sustained import (POWER_WINDOW_S, SETTLE_MIN_OWN_S, SETTLE_WINDOW_S, first_settled,
                                      settled_clock, settled_reason)

LIMIT = 700.0


def _trace(clock, power, until: float = 3.0, every: float = 0.01, start: float = 0.0) -> list:
    n = int(round((until - start) / every))
    return [(start + i * every, ClockRead(clock(start + i * every), power(start + i * every))) for i in range(1, n + 1)]


def _fa3_after_idle(t: float) -> tuple[float, float]:
    """(MHz, W) of a power-hungry call's continuous loop, t seconds after an idle GPU."""
    watts = min(LIMIT * 0.995, 120.0 + 600.0 * t)  # the ~1 s average filling up
    if t < 0.04:
        return 1980.0, watts
    if watts < 0.97 * LIMIT:
        return 1485.0, watts
    return (1440.0 if int(t * 4) % 2 else 1305.0), watts  # the controller's oscillation at the limit


def test_a_sample_before_the_settled_state_is_not_sustained():
    reads = _trace(lambda t: _fa3_after_idle(t)[0], lambda t: _fa3_after_idle(t)[1])
    at = first_settled(reads, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT)
    assert at is not None
    # not before the power window filled and the averaged power reached the limit
    assert at >= POWER_WINDOW_S
    assert at >= min(t for t, r in reads if r.power_w >= 0.97 * LIMIT) + SETTLE_WINDOW_S - 0.011
    # a sample at 0.2 s (1485 MHz, 240 W: the fast limiter only) or at 0.9 s is not sustained
    for t in (0.02, 0.2, 0.9):
        assert t < at
    # the state it settles in is the controller's: the clock median over the window is 1305-1440
    assert 1305.0 <= settled_clock(reads, at + 0.5, window_s=0.5) <= 1440.0


def test_the_earlier_rule_would_have_called_a_stale_reading_steady():
    # NVML's clock updates about every 0.1 s: two equal reads 50 ms apart, 0.15 s into the load,
    # are not a settled state (the old warm-up said "steady" there after 0.1 s when warm)
    reads = _trace(lambda t: _fa3_after_idle(t)[0], lambda t: _fa3_after_idle(t)[1], until=0.5)
    assert settled_reason(reads, 0.5, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT) is None


def test_a_call_below_the_power_limit_settles_once_the_power_window_is_full():
    # memory-bound: stays at 1980 MHz, the averaged power climbs to 560 W and stays
    reads = _trace(lambda t: 1980.0, lambda t: min(560.0, 120.0 + 440.0 * t))
    at = first_settled(reads, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT)
    assert at is not None and at >= POWER_WINDOW_S
    why = settled_reason(reads, at, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT)
    assert why and why.startswith("steady")


def test_after_another_call_kept_the_gpu_busy_a_short_own_settle_is_enough():
    # the GPU has been busy for 5 s (earlier calls of the case); this call starts at 5.0
    reads = _trace(lambda t: 1380.0, lambda t: 698.0, start=5.0, until=6.0)
    at = first_settled(reads, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT)
    least = max(SETTLE_MIN_OWN_S, SETTLE_WINDOW_S)  # its own work, and readings covering the window
    assert at is not None and 5.0 + least <= at < 5.0 + least + 0.05
    assert "power limit" in settled_reason(reads, at, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT)
    # ... but the same trace after a gap (busy only since 5.0) waits for the power window
    late = first_settled(reads, busy_since=5.0, own_since=5.0, power_limit_w=LIMIT)
    assert late is not None and late >= 5.0 + POWER_WINDOW_S - 0.011


def test_a_moving_state_never_settles():
    reads = _trace(lambda t: 1980.0 - 150.0 * t, lambda t: 300.0 + 100.0 * t)  # below the limit, still moving
    assert first_settled(reads, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT) is None
    # at the limit the controller's own slow steps (about a second apart) are the settled state
    osc = _trace(lambda t: 1305.0 if int(t) % 2 else 1440.0, lambda t: 699.0)
    assert first_settled(osc, busy_since=-5.0, own_since=0.0, power_limit_w=LIMIT) == pytest.approx(
        max(SETTLE_MIN_OWN_S, SETTLE_WINDOW_S), abs=0.021)
    # without a known limit it is judged by steadiness alone: not across a step
    assert first_settled(osc, busy_since=-5.0, own_since=0.0, power_limit_w=None) == pytest.approx(
        max(SETTLE_MIN_OWN_S, SETTLE_WINDOW_S), abs=0.021)


def test_a_clock_in_transition_at_the_power_limit_is_not_settled():
    # the previous call (memory-bound, 1950 MHz) left the power at the limit; this one draws more
    # and the controller takes the clock down to 1400 MHz over 0.3 s
    reads = _trace(lambda t: max(1400.0, 1950.0 - (t - 5.0) * 1833.0), lambda t: 699.0, start=5.0, until=6.0)
    at = first_settled(reads, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT)
    assert at is not None and at >= 5.3  # not while the clock is still falling
    assert settled_clock(reads, at) == pytest.approx(1400.0, rel=0.03)


def test_settled_clock_is_the_window_median():
    reads = [(0.1 * i, ClockRead(1300.0 + 10 * i, 700.0)) for i in range(10)]
    assert settled_clock(reads, 0.9, window_s=0.25) == pytest.approx(1380.0)  # reads at 0.7, 0.8, 0.9
    assert settled_clock([], 1.0) is None


@pytest.mark.gpu
def test_gpu_sustained_group_samples_in_the_settled_state():
    import torch

    from harness.records.results import Timing
    from harness.timing import GraphDecision, TimingOptions
    from harness.timing.loop import time_in_turn

    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    o1, o2 = torch.empty_like(a), torch.empty_like(a)
    got = time_in_turn({"x": (lambda: torch.matmul(a, a, out=o1), GraphDecision(True, ""), o1),
                                "y": (lambda: torch.matmul(a, a, out=o2), GraphDecision(True, ""), o2)},
                               dev, TimingOptions.for_device(dev, clock_regime="sustained", max_time_s=0.5))
    x, y = got["x"], got["y"]
    for t in (x, y):
        assert isinstance(t, dict)
        Timing.model_validate({k: v for k, v in t.items() if k != "host_enqueue_us"})  # the cell keeps it in the row's host trace
        assert t["sampling"] == "sequential" and t["clocks"]["discarded"] >= 1
        if t["clocks"]["source"] is None:
            continue  # no NVML here
        settle = t["clocks"]["settle"]
        assert settle["busy_s"] >= POWER_WINDOW_S and settle["reason"]
        # the samples' clock is the continuous loop's (within 3%)
        assert abs(t["clocks"]["sm_mhz"]["median"] / t["settled_sm_clock_mhz"] - 1) <= 0.03
    # the second call continued the first one's queue: it did not pay the power window again
    assert y["clocks"]["settle"]["previous_busy"] and y["clocks"]["settle"]["seconds"] < 0.5
    assert abs(x["median_us"] / y["median_us"] - 1) < 0.05
