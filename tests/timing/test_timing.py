"""Timing statistics, the median's CI, the stopping rule, CUDA-graph eligibility and the CPU
timing path (the same loop the GPU uses, on the wall clock)."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from attn_contract import CudaGraphSupport
from harness.cli import main as cli_main
from harness.timing import (
    STOP_MAX_SAMPLES,
    STOP_NOISE,
    STOP_TIME,
    TimingOptions,
    calls_per_sample,
    describe_stop,
    graph_decision,
    median_ci,
    median_ci_ranks,
    rel_ci_half_width,
    required_graph_support,
    stop_reason,
    summarize,
    time_callable,
)

CPU = torch.device("cpu")


# ---------------------------------------------------------------- statistics
def test_summarize_against_hand_computed_values():
    s = summarize([7, 3, 10, 1, 5, 9, 2, 8, 4, 6])  # 1..10, shuffled
    assert s["samples"] == 10
    assert s["median_us"] == 5.5
    assert s["mean_us"] == 5.5
    assert s["min_us"] == 1 and s["max_us"] == 10
    assert s["stdev_us"] == pytest.approx(math.sqrt(82.5 / 9))  # sample stdev, n-1
    assert s["q1_us"] == pytest.approx(3.25) and s["q3_us"] == pytest.approx(7.75)  # linear interpolation
    assert s["iqr_us"] == pytest.approx(4.5)
    # n=10 at 95%: the order statistics x_(2) and x_(9)
    assert (s["ci_low_us"], s["ci_high_us"]) == (2, 9)
    assert s["ci_coverage"] == pytest.approx(1 - 2 * 11 / 1024)
    assert s["rel_ci_half_width"] == pytest.approx(7 / 11)


def test_summarize_single_sample_and_empty():
    s = summarize([42.0])
    assert s["median_us"] == s["min_us"] == s["ci_low_us"] == s["ci_high_us"] == 42.0
    assert s["stdev_us"] == 0.0 and s["iqr_us"] == 0.0 and s["ci_coverage"] == 0.0
    with pytest.raises(ValueError):
        summarize([])


def _binom_cdf(k: int, n: int) -> float:
    return sum(math.comb(n, j) for j in range(k + 1)) / 2**n


@pytest.mark.parametrize("n", [6, 7, 9, 10, 17, 30, 100, 257])
def test_median_ci_ranks_are_the_tightest_with_95_percent_coverage(n):
    lo, hi, cov = median_ci_ranks(n)
    assert hi == n - 1 - lo
    # coverage of [x_(lo+1), x_(n-lo)] (1-based) is 1 - 2 P(B <= lo), exactly
    assert cov == pytest.approx(1 - 2 * _binom_cdf(lo, n), abs=1e-12)
    assert cov >= 0.95
    # one rank tighter would fall below 95%
    assert 1 - 2 * _binom_cdf(lo + 1, n) < 0.95


def test_median_ci_known_table_values():
    assert median_ci_ranks(10)[:2] == (1, 8)
    assert median_ci_ranks(100)[:2] == (39, 60)  # ranks 40 and 61, the textbook answer
    # n < 6: [min, max] is the best there is, with its lower coverage reported
    assert median_ci_ranks(5) == (0, 4, pytest.approx(1 - 2 / 32))
    assert median_ci_ranks(90, 0.5)[2] >= 0.5


def test_median_ci_is_order_independent():
    xs = [float(x) for x in range(1, 31)]
    shuffled = xs[:]
    random.Random(0).shuffle(shuffled)
    assert median_ci(xs) == median_ci(shuffled)
    assert rel_ci_half_width(xs) == rel_ci_half_width(shuffled)


# ---------------------------------------------------------------- stopping rule
def _opts(**kw) -> TimingOptions:
    # Samples here are unitless (100.0 as "100 us"); the loop feeds seconds, which the long-call
    # rule reads (tests/cli/test_tool_defects.py): off here, so 100.0 is not a 100 s call.
    base = dict(min_samples=10, max_samples=200, target_rel_noise=0.01, max_time_s=2.0, long_call_ms=None)
    base.update(kw)
    return TimingOptions(**base)


def test_stop_on_noise_only_after_min_samples_and_full_coverage():
    opts = _opts(min_samples=3)
    quiet = [100.0] * 5
    assert stop_reason(quiet, 0.0, opts) is None  # 5 samples: the CI cannot reach 95% yet
    assert stop_reason(quiet + [100.0], 0.0, opts) == STOP_NOISE
    opts = _opts(min_samples=10)
    assert stop_reason([100.0] * 9, 0.0, opts) is None
    assert stop_reason([100.0] * 10, 0.0, opts) == STOP_NOISE


def test_stop_rule_fed_a_settling_sequence_stops_where_the_noise_first_meets_the_target():
    rng = random.Random(1)
    # 1% jitter around 100 us plus a few 30% outliers: the median's CI tightens as n grows.
    seq = [100.0 * (1 + rng.uniform(-0.01, 0.01)) * (1.3 if rng.random() < 0.1 else 1.0) for _ in range(400)]
    opts = _opts(min_samples=10, target_rel_noise=0.003, max_samples=400)
    stopped = None
    for n in range(1, len(seq) + 1):
        r = stop_reason(seq[:n], 0.0, opts)
        if r:
            stopped = (n, r)
            break
    assert stopped is not None and stopped[1] == STOP_NOISE
    n = stopped[0]
    assert n > 10
    assert rel_ci_half_width(seq[:n]) <= 0.003
    assert all(rel_ci_half_width(seq[:m]) > 0.003 for m in range(10, n))


def test_stop_on_sample_cap_when_the_noise_never_settles():
    seq = [1.0, 100.0] * 100
    opts = _opts(max_samples=50)
    reasons = [stop_reason(seq[:n], 0.0, opts) for n in range(1, 51)]
    assert reasons[:-1] == [None] * 49
    assert reasons[-1] == STOP_MAX_SAMPLES


def test_time_budget_stops_below_min_samples_but_never_below_three():
    noisy = [1.0, 100.0, 50.0]
    opts = _opts(min_samples=10, max_time_s=0.5)
    assert stop_reason(noisy[:2], 0.6, opts) is None
    assert stop_reason(noisy, 0.6, opts) == STOP_TIME
    assert stop_reason(noisy, 0.4, opts) is None
    assert stop_reason([5.0], 9.9, _opts(min_samples=1, max_time_s=0.5)) == STOP_TIME


def test_describe_stop_says_why():
    opts = _opts(min_samples=10, max_time_s=0.5)
    s = summarize([1.0, 100.0, 50.0])
    text = describe_stop(STOP_TIME, s, opts)
    assert "time budget" in text and "below min samples 10" in text
    assert "target 1.00%" in describe_stop(STOP_NOISE, summarize([5.0] * 12), opts)


def test_stopping_criteria_are_chosen_by_name_and_validated():
    from harness.timing import STOPPING_CRITERIA, NoiseCriterion, criterion_for

    assert {"noise", "samples", "time"} <= set(STOPPING_CRITERIA)
    assert TimingOptions().stop_criterion == "noise"
    assert isinstance(criterion_for(_opts()), NoiseCriterion)
    with pytest.raises(ValueError, match="stopping criterion 'entropy'"):
        _opts(stop_criterion="entropy").validate()


def test_sample_count_criterion_ignores_noise_and_time():
    opts = _opts(stop_criterion="samples", max_samples=30, min_samples=10, max_time_s=0.5)
    quiet = [100.0] * 29
    assert stop_reason(quiet, 99.0, opts) is None  # the noise rule would stop, the budget too
    assert stop_reason(quiet + [100.0], 0.0, opts) == STOP_MAX_SAMPLES
    text = describe_stop(STOP_MAX_SAMPLES, summarize(quiet + [100.0]), opts)
    assert "fixed count of 30 samples" in text and "no target" in text


def test_time_budget_criterion_samples_until_the_budget_is_spent():
    opts = _opts(stop_criterion="time", max_samples=100, min_samples=5, max_time_s=0.5)
    quiet = [100.0] * 20
    assert stop_reason(quiet, 0.4, opts) is None  # the noise rule would have stopped here
    assert stop_reason(quiet, 0.6, opts) == STOP_TIME
    assert stop_reason(quiet[:4], 0.6, opts) is None  # below min samples
    assert stop_reason([100.0] * 100, 0.0, opts) == STOP_MAX_SAMPLES
    assert "time budget 0.5 s spent after 20 samples" in describe_stop(STOP_TIME, summarize(quiet), opts)


def test_a_registered_criterion_is_selectable(monkeypatch):
    from harness.timing import STOPPING_CRITERIA, StoppingCriterion, register_criterion

    monkeypatch.setattr("harness.timing.stopping.STOPPING_CRITERIA", dict(STOPPING_CRITERIA))

    @register_criterion
    class FiveSamples(StoppingCriterion):
        name = "five"
        help = "five samples"

        def stop_reason(self, samples, elapsed_s):
            return STOP_MAX_SAMPLES if len(samples) >= 5 else None

    t = time_callable(lambda: None, CPU, TimingOptions.for_device(CPU, stop_criterion="five"))
    assert t["samples"] == 5 and t["stop_criterion"] == "five" and t["stop_reason"] == STOP_MAX_SAMPLES
    with pytest.raises(ValueError, match="registered twice"):
        register_criterion(FiveSamples)


# ---------------------------------------------------------------- CUDA graph eligibility
def test_required_graph_support_by_batch_shape():
    assert required_graph_support([1, 1, 1])[0] == CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert required_graph_support([4, 4])[0] == CudaGraphSupport.UNIFORM_BATCH
    assert required_graph_support([1, 7, 1])[0] == CudaGraphSupport.ALWAYS


@pytest.mark.parametrize("declared,qlens,safe,use,reason", [
    (CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE, [1] * 8, None, True, ""),
    (CudaGraphSupport.UNIFORM_BATCH, [1] * 8, None, True, ""),
    (CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE, [4, 4], None, False,
     "uniform batch (query_len 4) needs UNIFORM_BATCH, backend declares UNIFORM_SINGLE_TOKEN_DECODE"),
    (CudaGraphSupport.UNIFORM_BATCH, [1, 9, 1], None, False, "mixed batch needs ALWAYS, backend declares UNIFORM_BATCH"),
    (CudaGraphSupport.ALWAYS, [1, 9, 1], None, True, ""),
    (CudaGraphSupport.NEVER, [1], None, False, "backend declares NEVER"),
    (CudaGraphSupport.ALWAYS, [3, 5], "plan() on the host", False, "backend says not graph-safe: plan() on the host"),
])
def test_graph_decision(declared, qlens, safe, use, reason):
    d = graph_decision(declared, qlens, safe)
    assert (d.use, d.reason) == (use, reason)
    assert d.declared == declared.name


def test_graph_decision_user_switch_and_cpu():
    assert graph_decision(CudaGraphSupport.ALWAYS, [1], enabled=False).reason == "disabled by --no-cuda-graph"
    d = graph_decision(CudaGraphSupport.ALWAYS, [1], device_type="cpu")
    assert not d.use and d.reason == "n/a on cpu"


def test_calls_per_sample():
    hot = TimingOptions(min_sample_us=200, max_calls_per_sample=64)
    assert calls_per_sample(5.0, hot) == 40
    assert calls_per_sample(1.0, hot) == 64
    assert calls_per_sample(1000.0, hot) == 1
    assert calls_per_sample(5.0, TimingOptions(mode="cold")) == 1


def test_calls_per_sample_ignore_disturbed_estimates():
    # H200, 2026-12-02: two of three estimate samples of a 15.7 us call were disturbed (>200 us):
    # their median set 1 call per sample (the row came out +17.6%); the least of them sets 13.
    from harness.timing.loop import calls_from_estimates

    hot = TimingOptions(min_sample_us=200, max_calls_per_sample=64)
    assert calls_from_estimates([15.7e-6, 310e-6, 240e-6], hot) == 13


# ---------------------------------------------------------------- options
def test_options_validation():
    with pytest.raises(ValueError, match="timing mode"):
        TimingOptions.for_device(CPU, mode="lukewarm")
    with pytest.raises(ValueError, match="target noise"):
        TimingOptions.for_device(CPU, target_rel_noise=1.5)
    with pytest.raises(ValueError, match="below min samples"):
        TimingOptions.for_device(CPU, min_samples=10, max_samples=5)
    o = TimingOptions.for_device(CPU, min_samples=40)  # above the CPU default cap: the cap follows
    assert (o.min_samples, o.max_samples) == (40, 40)
    assert TimingOptions.for_device(torch.device("cuda")).target_rel_noise == 0.01
    assert TimingOptions().warm_samples is None  # auto: warm_samples_for
    with pytest.raises(ValueError, match="warm-up samples -1"):
        TimingOptions.for_device(CPU, warm_samples=-1)


def test_warm_samples_auto_gives_short_interleaved_hot_samples_a_second_copy():
    """Alone, a sample follows its own previous sample and one copy; in rounds another candidate's
    work comes first, so the default gives a short work two copies (a work of milliseconds one:
    its cost, SECOND_COPY_UNDER_US). Cold keeps one call before the flush; a value given is used
    as given in every order and at every size."""
    from harness.timing.interleave import SAMPLING_INTERLEAVED, SAMPLING_SEQUENTIAL
    from harness.timing.loop import SECOND_COPY_UNDER_US, warm_samples_for

    hot, cold = TimingOptions(), TimingOptions(mode="cold")
    short, long = 200.0, SECOND_COPY_UNDER_US
    assert warm_samples_for(hot, SAMPLING_INTERLEAVED, short) == warm_samples_for(hot, SAMPLING_INTERLEAVED) == 2
    assert warm_samples_for(hot, SAMPLING_INTERLEAVED, long) == 1
    assert warm_samples_for(hot, SAMPLING_SEQUENTIAL, short) == 1
    assert warm_samples_for(cold, SAMPLING_INTERLEAVED, short) == warm_samples_for(cold, SAMPLING_SEQUENTIAL, short) == 1
    for given in (0, 1, 3):
        opts = TimingOptions(warm_samples=given)
        assert {warm_samples_for(opts, s, w) for s in (SAMPLING_INTERLEAVED, SAMPLING_SEQUENTIAL)
                for w in (short, long)} == {given}


# ---------------------------------------------------------------- the CPU timing path
def test_time_callable_on_cpu_counts_every_call_and_records_how():
    calls = []
    x = torch.randn(64, 64)

    def fn():
        calls.append(1)
        return x @ x

    opts = TimingOptions.for_device(CPU, max_samples=12, min_samples=8, max_time_s=5.0)
    t = time_callable(fn, CPU, opts)
    assert len(calls) == opts.warmup + t["samples"]
    assert 8 <= t["samples"] <= 12
    assert t["method"] == "wall_clock" and t["l2"] == "n/a on CPU"
    assert t["cuda_graph"] == {"used": False, "reason": "n/a on CPU"}
    assert t["stop_reason"] in (STOP_NOISE, STOP_MAX_SAMPLES, STOP_TIME)
    assert t["min_us"] <= t["ci_low_us"] <= t["median_us"] <= t["ci_high_us"] <= t["max_us"]
    assert "raw_us" not in t
    t = time_callable(fn, CPU, TimingOptions.for_device(CPU, keep_raw=True, max_samples=6))
    assert len(t["raw_us"]) == t["samples"]


def test_cli_timing_flags(tmp_path):
    out = tmp_path / "r"
    rc = cli_main(["run", "ci/smoke.yaml", "--device", "cpu", "--backends", "torch-math", "--quiet",
                   "--case", "decode-gqa[block_size=16,count=1]", "--out", str(out),
                   "--timing-mode", "cold", "--max-samples", "7", "--target-noise", "0.2", "--no-isolation"])
    assert rc == 0
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    t = row["timing"]
    assert t["mode"] == "cold" and t["l2"] == "n/a on CPU"
    assert t["options"]["max_samples"] == 7 and t["samples"] <= 7
    assert t["stop_criterion"] == "noise"
    assert row["metrics"]["roofline"] == {"reason": "no ceilings on cpu"}
    assert cli_main(["run", "ci/smoke.yaml", "--device", "cpu", "--out", str(tmp_path / "x"),
                     "--target-noise", "5"]) == 2
    assert cli_main(["run", "ci/smoke.yaml", "--device", "cpu", "--out", str(tmp_path / "y"),
                     "--min-samples", "9", "--max-samples", "4"]) == 2
    out = tmp_path / "s"
    assert cli_main(["run", "ci/smoke.yaml", "--device", "cpu", "--backends", "torch-math", "--quiet",
                     "--case", "decode-gqa[block_size=16,count=1]", "--out", str(out),
                     "--stop", "samples", "--max-samples", "4", "--no-isolation"]) == 0
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["timing"]["samples"] == 4 and row["timing"]["stop_criterion"] == "samples"
    assert row["timing"]["stop_reason"] == STOP_MAX_SAMPLES and "fixed count" in row["timing"]["stop"]
    assert "--stop samples" in row["reproducer"]
    assert cli_main(["run", "ci/smoke.yaml", "--device", "cpu", "--out", str(tmp_path / "z"),
                     "--stop", "entropy"]) == 2


def test_flush_method_options_and_cold_label():
    from harness.timing import cold_l2_label

    assert TimingOptions().flush_method == "auto"
    for m in ("auto", "read", "write"):
        TimingOptions(flush_method=m).validate()
    with pytest.raises(ValueError, match="flush method"):
        TimingOptions(flush_method="rotate").validate()
    ok = {"method": "write", "verified": True, "ratio": 1.46, "min_ratio": 1.2}
    assert cold_l2_label(ok) == "verified (write flush, probe ratio 1.46 >= 1.2)"
    bad = {"method": "read", "verified": False, "ratio": 1.19, "min_ratio": 1.2, "selection": "neither flush verified"}
    assert cold_l2_label(bad).startswith("not verified (read flush, probe ratio 1.19 < 1.2")


# ---------------------------------------------------------------- GPU only (skipped here; run on the GPU)
cuda = pytest.mark.gpu  # skipped without CUDA (tests/conftest.py)


def test_eager_and_graph_rows_say_what_their_time_holds():
    from harness.timing.loop import time_contents

    cpu = time_contents("cpu", False, None, 1)
    assert cpu["timer"] == "host_clock" and cpu["host_time"]
    g = time_contents("cuda", True, 1.0, 4)
    assert g["timer"] == "cuda_graph_replay" and not g["launch_gaps"] and not g["host_time"]
    e = time_contents("cuda", False, 1.0, 4)
    assert e["timer"] == "eager_launches" and e["launch_gaps"] and not e["host_time"]
    assert "not comparable to a graph-replayed row" in e["note"]
    unhidden = time_contents("cuda", False, 0.0, 1)  # the call waits on the host: host time inside
    assert unhidden["host_time"] and "host time included" in unhidden["note"]
    # and every CPU timing record carries it
    rec = time_callable(lambda: sum(range(100)), torch.device("cpu"), TimingOptions(min_samples=3, max_samples=3))
    assert rec["contains"] == cpu


@cuda
def test_cuda_graph_and_eager_timing_of_a_matmul_say_what_they_hold():
    from harness.timing import GraphDecision

    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def fn():
        torch.matmul(a, a, out=out)

    opts = TimingOptions.for_device(dev)
    g = time_callable(fn, dev, opts, graph=GraphDecision(True, ""), output=out)
    e = time_callable(fn, dev, opts, graph=GraphDecision(False, "eager on purpose"), output=out)
    assert g["cuda_graph"]["used"] and not e["cuda_graph"]["used"]
    assert e["cuda_graph"]["reason"] == "eager on purpose"
    # Not "equal within 5%": on the H200 the same cuBLAS kernel runs slower launched eagerly than
    # replayed from a graph (4096^3 bf16: 208 us eager, 173 us graphed; reports/h200/2026-11-30/
    # evening). What holds: eager is never faster beyond noise, the gap is bounded, and each row
    # says what its time holds.
    assert e["median_us"] >= 0.97 * g["median_us"], (g["median_us"], e["median_us"])
    assert e["median_us"] <= 1.5 * g["median_us"], (g["median_us"], e["median_us"])
    assert g["contains"]["timer"] == "cuda_graph_replay" and not g["contains"]["launch_gaps"]
    assert e["contains"]["timer"] == "eager_launches" and e["contains"]["launch_gaps"]
    assert g["launch"]["hidden_frac"] > 0.9 and e["launch"]["hidden_frac"] > 0.9
    assert not e["contains"]["host_time"]  # launches hidden: the eager time holds no host time
    assert g["sm_clock_mhz"]["during_first"] > 100


@cuda
def test_cold_mode_is_verified_and_slower_for_an_l2_resident_read():
    from harness.timing import l2_bytes, select_flush

    dev = torch.device("cuda")
    check = select_flush(dev)  # auto: the method the probe verifies on this device
    assert check["verified"], check
    x = torch.ones(l2_bytes(dev) // 4 // 4, device=dev)  # a quarter of the L2
    sink = torch.zeros((), device=dev)

    def fn():
        torch.sum(x, dim=0, out=sink)

    hot = time_callable(fn, dev, TimingOptions.for_device(dev))
    cold = time_callable(fn, dev, TimingOptions.for_device(dev, mode="cold"))
    assert cold["cold_check"]["verified"] and cold["calls_per_sample"] == 1
    assert cold["cold_check"]["method"] == check["method"] and cold["cold_l2"].startswith("verified")
    assert cold["median_us"] > 1.1 * hot["median_us"], (hot["median_us"], cold["median_us"])


@cuda
def test_graph_replay_check_catches_host_state_baked_into_the_graph():
    from harness.timing import GraphDecision

    dev = torch.device("cuda")
    out = torch.zeros(4096, device=dev)
    counter = [0]

    def fn():  # the fill value is host state: a replay writes the value captured, not the current one
        counter[0] += 1
        out.fill_(float(counter[0]))

    t = time_callable(fn, dev, TimingOptions.for_device(dev, max_samples=20), graph=GraphDecision(True, ""),
                      output=out)
    assert not t["cuda_graph"]["used"] and "differs from the eager output" in t["cuda_graph"]["reason"]


@cuda
def test_capture_failure_falls_back_to_eager_and_says_why():
    from harness.timing import GraphDecision

    dev = torch.device("cuda")
    x = torch.ones(1024, device=dev)

    def fn():
        x.add_(1)
        x.sum().item()  # a host sync: not capturable

    stream = torch.cuda.current_stream(dev)
    t = time_callable(fn, dev, TimingOptions.for_device(dev, max_samples=20), graph=GraphDecision(True, ""))
    assert not t["cuda_graph"]["used"] and t["cuda_graph"]["reason"].startswith("capture failed")
    # and the failed capture left nothing behind: before, the generator stayed in capture mode
    # and the next GPU test's torch.randn raised (issue 44)
    assert torch.cuda.current_stream(dev) == stream and not torch.cuda.is_current_stream_capturing()
    torch.randn(16, device=dev)


@cuda
@pytest.mark.parametrize("how", ["captured", "host_sync", "random_then_host_sync", "raises"])
def test_a_graph_capture_leaves_no_global_state_behind(how):
    """After capture_graph, successful or failing mid-capture: the current stream is the one
    before, no capture is in progress, the default generator draws outside a capture, and a
    graph captured before still replays (its replay advances the same generator state)."""
    from harness.timing.graphs import capture_graph

    dev = torch.device("cuda")
    x = torch.ones(1024, device=dev)
    earlier = capture_graph(lambda: x.add_(1), 1, dev)
    stream = torch.cuda.current_stream(dev)

    def fn():
        x.add_(1)
        if not torch.cuda.is_current_stream_capturing():
            return  # the side-stream warm-up runs eagerly: only the capture fails
        if how == "random_then_host_sync":
            torch.randn(4, device=dev)  # the generator is used inside the capture
        if how in ("host_sync", "random_then_host_sync"):
            x.sum().item()  # a host sync: not capturable, the capture is invalidated
        if how == "raises":
            raise ValueError("the backend's own error, mid-capture")

    if how == "captured":
        capture_graph(fn, 2, dev).replay()
    else:
        with pytest.raises((RuntimeError, ValueError)):  # CUDA errors are RuntimeErrors (AcceleratorError)
            capture_graph(fn, 2, dev)
    assert torch.cuda.current_stream(dev) == stream
    assert not torch.cuda.is_current_stream_capturing()
    assert torch.randn(16, device=dev).isfinite().all()
    earlier.replay()
    torch.cuda.synchronize(dev)


@cuda
def test_the_cold_warm_up_replays_the_rows_own_graph():
    """Cold mode's warm-up before the flush is a copy of the sample's work: for a graph-replayed
    row, its graph, so the timed replay follows the row's own graph in rounds as in sequence; no
    eager call of the Python function while sampling (with or without the warm-up, the same
    number of eager calls: those of the set-up)."""
    from harness.timing import GraphDecision

    dev = torch.device("cuda")
    x = torch.ones(1 << 16, device=dev)
    calls = [0]

    def fn():
        calls[0] += 1
        x.add_(1)

    def eager_calls(warm: int) -> tuple[int, dict]:
        calls[0] = 0
        got = time_callable(fn, dev, TimingOptions.for_device(dev, mode="cold", max_time_s=0.3, warm_samples=warm),
                            graph=GraphDecision(True, ""))
        return calls[0], got

    without, plain = eager_calls(0)
    with_warm, warmed = eager_calls(1)
    assert plain["cuda_graph"]["used"] and warmed["cuda_graph"]["used"]
    assert warmed["warm_calls"] == 1 and warmed["samples"] >= 10
    assert with_warm == without, (with_warm, without, warmed["samples"])


@cuda
def test_a_hot_sample_reads_its_own_data_from_l2_in_interleaved_rounds():
    """Hot mode in rounds: a candidate that writes twice the L2 evicts the reader's data before
    each of the reader's samples. Without the warm-up call the reader's interleaved time moves
    toward its cold time; with it (the default) it stays at its time alone. One call per sample,
    so the first call is the whole sample. Self-calibrated against the cold time of the same read."""
    from harness.timing import GraphDecision, l2_bytes
    from harness.timing.loop import time_interleaved

    dev = torch.device("cuda")
    small = torch.ones(l2_bytes(dev) // 4 // 4, device=dev)  # a quarter of the L2
    big = torch.empty(2 * l2_bytes(dev) // 4, device=dev)  # twice the L2
    sink = torch.zeros((), device=dev)

    def read():
        torch.sum(small, dim=0, out=sink)

    def evict():
        big.fill_(1.0)

    def opts(**kw):
        return TimingOptions.for_device(dev, min_sample_us=1.0, max_time_s=0.5, **kw)

    graph = GraphDecision(True, "")
    alone = time_callable(read, dev, opts(), graph=graph)
    cold = time_callable(read, dev, opts(mode="cold"), graph=graph)
    assert alone["calls_per_sample"] == 1 and alone["warm_calls"] == 1 and cold["warm_calls"] == 1
    gap = cold["median_us"] - alone["median_us"]
    assert gap > 0.05 * alone["median_us"], (alone["median_us"], cold["median_us"])  # the read is L2-sensitive

    def rounds(warm: int) -> dict:
        got = time_interleaved({"read": (read, graph, None), "evict": (evict, graph, None)}, dev,
                               opts(warm_samples=warm))
        assert got["read"]["rounds"] == got["read"]["samples"] == got["evict"]["samples"]
        return got["read"]

    warmed, unwarmed, default = rounds(1), rounds(0), rounds(None)
    assert warmed["warm_calls"] == 1 and unwarmed["warm_calls"] == 0 and default["warm_calls"] == 2
    times = (alone["median_us"], warmed["median_us"], unwarmed["median_us"], cold["median_us"])
    assert unwarmed["median_us"] - alone["median_us"] > 0.5 * gap, times  # company evicted it
    assert abs(warmed["median_us"] - alone["median_us"]) < 0.25 * gap, times  # the warm call restored it
    assert abs(default["median_us"] - alone["median_us"]) < 0.25 * gap, (times, default["median_us"])
