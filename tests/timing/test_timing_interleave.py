"""Interleaved rounds against a drifting stand-in (harness/timing/interleave.py): a "kernel" whose
duration grows with a global step counter (a clock falling as the GPU heats). Sampled one after
the other, two identical candidates show a false margin; in rounds they tie.

And the rounds' own rules: complete rounds (every candidate one sample per round, whatever
stopping rule fires when), one stop per case bounded by its overtime budget, the hot warm-up
call right before every timed sample (a log of real callables), no hang on a candidate that
never samples."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.timing import TimingOptions
from harness.timing.interleave import (CASE_ALL_MET, CASE_DROPPED, CASE_OVERTIME, MAX_DROPPED_ROUNDS,
                                       MAX_REJECTS_PER_ROUND, Candidate, rank_from_rounds, round_ratios,
                                       sample_rounds, stop_sentence)
from harness.timing.loop import _loop, kept_clocks

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


def test_rounds_are_complete_when_the_rules_fire_at_different_times():
    # Stopping rules met after 10, 10, ~21 and 60 samples: every candidate stays in the rounds
    # until the last rule is met, so each has one sample per round and none was sampled alone.
    opts = TimingOptions.checked(min_samples=10, max_samples=60, target_rel_noise=0.001, max_time_s=100.0)
    noisy = iter([1.0, 1.2] * 100)
    settles = iter([1.0, 1.3] * 5 + [1.0] * 200)  # noisy for 10 samples, then steady
    r = sample_rounds({"steady": lambda: 1e-4, "also": lambda: 2e-4, "settles": lambda: next(settles) * 1e-4,
                       "noisy": lambda: next(noisy) * 1e-4}, opts)
    assert r.rounds == 60 and {len(v) for v in r.samples.values()} == {60}
    assert r.met_after["steady"] == r.met_after["also"] == 10
    assert 10 < r.met_after["settles"] < 60 and r.met_after["noisy"] == 60
    assert r.reasons == {"steady": "noise_target", "also": "noise_target", "settles": "noise_target",
                         "noisy": "max_samples"}
    assert r.stop == CASE_ALL_MET and r.dropped == 0


class SimClock:
    """Seconds on a stand-in's clock: a take advances it by its own duration."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def kernel(self, seconds: float, values=None):
        def take() -> float:
            self.t += seconds
            return seconds * (next(values) if values is not None else 1.0)
        return take


def test_the_overtime_budget_stops_a_case_a_noisy_fast_row_would_keep_going():
    # The slow row (1/16 s a sample) meets its rule after 10 samples; the noisy fast one never
    # would before its 500-sample cap. The slow row's samples after its rule are the case's
    # overtime: once they cost max_time_s (1 s: 16 more rounds) the case stops, together.
    clock = SimClock()
    opts = TimingOptions.checked(min_samples=10, max_samples=500, target_rel_noise=0.001, max_time_s=1.0,
                                 long_call_ms=None)
    noisy = iter([1.0, 1.2] * 500)
    r = sample_rounds({"slow": clock.kernel(0.0625), "fast": clock.kernel(2.0 ** -10, noisy)}, opts, clock=clock.now)
    assert r.rounds == 26 and len(r.samples["slow"]) == len(r.samples["fast"]) == 26
    assert r.met_after == {"slow": 10} and r.stop == CASE_OVERTIME and r.overtime_s == 1.0
    assert r.reasons == {"slow": "noise_target", "fast": "time_budget"}
    assert r.elapsed["slow"] == 26 * 0.0625  # its own seconds, overtime included


