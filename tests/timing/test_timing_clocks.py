"""Clock regimes on synthetic clock traces (harness/timing/clocks.py): no GPU, no real timing.

A stand-in GPU holds a simulated time, an SM clock and a board power; a "kernel" of fixed work
lasts work / clock on it; readers, sleeps and the time source are all the stand-in's."""

from __future__ import annotations

import statistics

import pytest
import torch

from harness.timing import TimingOptions
from harness.timing.clocks import (BusyLog, ClockRead, ClockTrace, RegimeSampler, below_max_reasons, read_cost_us,
                                   throttled)
from harness.timing.loop import _loop
from harness.timing.stopping import STOP_TIME

MAX = 1980.0


class Gpu:
    """Simulated time (s), SM clock (MHz) and power (W). ``clock_at(t)`` sets the clock."""

    def __init__(self, clock_at, power_at=lambda t: 400.0):
        self.t = 0.0
        self.clock_at, self.power_at = clock_at, power_at
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def run(self, work_cycles: float) -> float:
        """A kernel of ``work_cycles`` (millions) at the current clock; its seconds."""
        s = work_cycles / self.clock_at(self.t)
        self.t += s
        return s

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


class Reader:
    source = "synthetic"
    max_sm_mhz = MAX
    power_limit_w = 700.0

    def __init__(self, gpu: Gpu):
        self.gpu = gpu
        self.reads = 0

    def read(self) -> ClockRead:
        self.reads += 1
        self.gpu.t += 20e-6  # a read costs 20 us of host time
        return ClockRead(self.gpu.clock_at(self.gpu.t), self.gpu.power_at(self.gpu.t))


def test_throttled_rule():
    assert throttled(ClockRead(1980, 500), MAX, 0.75) is None
    assert throttled(ClockRead(1485, 500), MAX, 0.75) is None  # exactly at the threshold: kept
    why = throttled(ClockRead(1400, 690), MAX, 0.75)
    assert why and "75%" in why and "1980" in why
    assert throttled(ClockRead(None, 690), MAX, 0.75) is None  # nothing to judge by
    assert throttled(ClockRead(1000, 690), None, 0.75) is None


def test_read_cost_measured_on_the_clock_given():
    gpu = Gpu(lambda t: MAX)
    assert read_cost_us(Reader(gpu), reads=5, clock=gpu.now) == pytest.approx(20.0)


def _burst(gpu: Gpu, threshold: float = 0.75, max_time_s: float = 1.0) -> RegimeSampler:
    return RegimeSampler("burst", Reader(gpu), "", threshold=threshold, recovery_s=0.05, max_time_s=max_time_s,
                         device_key="cuda:0", busy=BusyLog(gpu.now), sleep=gpu.sleep, clock=gpu.now)


def test_burst_discards_throttled_samples_of_a_synthetic_trace():
    # The clock dips under 75% of 1980 MHz for one sample in four: a stand-in kernel of fixed
    # work lasts 1980/1300 = 1.52x as long then. Discarding keeps the boost-clock time only.
    trace = iter([MAX, MAX, MAX, 1300.0] * 100)
    state = {"mhz": MAX}
    gpu = Gpu(lambda t: state["mhz"])
    reg = _burst(gpu)
    opts = TimingOptions.checked(min_samples=12, max_samples=12, target_rel_noise=0.001, max_time_s=1.0)

    def take():
        state["mhz"] = next(trace)
        s = gpu.run(1980.0 * 100e-6)  # 100 us at the boost clock
        return s if reg.after_sample(gpu.t) else None

    samples, _reason, _elapsed = _loop(take, opts)
    assert len(samples) == 12
    assert max(samples) == pytest.approx(100e-6)  # no throttled sample kept
    rec = reg.finish(len(samples), opts.min_samples, gpu.t)  # sampling time on the stand-in's clock
    assert rec["discarded"] == 3 and rec["throttled_kept"] == 0 and rec["short_of_clean"] is False
    assert list(rec["discard_reasons"].values()) == [3]
    assert gpu.slept == [0.05] * 3  # the recovery delay after each discard
    assert rec["sm_mhz"]["min"] == 1300.0 and rec["sm_mhz"]["max"] == MAX
    assert rec["regime"] == "burst" and rec["throttle_threshold"] == 0.75
    assert rec["read_cost_us"] == pytest.approx(20.0) and 0 < rec["read_share"] < 0.5


