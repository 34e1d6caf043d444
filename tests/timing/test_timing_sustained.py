"""The sustained regime's settle rules on clock traces (harness/timing/sustained.py): no GPU.

Two kinds of trace: the 2026-12-06 probes' NVML readings over a 3 s CUDA-graph loop after 1 s
idle (tests/data/clocks/load_traces.json: FA3 and FlashInfer decode on an H100 and an H200,
copied from reports/h100/2026-12-06/loan3/clocks/probe.json and
reports/h200/2026-12-06/loan1/clocks/probe.json), and synthetic ones after them: NVML's power is
a ~1 s average, so under continuous load it rises linearly for about a second; at the 700 W limit
the controller's clock cycles with a period of about a second."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from harness.timing.clocks import ClockRead
from harness.timing.sustained import (BELOW_LIMIT, CONTROLLER_CYCLE_S, FILL_MAX, POWER_LIMITED, POWER_WINDOW_S,
                                      SETTLE_MIN_OWN_S, SETTLE_WINDOW_S, fill_replays, first_settled, needs_cycle,
                                      predicted_power, settled_clock, settled_reason)

LIMIT = 700.0
MAX_MHZ = 1980.0
PROBES = json.loads((Path(__file__).parents[1] / "data" / "clocks" / "load_traces.json").read_text())
AFTER_IDLE = {"busy_since": 0.0, "own_since": 0.0, "power_limit_w": LIMIT, "max_sm_mhz": MAX_MHZ,
              "flat_since": -math.inf}


def _probe(key: str, instant: float | None = None) -> list:
    return [(t, ClockRead(mhz, w, instant)) for t, mhz, w in PROBES[key]["load_trace"]]


def _upto(reads: list, t: float) -> list:
    return [r for r in reads if r[0] <= t]


def _last_second(reads: list) -> float:
    end = reads[-1][0]
    return statistics.median(r.sm_mhz for t, r in reads if t >= end - 1.0)


def _old_rule(reads: list) -> float | None:
    """The rule this replaced, at the limit: busy 1 s, then over the last 0.12 s the power >= 97%
    of the limit and the clock within 3%; the settled clock the median over those 0.12 s."""
    for t, _ in reads:
        win = [r for u, r in reads if t - 0.12 <= u <= t]
        if t < 1.0 or len(win) < 2:
            continue
        mhz = [r.sm_mhz for r in win]
        if min(r.power_w for r in win) >= 0.97 * LIMIT and (max(mhz) - min(mhz)) / max(mhz) < 0.03:
            return statistics.median(mhz)
    return None


@pytest.mark.parametrize("key", ["h100 fa3", "h200 fa3"])
def test_at_the_limit_the_settled_clock_is_the_cycle_median_of_the_loops_last_second(key):
    reads = _probe(key)
    ref = PROBES[key]["loop_settled_sm_mhz"]
    assert _last_second(reads) == ref  # the probe's reference: the 3 s loop's last second
    at = first_settled(reads, **AFTER_IDLE)
    assert at is not None
    assert needs_cycle(settled_reason(_upto(reads, at), at, **AFTER_IDLE))
    reached = min(t for t, r in reads if r.power_w >= POWER_LIMITED * LIMIT)
    assert at >= reached + CONTROLLER_CYCLE_S and at + CONTROLLER_CYCLE_S <= reads[-1][0] + 0.05
    assert abs(settled_clock(reads, at, at + CONTROLLER_CYCLE_S) / ref - 1) <= 0.03
    # the rule it replaces was off by more than 3%: in the harness's own row on that GPU, and on the trace
    assert abs(PROBES[key]["harness_sustained_sm_mhz"] / ref - 1) > 0.03
    assert abs(_old_rule(reads) / ref - 1) > 0.03
    # a full cycle's median is not enough right where the average reaches the limit: that first cycle runs hot
    assert settled_clock(reads, reached, reached + CONTROLLER_CYCLE_S) / ref > 1.03


def test_a_sample_before_the_settled_state_is_not_sustained():
    reads = _probe("h100 fa3")
    at = first_settled(reads, **AFTER_IDLE)
    # a sample at 0.2 s (1680 MHz, 245 W), at 1.0 s (the dip) or at 1.5 s (the first cycle's 1710
    # MHz plateau, where the old rule settled) is before it: not a sustained sample
    for t in (0.2, 1.0, 1.5):
        assert settled_reason(_upto(reads, t), t, **AFTER_IDLE) is None and t < at


def test_below_the_limit_the_burst_clock_is_the_sustained_one_early():
    reads = _probe("h100 flashinfer")  # 592 W steady: the controller never acts
    at = first_settled(reads, **AFTER_IDLE)
    assert at is not None and at < 0.5 < POWER_WINDOW_S
    why = settled_reason(_upto(reads, at), at, **AFTER_IDLE)
    assert why.startswith(BELOW_LIMIT) and not needs_cycle(why)
    watts, how = predicted_power(_upto(reads, at), at, own_since=0.0, flat_since=-math.inf)
    assert how == "the averaged power's ramp" and abs(watts / 592.0 - 1) < 0.06
    assert settled_clock(reads, at) == PROBES["h100 flashinfer"]["loop_settled_sm_mhz"] == MAX_MHZ


@pytest.mark.parametrize("key", ["h100 fa3", "h200 fa3", "h200 flashinfer"])
def test_the_shortcut_never_fires_for_a_call_that_reaches_the_limit_or_runs_below_max_clock(key):
    reads = _probe(key)  # H100 FA3: 1680-1725 MHz before the limit; the H200 FlashInfer reaches it
    for t, _ in reads:
        why = settled_reason(_upto(reads, t), t, **AFTER_IDLE)
        assert not (why or "").startswith(BELOW_LIMIT), (t, why)


def test_the_ramp_is_not_read_while_the_average_still_holds_an_earlier_load():
    reads = _probe("h100 flashinfer")
    # the previous cell's work ran out 0.3 s before this one started: until 0.7 s the average
    # still holds it, so no prediction from those readings (it would be low)
    recent = dict(AFTER_IDLE, flat_since=-0.3)
    for t in (0.4, 0.6):
        assert predicted_power(_upto(reads, t), t, own_since=0.0, flat_since=-0.3) is None
    at = first_settled(reads, **recent)
    assert at is None or at >= 0.7
    # nothing known about the load before: no ramp prediction at all
    assert predicted_power(reads, 0.8, own_since=0.0, flat_since=None) is None


def test_the_instantaneous_power_settles_a_low_call_at_once_and_never_a_high_one():
    low = _probe("h100 flashinfer", instant=595.0)
    at = first_settled(low, **dict(AFTER_IDLE, flat_since=None))
    assert at is not None and at <= SETTLE_MIN_OWN_S + SETTLE_WINDOW_S
    assert "instantaneous power" in settled_reason(_upto(low, at), at, **AFTER_IDLE)
    high = _probe("h100 flashinfer", instant=660.0)  # over 90% of the limit: it waits like any other
    assert not (settled_reason(_upto(high, 0.5), 0.5, **AFTER_IDLE) or "").startswith(BELOW_LIMIT)
    # the clock below its maximum (the previous call left it throttled): instant power read at a
    # throttled clock says nothing of the call's power at full clock
    slow = [(t, ClockRead(1725.0, r.power_w, 500.0)) for t, r in low]
    assert first_settled(slow, **AFTER_IDLE) is None or first_settled(slow, **AFTER_IDLE) >= POWER_WINDOW_S


def _trace(clock, power, until: float = 3.0, every: float = 0.01, start: float = 0.0) -> list:
    n = int(round((until - start) / every))
    return [(start + i * every, ClockRead(clock(start + i * every), power(start + i * every))) for i in range(1, n + 1)]


def test_after_another_call_kept_the_gpu_at_the_limit_its_own_power_window_is_still_needed():
    # the GPU has been at the limit for 5 s (earlier calls of the case); this call starts at 5.0:
    # the controller's input still holds the earlier call's power for a second
    reads = _trace(lambda t: 1380.0 if int(t * 2) % 2 else 1440.0, lambda t: 698.0, start=5.0, until=7.0)
    at = first_settled(reads, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT, max_sm_mhz=MAX_MHZ, flat_since=4.0)
    assert at is not None and 5.0 + POWER_WINDOW_S <= at < 5.0 + POWER_WINDOW_S + 0.02
    assert needs_cycle(settled_reason(_upto(reads, at), at, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT))


def test_below_the_limit_after_a_busy_gpu_steady_is_enough():
    # an earlier call kept the GPU busy; this one holds 1980 MHz at a flat 560 W (no ramp to fit)
    reads = _trace(lambda t: 1980.0, lambda t: 560.0, start=5.0, until=6.0)
    at = first_settled(reads, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT, max_sm_mhz=MAX_MHZ, flat_since=4.9)
    least = max(SETTLE_MIN_OWN_S, SETTLE_WINDOW_S)
    assert at is not None and 5.0 + least <= at < 5.0 + least + 0.05
    assert settled_reason(_upto(reads, at), at, busy_since=0.0, own_since=5.0, power_limit_w=LIMIT).startswith("steady")
    # ... but the same trace after a gap (busy only since 5.0, history unknown) waits for the power window
    late = first_settled(reads, busy_since=5.0, own_since=5.0, power_limit_w=LIMIT)
    assert late is not None and late >= 5.0 + POWER_WINDOW_S - 0.011


def test_a_moving_state_never_settles():
    reads = _trace(lambda t: 1980.0 - 150.0 * t, lambda t: 300.0 + 100.0 * t)  # below the limit, still moving
    assert first_settled(reads, busy_since=0.0, own_since=0.0, power_limit_w=LIMIT) is None


def test_settled_clock_is_the_median_over_its_stretch():
    reads = [(0.1 * i, ClockRead(1300.0 + 10 * i, 700.0)) for i in range(10)]
    assert settled_clock(reads, 0.65, 0.95) == pytest.approx(1380.0)  # reads at 0.7, 0.8, 0.9
    assert settled_clock(reads, 0.65) == pytest.approx(1380.0)
    assert settled_clock([], 1.0) is None


def test_the_row_records_its_settled_stretch_by_time():
    """Schema 6: ``clocks.window_sm_mhz`` holds the reads of the stretch the settled clock is
    taken from (reads before sampling began are not in it), with the mean. The clock levels are the H100 FA3 probe's between 2 and 3 s
    (reports/h100/2026-12-07/clocks/probe-settle.json: a new level about every 0.1 s)."""
    from harness.timing.sustained import SustainedSampler

    levels = [1455.0, 1545.0, 1650.0, 1665.0, 1680.0, 1680.0, 1680.0, 1575.0, 1425.0, 1425.0]
    s = SustainedSampler("cpu", lambda: None, 1, 1e-3, None, 10.0)
    s.trace = [(0.5, ClockRead(1980.0, 690.0))]  # the settle, before sampling: not the settled stretch
    s.sampling_from, s.cycle = 1.0, True
    s.window = [(1.0 + 0.01 * i, ClockRead(levels[i // 10], 695.0)) for i in range(100)]
    c = s.record({"read_cost_us": 10.0}, 1.0)
    w = c["window_sm_mhz"]
    assert w["median"] == s.settled_sm_clock_mhz == pytest.approx(statistics.median(levels))
    assert w["mean"] == pytest.approx(statistics.fmean(levels)) and w["max"] == 1680.0 and w["min"] == 1425.0


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
    for name, t in (("x", x), ("y", y)):
        assert isinstance(t, dict), name
        Timing.model_validate({k: v for k, v in t.items() if k != "host_enqueue_us"})  # the cell keeps it in the row's host trace
        clocks = t["clocks"]
        assert t["sampling"] == "sequential" and clocks["discarded"] >= 1, (name, t["sampling"], clocks["discarded"])
        if clocks["source"] is None:
            continue  # no NVML here
        settle = clocks["settle"]
        assert settle["reason"], name
        if needs_cycle(settle["reason"]):  # at the limit: its own power window, samples over a cycle
            assert settle["seconds"] >= POWER_WINDOW_S and t["sampling_s"] >= CONTROLLER_CYCLE_S, \
                (name, settle, t["sampling_s"])
        # the samples' clock is the continuous loop's over the same stretch (within 3%), read as
        # records.clocks.sm_clock reads rows: by the means (a median of one second at the power
        # limit can land a level away: 1500 against 1455 MHz on an H100, 2026-12-07)
        got_mhz, loop_mhz = clocks["sm_mhz"]["mean"], clocks["window_sm_mhz"]["mean"]
        assert abs(got_mhz / loop_mhz - 1) <= 0.03, (name, clocks["sm_mhz"], clocks["window_sm_mhz"])
    # the second call continued the first one's queue
    assert y["clocks"]["settle"]["previous_busy"], y["clocks"]["settle"]
    # and timed the same work: in cycles (time x mean clock) when NVML read both, since at the
    # limit one call's cycle can sit a clock level or two above the other's
    def cycles(t: dict) -> float:
        sm = (t["clocks"].get("sm_mhz") or {}) if t["clocks"]["source"] else {}
        return t["median_us"] * (sm.get("mean") or 1.0)
    assert abs(cycles(x) / cycles(y) - 1) < 0.05, (x["median_us"], y["median_us"], x["clocks"].get("sm_mhz"),
                                                  y["clocks"].get("sm_mhz"))


def test_eager_work_the_host_keeps_ahead_of_gets_no_filler_and_host_bound_work_enough_to_cover_twice_its_enqueue():
    assert fill_replays(host_s=40e-6, work_s=100e-6) == 0  # the work alone covers twice the enqueue
    assert fill_replays(host_s=50e-6, work_s=100e-6) == 0  # exactly twice
    # FA4's mixed-step row on the H100 (2026-12-08): ~340 us on the host, ~75 us of kernels
    n = fill_replays(host_s=340e-6, work_s=75e-6)
    assert (1 + n) * 75e-6 >= 2 * 340e-6 > n * 75e-6  # the least replays that cover it
    assert fill_replays(host_s=1.0, work_s=1e-6) == FILL_MAX  # capped
    assert fill_replays(host_s=1e-3, work_s=0.0) == FILL_MAX
    assert fill_replays(host_s=0.0, work_s=0.0) == 0


def test_a_filler_is_refused_with_its_reason_before_any_capture():
    import torch

    from harness.timing import GraphDecision, TimingOptions
    from harness.timing.loop import filler_graph

    dev = torch.device("cpu")
    out = torch.zeros(4)
    opts = TimingOptions(clock_regime="sustained")
    assert filler_graph(lambda: None, 1, dev, out, GraphDecision(False, "x"), opts.model_copy(update={"cuda_graph": False})) \
        == (None, "--no-cuda-graph leaves no graph to fill the queue with")
    g, why = filler_graph(lambda: None, 1, dev, out, GraphDecision(True, ""), opts)
    assert g is None and "no working graph" in why  # the loop's own capture of it failed or did not match
    g, why = filler_graph(lambda: None, 1, dev, None, GraphDecision(False, "x"), opts)
    assert g is None and "no output" in why


@pytest.mark.gpu
def test_gpu_sustained_eager_host_bound_work_times_the_gpu_behind_a_filler():
    """An eager call whose host enqueue (a 300 us host wait) far outlasts its kernel: its
    sustained samples are the kernel's GPU time, not the host's rate, behind graph replays of the
    same call; with --no-cuda-graph no filler and the host's rate, said so."""
    import time

    import torch

    from harness.timing import GraphDecision, TimingOptions
    from harness.timing.loop import time_callable

    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    o = torch.empty_like(a)

    def call() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 300e-6:
            pass
        torch.matmul(a, a, out=o)

    opts = TimingOptions.for_device(dev, clock_regime="sustained", max_time_s=0.5)
    t = time_callable(call, dev, opts, graph=GraphDecision(False, "eager for the test"), output=o)
    assert not t["cuda_graph"]["used"]
    assert t["launch"]["fill_replays"] and t["launch"]["fill_replays"] >= 1, t["launch"]
    assert t["launch"]["hidden_frac"] >= 0.9 and not t["contains"]["host_time"], (t["launch"], t["contains"])
    assert t["median_us"] < 150, t["median_us"]  # the kernel (~30 us on an H100), not the host's 300 us a call
    plain = time_callable(call, dev, opts.model_copy(update={"cuda_graph": False}),
                          graph=GraphDecision(False, "eager for the test"), output=o)
    assert plain["launch"]["fill_replays"] is None and "--no-cuda-graph" in plain["launch"]["note"]
    assert plain["median_us"] >= 250, plain["median_us"]  # the host's rate, and the row says so
    assert plain["contains"]["host_time"], plain["contains"]
