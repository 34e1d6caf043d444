"""Interleaved rounds against a drifting stand-in (harness/timing/interleave.py): a "kernel" whose
duration grows with a global step counter (a clock falling as the GPU heats). Sampled one after
the other, two identical candidates show a false margin; in rounds they tie."""

from __future__ import annotations

import statistics

import pytest

from harness.timing import TimingOptions
from harness.timing.interleave import rank_from_rounds, round_ratios, sample_rounds
from harness.timing.loop import _loop

DRIFT = 0.001  # +0.1% per sample taken anywhere: 40 + 40 samples drift by 8%


class DriftingGpu:
    def __init__(self) -> None:
        self.step = 0

    def kernel(self, base_s: float):
        def take() -> float:
            s = base_s * (1 + DRIFT * self.step)
            self.step += 1
            return s
        return take


OPTS = TimingOptions.checked(stop_criterion="samples", min_samples=40, max_samples=40)


def margin(a: float, b: float) -> float:
    return abs(a / b - 1)


def test_sequential_order_makes_a_false_margin_between_identical_candidates():
    gpu = DriftingGpu()
    a, _, _ = _loop(gpu.kernel(100e-6), OPTS)
    b, _, _ = _loop(gpu.kernel(100e-6), OPTS)
    assert margin(statistics.median(b), statistics.median(a)) > 0.03  # B "slower" by ~4%: the drift


def test_interleaved_rounds_remove_it():
    gpu = DriftingGpu()
    r = sample_rounds({"A": gpu.kernel(100e-6), "B": gpu.kernel(100e-6)}, OPTS)
    assert r.rounds == 40 and len(r.samples["A"]) == len(r.samples["B"]) == 40
    assert margin(statistics.median(r.samples["B"]), statistics.median(r.samples["A"])) < 0.002
    assert statistics.median(round_ratios(r, "B", "A")) == pytest.approx(1.0, abs=0.002)
    assert set(r.reasons.values()) == {"max_samples"}


def test_a_real_difference_survives_the_drift_and_ranks_first():
    gpu = DriftingGpu()
    r = sample_rounds({"slow": gpu.kernel(103e-6), "fast": gpu.kernel(100e-6), "same": gpu.kernel(103e-6)}, OPTS)
    ranked = rank_from_rounds(r)
    assert ranked[0][0] == "fast"
    assert statistics.median(round_ratios(r, "slow", "fast")) == pytest.approx(1.03, abs=0.003)


def test_rejected_samples_are_retaken_within_the_round():
    gpu = DriftingGpu()
    inner = gpu.kernel(100e-6)
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        return None if calls["n"] % 3 == 0 else inner()

    r = sample_rounds({"A": flaky, "B": gpu.kernel(100e-6)}, OPTS)
    assert len(r.samples["A"]) == len(r.samples["B"]) == 40


def test_a_candidate_leaves_the_rounds_when_its_rule_is_met():
    # The steady ones stop together at min_samples, sharing every round; the noisy one goes on
    # alone (sampling every candidate until the last stops would cost the others' samples too).
    opts = TimingOptions.checked(min_samples=10, max_samples=60, target_rel_noise=0.001, max_time_s=100.0)
    noisy = iter([1.0, 1.2] * 100)
    r = sample_rounds({"steady": lambda: 1e-4, "also": lambda: 2e-4, "noisy": lambda: next(noisy) * 1e-4}, opts)
    assert len(r.samples["steady"]) == len(r.samples["also"]) == 10
    assert len(r.samples["noisy"]) == 60 and r.rounds == 60
    assert r.reasons == {"steady": "noise_target", "also": "noise_target", "noisy": "max_samples"}


def test_a_candidate_that_raises_is_dropped_the_others_go_on():
    gpu = DriftingGpu()
    n = {"k": 0}

    def breaks():
        n["k"] += 1
        if n["k"] == 5:
            raise RuntimeError("illegal memory access")
        return 1e-4

    r = sample_rounds({"A": gpu.kernel(1e-4), "bad": breaks}, OPTS)
    assert isinstance(r.errors["bad"], RuntimeError) and len(r.samples["A"]) == 40 and "bad" not in r.reasons


def test_time_interleaved_on_the_cpu_says_so_in_every_record():
    import torch

    from harness.timing.loop import time_interleaved

    opts = TimingOptions.for_device(torch.device("cpu"), min_samples=5, max_samples=5, stop_criterion="samples")

    def fails():
        raise ValueError("backend error")

    got = time_interleaved({"a": (lambda: sum(range(200)), None, None), "b": (lambda: sum(range(400)), None, None),
                            "c": (fails, None, None)}, torch.device("cpu"), opts)
    assert got["a"]["sampling"] == got["b"]["sampling"] == "interleaved"
    assert got["a"]["samples"] == got["b"]["samples"] == 5
    assert isinstance(got["c"], ValueError)  # its warm-up raised: only its record is the error


SMOKE = __import__("pathlib").Path(__file__).resolve().parent.parent / "ci" / "smoke.yaml"


@pytest.mark.parametrize("sampling", ["interleaved", "sequential"])
def test_the_cell_engine_samples_a_cases_candidates_as_asked(tmp_path, sampling):
    from harness.cli import main
    from harness.records.results import read_rows

    out = tmp_path / sampling
    assert main(["run", str(SMOKE), "--device", "cpu", "--no-isolation", "--quiet", "--sampling", sampling,
                 "--case", "decode-gqa*", "--out", str(out)]) == 0
    rows = read_rows(out)
    timed = [r for r in rows if r.timing is not None]
    assert len({r.backend for r in timed}) >= 2  # at least two candidates per case
    assert {r.timing.sampling for r in timed} == {sampling}
    for r in timed:  # a cell's time is its own stages and its share of the rounds, not the others' wait
        assert r.host.breakdown_ms["timing"] > 0 and r.host.cell_ms >= r.host.breakdown_ms["timing"]
        assert r.check is not None and r.check.passed and len(r.check.rechecks) == 2  # re-checked after timing


def test_auto_is_sequential_on_the_cpu_and_a_lone_cell_is_never_interleaved():
    import torch

    from harness.cell.case import interleave
    from harness.plan.cells import RunOptions

    cells = [object(), object()]
    auto = RunOptions(device=torch.device("cpu"), timing=TimingOptions.for_device(torch.device("cpu")))
    assert not interleave(cells, auto)
    asked = RunOptions(device=torch.device("cpu"), timing=TimingOptions.checked(sampling="interleaved"))
    assert not interleave(cells[:1], asked)
    assert not interleave(cells, RunOptions(device=torch.device("cpu"), time=False,
                                            timing=TimingOptions.checked(sampling="interleaved")))


def test_cells_that_do_not_fit_together_are_sampled_one_after_another():
    import torch

    from harness.plan.memory import MiB, MemoryEstimate, together_reason

    est = MemoryEstimate(kv_cache=1000 * MiB, logical=0, qkv=0, ref=0, metadata=0, generate=10 * MiB,
                         reference=10 * MiB, cell=1200 * MiB)
    dev = torch.device("cuda")
    # Asked once the case's batch exists: the budget is what is free then, each cell's own part counts
    assert together_reason([est, est, est], 4000 * MiB, dev) is None  # 3 x 1200
    why = together_reason([est, est, est, est], 4000 * MiB, dev)
    assert why and "4 cells together" in why and "4,800 MiB" in why