def test_burst_cell_without_enough_clean_samples_says_so(monkeypatch):
    # Throttled throughout: nothing is clean. Past the time budget throttled samples are kept
    # (the loop ends) and the row flags it.
    gpu = Gpu(lambda t: 1200.0)
    reg = _burst(gpu, max_time_s=0.2)
    opts = TimingOptions.checked(min_samples=10, max_samples=50, target_rel_noise=0.001, max_time_s=0.2)

    def take():
        s = gpu.run(1980.0 * 100e-6)
        return s if reg.after_sample(gpu.t) else None

    import harness.timing.loop as loop

    monkeypatch.setattr(loop.time, "perf_counter", gpu.now)  # _loop's budget on the stand-in's time
    samples, reason, elapsed = _loop(take, opts)
    rec = reg.finish(len(samples), opts.min_samples, elapsed)
    assert reason == STOP_TIME
    assert rec["throttled_kept"] == len(samples) >= 1
    assert rec["discarded"] >= 1 and rec["short_of_clean"] is True


def test_busy_log_per_regime():
    gpu = Gpu(lambda t: MAX)
    log = BusyLog(gpu.now)
    assert log.idle_s("cuda:0") is None
    log.mark("cuda:0", "burst")
    gpu.t += 2.0
    log.mark("cuda:0", "sustained")
    gpu.t += 0.5
    assert log.idle_s("cuda:0") == pytest.approx(0.5)
    assert log.idle_s("cuda:0", "burst") == pytest.approx(2.5)
    assert log.idle_s("cuda:1") is None


def test_trace_summary():
    t = ClockTrace()
    for mhz, w in ((1980, 500), (1500, 700), (1700, 650)):
        t.add(ClockRead(mhz, w))
    s = t.summary()
    assert s["sm_mhz"] == {"min": 1500, "median": 1700, "max": 1980, "mean": pytest.approx(5180 / 3)}
    assert s["power_w"]["median"] == 650 and s["reads"] == 3
    assert ClockTrace().summary()["sm_mhz"] is None


def test_clock_event_reasons_are_counted_over_the_reads_below_the_maximum():
    # bits of nvml.h: 0x4 SW power cap, 0x20 SW thermal slowdown; 0x200 is none this build names
    reads = [ClockRead(1980, 300), ClockRead(1785, 150, reasons=0x0), ClockRead(1500, 700, reasons=0x4),
             ClockRead(1410, 700, reasons=0x4 | 0x20), ClockRead(1600, 650, reasons=0x200)]
    assert below_max_reasons(reads) == {"none": 1, "sw_power_cap": 2, "sw_thermal_slowdown": 1, "0x200": 1}
    assert below_max_reasons([ClockRead(1980, 300), ClockRead(1900, 300)]) is None  # reasons never read
    t = ClockTrace()
    for r in reads:
        t.add(r)
    assert t.summary()["below_max_reasons"]["sw_power_cap"] == 2


def test_regime_is_a_timing_option_with_one_clear_error():
    assert TimingOptions.for_device(torch.device("cpu")).clock_regime == "burst"
    with pytest.raises(ValueError, match="clock regime 'hot'"):
        TimingOptions.checked(clock_regime="hot")
    with pytest.raises(ValueError, match="throttle threshold 1.5"):
        TimingOptions.checked(throttle_threshold=1.5)


def test_cpu_rows_carry_no_clocks():
    from harness.timing import time_callable

    t = time_callable(lambda: statistics.median([1, 2, 3]), torch.device("cpu"),
                      TimingOptions.for_device(torch.device("cpu"), clock_regime="sustained"))
    assert "clocks" not in t and "clock_regime" not in t