class CallLog:
    """Real callables that append what ran, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def candidate(self, name: str, reject_every: int = 0) -> Candidate:
        n = {"takes": 0}

        def warm() -> None:
            self.events.append(("warm", name))

        def take() -> float | None:
            self.events.append(("take", name))
            n["takes"] += 1
            return None if reject_every and n["takes"] % reject_every == 0 else 1e-4

        return Candidate(take, None, warm)

    def assert_warm_before_every_take(self) -> None:
        takes = [i for i, e in enumerate(self.events) if e[0] == "take"]
        assert takes and all(i > 0 and self.events[i - 1] == ("warm", self.events[i][1]) for i in takes)
        assert sum(e[0] == "warm" for e in self.events) == len(takes)


def test_the_warm_call_precedes_every_timed_sample_in_rounds_and_alone():
    log = CallLog()
    r = sample_rounds({"A": log.candidate("A"), "B": log.candidate("B", reject_every=3), "C": log.candidate("C")},
                      OPTS)
    log.assert_warm_before_every_take()  # retakes of a rejected sample included
    assert [e[1] for e in log.events[:6:2]] == ["A", "B", "C"]  # one round: A B C
    assert r.rounds == 40 and {len(v) for v in r.samples.values()} == {40}
    alone = CallLog()
    c = alone.candidate("A", reject_every=4)
    samples, _, _ = _loop(c.take, OPTS, None, c.warm)
    alone.assert_warm_before_every_take()
    assert len(samples) == 40


def test_a_round_a_candidate_could_not_sample_is_dropped_for_all():
    n = {"k": 0}

    def gives_up_once():  # rejects MAX_REJECTS_PER_ROUND samples in a row in its third round
        n["k"] += 1
        return None if 3 <= n["k"] < 3 + MAX_REJECTS_PER_ROUND else 1e-4

    r = sample_rounds({"A": lambda: 1e-4, "flaky": gives_up_once}, OPTS)
    assert r.dropped == 1 and r.rounds == 40 and len(r.samples["A"]) == len(r.samples["flaky"]) == 40


def test_a_case_whose_rounds_never_complete_ends_with_an_error_not_a_hang():
    r = sample_rounds({"A": lambda: 1e-4, "never": lambda: None}, OPTS)
    assert r.stop == CASE_DROPPED and r.dropped == MAX_DROPPED_ROUNDS and r.rounds == 0
    assert set(r.errors) == {"A", "never"} and "no complete round" in str(r.errors["A"])


def test_the_stop_sentence_says_what_set_the_sample_count():
    opts = TimingOptions.checked(min_samples=10, max_time_s=2.0)
    summary = {"samples": 24, "rel_ci_half_width": 0.004}
    assert stop_sentence("noise_target", 24, 24, CASE_ALL_MET, summary, opts) is None  # its own rule, last round
    early = stop_sentence("noise_target", 10, 24, CASE_ALL_MET, summary, opts)
    assert early and "met after 10 samples" in early and "24 complete rounds" in early
    cut = stop_sentence("time_budget", None, 24, CASE_OVERTIME, summary, opts)
    assert cut and "overtime budget 2 s" in cut and "24 samples" in cut


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
    assert got["a"]["samples"] == got["b"]["samples"] == got["a"]["rounds"] == 5
    assert got["a"]["warm_calls"] == 0  # no warm-up on the CPU
    assert isinstance(got["c"], ValueError)  # its warm-up raised: only its record is the error


SMOKE = __import__("pathlib").Path(__file__).resolve().parents[2] / "ci" / "smoke.yaml"


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
    by_case: dict[str, set[int]] = {}
    for r in timed:  # interleaved: a case's rows share their complete rounds; sequential: no rounds
        assert r.timing.rounds == (r.timing.samples if sampling == "interleaved" else None)
        by_case.setdefault(r.case, set()).add(r.timing.samples)
    if sampling == "interleaved":
        assert all(len(counts) == 1 for counts in by_case.values()), by_case
    for r in timed:  # a cell's time is its own stages and its share of the rounds, not the others' wait
        assert r.host.breakdown_ms["timing"] > 0 and r.host.cell_ms >= r.host.breakdown_ms["timing"]
        assert r.check is not None and r.check.passed and len(r.check.rechecks) == 2  # re-checked after timing


def test_auto_is_sequential_on_the_cpu_and_a_lone_cell_is_never_interleaved():
    import torch

    from harness.cell.case import hold_together as interleave
    from harness.plan.cells import RunOptions

    cells = [object(), object()]
    auto = RunOptions(device=torch.device("cpu"), timing=TimingOptions.for_device(torch.device("cpu")))
    assert not interleave(cells, auto)
    asked = RunOptions(device=torch.device("cpu"), timing=TimingOptions.checked(sampling="interleaved"))
    assert not interleave(cells[:1], asked)
    assert not interleave(cells, RunOptions(device=torch.device("cpu"), time=False,
                                            timing=TimingOptions.checked(sampling="interleaved")))


def test_sequential_on_a_gpu_holds_the_cases_cells_as_rounds_do():
    """--sampling sequential on a GPU: the case's timed cells are prepared and held together (the
    placement rounds give them) and timed in turn, where they fit; on the CPU, or where they do not
    fit, each is prepared, timed and freed before the next (issue 44)."""
    import torch

    from harness.cell.case import hold_together
    from harness.plan.cells import RunOptions, plan_cells
    from harness.registry import resolve
    from harness.spec import load_suite

    suite = load_suite(SMOKE)
    cpu = RunOptions(device=torch.device("cpu"))
    cells = [c for c in plan_cells(suite, [resolve("sdpa"), resolve("flex-attention")], cpu)
             if c.case.name == suite.cases[0].name]
    assert len(cells) >= 2
    seq = TimingOptions.checked(sampling="sequential")
    fits = RunOptions(device=torch.device("cuda"), timing=seq, fit_together=lambda cs: None)
    assert hold_together(cells, fits)
    assert not hold_together(cells, RunOptions(device=torch.device("cuda"), timing=seq,
                                               fit_together=lambda cs: "do not fit"))
    assert not hold_together(cells, RunOptions(device=torch.device("cpu"), timing=seq, fit_together=lambda cs: None))


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


def test_the_interleave_diagnostic_rotates_modes_and_judges_every_row():
    from harness.tools.diag.interleave import MODES, markdown, rotation, table

    assert [rotation(i)[0] for i in range(4)] == MODES and all(sorted(rotation(i)) == sorted(MODES) for i in range(9))

    def runs(hot_ratio: float, cold_ratio: float, n: int = 3) -> dict:
        base = {"r1": 10.0, "r2": 20.0}
        scale = {"interleaved-hot": hot_ratio, "sequential-hot": 1.0, "interleaved-cold": 1.5 * cold_ratio,
                 "sequential-cold": 1.5}
        return {mode: [{k: {"median_us": v * f * (1 + 0.001 * i)} for k, v in base.items()} for i in range(n)]
                for mode, f in scale.items()}

    ok = table(runs(1.004, 0.997), 0.01)
    assert ok["ok"] and ok["verdict"].startswith("every row within 1%")
    r1 = next(r for r in ok["rows"] if r["row"] == "r1")
    assert r1["ratio_hot"] == pytest.approx(1.004) and r1["sequential-hot"]["runs"] == 3
    assert r1["sequential-hot"]["spread"] == pytest.approx(0.002, rel=0.01)
    bad = table(runs(1.06, 1.0), 0.01)  # the company effect issue 44 measured: +6% hot, cold agreeing
    assert not bad["ok"] and len(bad["outside"]) == 2 and "NOT every row" in bad["verdict"]
    # 3 runs a mode 0.1% apart: the interval resolves a 6% shift
    assert all("(hot: 1.060, 95% CI 1.05" in o and "do not resolve" not in o for o in bad["outside"])
    gone = runs(1.0, 1.0)
    gone["sequential-cold"] = []  # a mode without runs is not a pass
    assert not table(gone, 0.01)["ok"] and not table({}, 0.01)["ok"]
    # each run's fastest sample: a ratio of it beside the judged one (a shift of the whole distribution
    # moves both; H100 2026-12-07: medians 0.982, fastest samples 0.98)
    with_min = runs(1.0, 0.982)
    for rs in with_min.values():
        for run in rs:
            for v in run.values():
                v["min_us"] = v["median_us"] * 0.98
    shifted = table(with_min, 0.01)
    assert shifted["rows"][0]["fastest_ratio_cold"] == pytest.approx(0.982, rel=1e-3)
    assert shifted["rows"][0]["fastest_ratio_hot"] == pytest.approx(1.0, rel=1e-3)
    assert table(runs(1.0, 1.0), 0.01)["rows"][0]["fastest_ratio_cold"] is None  # runs without it: none, no error
    assert "| 0.982 (0.982) [0.98" in markdown(shifted, "# t")
    hot_only = {k: v for k, v in runs(1.004, 1.5).items() if k.endswith("-hot")}
    assert table(hot_only, 0.01, ["hot"])["ok"]  # --l2 hot: judged on hot alone
    assert not table(hot_only, 0.01)["ok"]  # both asked, cold missing


def test_the_interleave_diagnostic_says_whether_its_runs_resolve_a_ratio_outside_1pc():
    from harness.tools.diag.interleave import ratio_ci, table

    # per-run medians of the H100's FlashInfer CUDA-core mha[count=1] row, hot L2, 2026-12-07 (seventh
    # session, interleave-hot-fi): 1.013 by the medians over 8 runs, each mode's runs spread 3-5%
    inter = [13.634, 13.655, 13.456, 13.444, 13.28, 13.669, 13.31, 13.526]
    seq = [13.105, 13.45, 13.417, 13.152, 13.312, 13.737, 13.15, 13.335]
    lo, hi = ratio_ci(inter, seq)
    assert lo < 1 < hi and ratio_ci(inter, seq) == (lo, hi)  # seeded: the same runs, the same interval
    assert ratio_ci(inter[:2], seq) is None  # two runs: no interval
    runs = {"interleaved-hot": [{"r": {"median_us": x}} for x in inter],
            "sequential-hot": [{"r": {"median_us": x}} for x in seq]}
    t = table(runs, 0.01, ["hot"])
    assert not t["ok"] and "(hot: 1.013, 95% CI" in t["outside"][0] and "the runs do not resolve it" in t["outside"][0]
    # the same shift with a tenth of the spread is resolved
    tight = {m: [{"r": {"median_us": 13.4 + (x - 13.4) / 10 + (0.17 if m.startswith("inter") else 0)}}
                 for x in xs] for m, xs in (("interleaved-hot", seq), ("sequential-hot", seq))}
    t = table(tight, 0.01, ["hot"])
    assert not t["ok"] and "do not resolve" not in t["outside"][0] and t["rows"][0]["ci_hot"][0] > 1.01



def test_the_interleave_diagnostic_pools_earlier_runs_without_running(tmp_path, capsys):
    from harness.tools.diag.interleave import main

    def experiment(name: str, inter: list[float], seq: list[float]) -> Path:
        # what `harness diag interleave --l2 hot` writes in summary.json: each mode's runs, row -> figures
        folder = tmp_path / name
        folder.mkdir()
        per_run = {"interleaved-hot": [{"r": {"median_us": x, "min_us": x * 0.99}} for x in inter],
                   "sequential-hot": [{"r": {"median_us": x, "min_us": x * 0.99}} for x in seq]}
        (folder / "summary.json").write_text(json.dumps({"l2": ["hot"], "per_run": per_run}))
        return folder

    # two experiments of 4 runs a mode on one row, 1.02 and 1.00 alone: pooled, 8 runs a mode
    a = experiment("a", [10.2, 10.25, 10.15, 10.2], [10.0, 10.05, 9.95, 10.0])
    b = experiment("b", [10.0, 10.05, 9.95, 10.0], [10.0, 10.05, 9.95, 10.0])
    assert main(["--out", str(tmp_path / "pooled"), "--l2", "hot", "--read", str(a), "--read", str(b)]) == 0
    summary = json.loads((tmp_path / "pooled" / "summary.json").read_text())
    row = summary["rows"][0]
    assert row["interleaved-hot"]["runs"] == 8 and row["sequential-hot"]["runs"] == 8
    assert row["ratio_hot"] == pytest.approx(10.1 / 10.0)  # medians over the pooled runs (not of the two ratios)
    lo, hi = row["ci_hot"]
    assert lo <= row["ratio_hot"] <= hi and summary["devices"] == ["?", "?"]  # no run folders: device unknown
    assert "pooled" in (tmp_path / "pooled" / "interleave.md").read_text()
    # a folder without the asked mode, and one without a summary: one line each, exit 2
    assert main(["--out", str(tmp_path / "x"), "--l2", "cold", "--read", str(a)]) == 2
    assert "no interleaved-cold runs" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "x"), "--l2", "hot", "--read", str(tmp_path / "x")]) == 2
    assert "no readable summary.json" in capsys.readouterr().err


def test_each_kept_sample_keeps_its_own_hold_clock_when_rounds_were_dropped():
    # five accepted takes; the second and fourth fell in rounds another candidate could not sample
    taken = [(1.0, 1980.0), (1.2, 1700.0), (1.1, 1965.0), (1.0, 1800.0), (1.3, None)]
    assert kept_clocks(taken, [1.0, 1.1, 1.3]) == [1980.0, 1965.0, None]
    assert kept_clocks(taken, [1.0, 1.0]) == [1980.0, 1800.0]  # equal values: matched in order
    assert kept_clocks(taken, []) == []