@pytest.mark.gpu
def test_gpu_rows_record_clocks_in_both_regimes():
    from harness.records.results import Timing
    from harness.timing import GraphDecision, time_callable
    from harness.timing.clocks import nvml_reader

    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for regime in ("burst", "sustained"):
        t = time_callable(lambda: torch.matmul(a, a, out=out), dev,
                          TimingOptions.for_device(dev, clock_regime=regime, max_time_s=0.5),
                          graph=GraphDecision(True, ""), output=out)
        t.pop("host_enqueue_us")  # the cell keeps it in the row's host trace, not in Timing (harness/cell/run.py)
        Timing.model_validate(t)
        assert t["clock_regime"] == regime and t["sampling"] == "sequential"
        c = t["clocks"]
        assert c["regime"] == regime
        if c["source"] is None:  # no NVML here: the row says why
            assert c["reason"]
            continue
        assert c["sm_mhz"]["min"] > 100 and c["reads"] >= t["samples"]
        assert c["read_cost_us"] > 0 and c["max_sm_mhz"] >= c["sm_mhz"]["min"]
        reader, _ = nvml_reader(dev)
        if getattr(reader, "reasons", False) and c["sm_mhz"]["min"] < c["max_sm_mhz"]:
            # a read below the maximum asks NVML why: at least that read is counted
            assert c["below_max_reasons"] and sum(c["below_max_reasons"].values()) >= 1, c
        if regime == "sustained":
            assert c["settle"]["seconds"] >= 0.15 and c["settle"]["reason"] and c["settle"]["busy_s"] >= 1.0
            assert c["discard_reasons"].get("taken before the settled state", 0) >= 1
            assert t["settled_sm_clock_mhz"] > 100


@pytest.mark.gpu
def test_gpu_calls_timed_in_interleaved_rounds():
    from harness.records.results import Timing
    from harness.timing import GraphDecision
    from harness.timing.loop import time_interleaved

    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    o1, o2 = torch.empty_like(a), torch.empty_like(a)
    got = time_interleaved({"x": (lambda: torch.matmul(a, a, out=o1), GraphDecision(True, ""), o1),
                            "y": (lambda: torch.matmul(a, a, out=o2), GraphDecision(True, ""), o2)},
                           dev, TimingOptions.for_device(dev, max_time_s=0.5, keep_raw=True))
    for t in got.values():
        t.pop("host_enqueue_us")  # the cell keeps it in the row's host trace, not in Timing (harness/cell/run.py)
        Timing.model_validate(t)
        assert t["sampling"] == "interleaved" and t["cuda_graph"]["used"]
        # --keep-raw: every kept sample's hold clock, in step with its time (a spin kernel held each one)
        held = t["launch"]["raw_hold_mhz"]
        assert len(held) == len(t["raw_us"]) == t["samples"]
        assert all(m is not None and 100 < m < 5000 for m in held), held
    # the same call twice, in rounds: within a few percent of each other
    assert abs(got["x"]["median_us"] / got["y"]["median_us"] - 1) < 0.05


def test_a_suite_sets_the_regime_and_the_flag_overrides_it(tmp_path):
    from harness.cli.run_flags import RunFlags
    from harness.spec import SpecError, load_suite

    src = (tmp_path / "s.yaml")
    src.write_text("suite: s\nclock_regime: sustained\ncases:\n  - name: c\n    num_heads: 4\n    num_kv_heads: 4\n"
                   "    head_size: 64\n    batch: [{kind: decode, count: 1, context_len: 32}]\n")
    suite = load_suite(str(src))
    cpu = torch.device("cpu")
    assert RunFlags.parse({"suite": str(src)}).timing_options(cpu, suite.clock_regime).clock_regime == "sustained"
    flags = RunFlags.parse({"suite": str(src), "clock_regime": "burst"})
    assert flags.timing_options(cpu, suite.clock_regime).clock_regime == "burst"
    assert RunFlags.parse({"suite": str(src)}).timing_options(cpu, None).clock_regime == "burst"  # the default
    src.write_text(src.read_text().replace("sustained", "hot"))
    with pytest.raises(SpecError, match="clock_regime"):
        load_suite(str(src))
