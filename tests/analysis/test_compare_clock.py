"""The clock-aware gate on synthesized GPU rows (harness/analysis/compare_clock.py): a time shift the SM clock
explains is clock-shifted (exit 0); the same shift at the same clock fails; a correctness change
always fails; rows of two clock regimes are refused, not judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.analysis.compare import compare_paths, compare_rows, to_markdown
from harness.analysis.compare_clock import clock_explains, refuse_mixed_runs
from harness.records.clocks import regime_of
from harness.records.results import ResultRow, row_json
from helpers.typed_rows import as_status, gpu_row, ran_row

STEADY = [("c1", 100.0), ("c2", 50.0), ("c3", 200.0), ("c4", 80.0), ("c5", 120.0)]


def runs(moved: ResultRow, base_moved: ResultRow, regime: str = "burst") -> tuple[list[ResultRow], list[ResultRow]]:
    base = [gpu_row(c, m, regime=regime) for c, m in STEADY] + [base_moved]
    new = [gpu_row(c, m * 1.001, regime=regime) for c, m in STEADY] + [moved]
    return base, new


def test_a_shift_the_clock_explains_is_clock_shifted_not_a_regression():
    # The issue's pair: 267.2 -> 292.7 us (+9.5%) while the clock fell 1980 -> 1800 MHz (-9.1%).
    base, new = runs(gpu_row("fa3", 292.7, mhz=1800.0), gpu_row("fa3", 267.2, mhz=1980.0))
    comp = compare_rows(base, new)
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted" and not d.problem
    assert "1980 -> 1800 MHz" in d.info and "+9.5%" in d.info
    assert not comp.regressed
    assert "Clock-shifted" in to_markdown(comp)


def test_a_clock_shift_names_nvmls_reasons_on_the_slower_side():
    # schema 7 rows carry why the clock was below its maximum; the message names the lower side's
    base, new = runs(gpu_row("fa3", 292.7, mhz=1800.0, reasons={"sw_power_cap": 12, "none": 3}),
                     gpu_row("fa3", 267.2, mhz=1980.0))
    d = next(x for x in compare_rows(base, new).diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted" and "sw_power_cap 12, none 3" in d.info
    base, new = runs(gpu_row("fa3", 267.2, mhz=1980.0), gpu_row("fa3", 292.7, mhz=1800.0, reasons={"hw_slowdown": 4}))
    d = next(x for x in compare_rows(base, new).diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted" and "hw_slowdown 4" in d.info


def test_the_same_shift_at_the_same_clock_fails():
    base, new = runs(gpu_row("fa3", 292.7, mhz=1975.0), gpu_row("fa3", 267.2, mhz=1980.0))
    comp = compare_rows(base, new)
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "slower" and comp.regressed
    assert "does not explain it" in d.problem


def test_a_shift_beyond_what_the_clock_explains_fails():
    # The clock fell 5%: at most +5.3% for a compute-bound kernel; +30% has another cause.
    base, new = runs(gpu_row("fa3", 130.0, mhz=1881.0), gpu_row("fa3", 100.0, mhz=1980.0))
    comp = compare_rows(base, new)
    assert next(x for x in comp.diffs if x.key[1] == "fa3").speed == "slower" and comp.regressed


def test_slower_at_a_higher_clock_is_not_the_clock():
    base, new = runs(gpu_row("fa3", 110.0, mhz=1980.0), gpu_row("fa3", 100.0, mhz=1800.0))
    assert compare_rows(base, new).regressed


def test_faster_at_a_higher_clock_is_clock_shifted():
    base, new = runs(gpu_row("fa3", 91.0, mhz=1980.0), gpu_row("fa3", 100.0, mhz=1800.0))
    d = next(x for x in compare_rows(base, new).diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted"


def test_a_correctness_change_fails_whatever_the_clock():
    moved = as_status(gpu_row("fa3", 292.7, mhz=1800.0), "mismatch", "max abs err 0.5 > tol")
    base, new = runs(moved, gpu_row("fa3", 267.2, mhz=1980.0))
    comp = compare_rows(base, new)
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert comp.regressed and d.problem.startswith("correctness")


def test_rows_without_clocks_are_judged_as_before():
    base, new = runs(gpu_row("fa3", 292.7, mhz=None), gpu_row("fa3", 267.2, mhz=None))
    assert compare_rows(base, new).regressed
    assert clock_explains(base[-1], new[-1], 292.7 / 267.2, 0.0) == ""


def test_a_row_of_another_regime_is_listed_not_judged():
    base, new = runs(gpu_row("fa3", 400.0, regime="sustained"), gpu_row("fa3", 267.2))
    comp = compare_rows(base, new)
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "other regime" and not d.problem and "burst" in d.info and "sustained" in d.info
    assert not comp.regressed


def _write(rows: list[ResultRow], path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "results.jsonl").write_text("".join(row_json(r) + "\n" for r in rows))
    return path


def test_runs_of_two_regimes_are_refused_with_a_clear_message(tmp_path, capsys):
    base = [gpu_row(c, m, regime="burst") for c, m in STEADY]
    new = [gpu_row(c, m * 1.08, mhz=1700.0, regime="sustained") for c, m in STEADY]
    msg = refuse_mixed_runs(base, new)
    assert msg and "burst" in msg and "sustained" in msg and "--correctness-only" in msg
    a, b = _write(base, tmp_path / "a"), _write(new, tmp_path / "b")
    with pytest.raises(ValueError, match="different GPU states"):
        compare_paths(a, b)
    assert main(["compare", str(a), str(b)]) == 2
    assert "not compared" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--correctness-only"]) == 0


def test_compare_exits_0_on_a_clock_shift_and_1_on_the_same_shift_at_one_clock(tmp_path, capsys):
    base, new = runs(gpu_row("fa3", 292.7, mhz=1800.0), gpu_row("fa3", 267.2, mhz=1980.0))
    assert main(["compare", str(_write(base, tmp_path / "a")), str(_write(new, tmp_path / "b"))]) == 0
    base, new = runs(gpu_row("fa3", 292.7, mhz=1980.0), gpu_row("fa3", 267.2, mhz=1980.0))
    assert main(["compare", str(_write(base, tmp_path / "c")), str(_write(new, tmp_path / "d"))]) == 1
    capsys.readouterr()


def test_regime_of_rows():
    assert regime_of(gpu_row("x", 1.0, regime="sustained")) == "sustained"
    assert regime_of(gpu_row("x", 1.0, regime=None)) == "burst"  # written before regimes: burst
    assert regime_of(ran_row(1.0, device="cpu")) is None


def test_clock_summary_says_which_state_the_numbers_are_from():
    from harness.records.clocks import clock_summary

    rows = [gpu_row("a", 100.0, mhz=1980.0), gpu_row("b", 90.0, mhz=1950.0)]
    text = clock_summary(rows)
    assert text.startswith("GPU clock regime: burst") and "1950-1980 MHz" in text and "(max 1980)" in text
    mixed = clock_summary(rows + [gpu_row("c", 100.0, regime="sustained")])
    assert "burst and sustained (mixed" in mixed
    assert "reasons" not in text  # nothing recorded, nothing said
    why = clock_summary(rows + [gpu_row("e", 1.0, mhz=1785.0, reasons={"none": 2, "sw_power_cap": 1}),
                                gpu_row("f", 1.0, mhz=1785.0, reasons={"sw_power_cap": 4})])
    assert "below the max SM clock (reads): sw_power_cap 5, none 2" in why
    assert clock_summary([ran_row(1.0, device="cpu")]) is None  # CPU rows: no regime
    old = clock_summary([gpu_row("d", 1.0, regime=None)])
    assert "burst" in old and "not read" in old


def test_recommend_ranks_one_regime_at_a_time():
    from harness.analysis.recommend.load import RecommendError, inputs_of

    rows = [gpu_row("a", 100.0), gpu_row("b", 100.0, regime="sustained")]
    with pytest.raises(RecommendError, match="two clock regimes"):
        inputs_of(rows, [])
    notes = inputs_of([gpu_row("a", 100.0)], []).notes
    assert any(n.startswith("GPU clock regime: burst") for n in notes)


def test_the_runs_closing_verdict_names_the_regime_and_clocks():
    from rich.console import Console

    from harness.report.terminal.tables import print_verdict

    rows = [gpu_row("c1", 100.0, mhz=1980.0), ran_row(120.0, 119.0, 121.0, case="c1", backend="other",
                                                      device="cuda:0")]
    rows[1] = ResultRow.model_validate({**rows[1].model_dump(), "timing": {**gpu_row("c1", 120.0, mhz=1960.0)
                                                                           .timing.model_dump()}})
    con = Console(record=True, width=200)
    print_verdict(rows, {("b", ""): "A", ("other", ""): "B"}, con)
    text = con.export_text()
    assert "GPU clock regime: burst; SM clock 1960-1980 MHz" in text
    cpu = Console(record=True, width=200)
    print_verdict([ran_row(10.0, device="cpu")], {("b", ""): "A"}, cpu)
    assert "clock regime" not in cpu.export_text()


def test_the_gate_runs_in_the_baselines_regime(tmp_path):
    import argparse
    import json

    from harness.cli.commands.gate import run_args

    base = tmp_path / "base"
    base.mkdir()
    (base / "run.json").write_text(json.dumps({"clock_regime": "sustained"}))
    args = argparse.Namespace(case=[], variant=[], max_time=None, cpu_clock=None, no_isolation=False,
                              clock_regime=None, baseline=base)
    assert run_args(args)[-2:] == ["--clock-regime", "sustained"]
    args.clock_regime = "burst"  # --clock-regime given: it wins
    assert run_args(args)[-2:] == ["--clock-regime", "burst"]
    args.clock_regime, args.baseline = None, tmp_path / "cpu-baseline"  # no run.json regime: nothing added
    assert "--clock-regime" not in run_args(args)


def test_remeasuring_a_clock_shifted_row():
    from harness.analysis.compare_confirm import confirm_slowdowns

    base, new = runs(gpu_row("fa3", 292.7, mhz=1800.0), gpu_row("fa3", 267.2, mhz=1980.0))
    # re-measured at the baseline's clock and as fast: it stays clock-shifted, the re-run named
    comp = compare_rows(base, new)
    confirm_slowdowns(comp, [[gpu_row("fa3", 267.5, mhz=1980.0)]])
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted" and "re-measured: +0.1%" in d.info and not comp.regressed
    # re-measured slower at the baseline's clock every time: a regression after all
    comp = compare_rows(base, new)
    confirm_slowdowns(comp, [[gpu_row("fa3", 292.0, mhz=1980.0)], [gpu_row("fa3", 293.0, mhz=1975.0)]])
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "slower" and comp.regressed and "does not explain" in d.problem


def test_a_slowdown_is_not_confirmed_by_a_remeasurement_the_clock_explains():
    from harness.analysis.compare_confirm import confirm_slowdowns

    base, new = runs(gpu_row("fa3", 292.7, mhz=1980.0), gpu_row("fa3", 267.2, mhz=1980.0))
    comp = compare_rows(base, new)
    confirm_slowdowns(comp, [[gpu_row("fa3", 292.0, mhz=1800.0)]])
    d = next(x for x in comp.diffs if x.key[1] == "fa3")
    assert d.speed == "ambiguous" and not comp.regressed


# Two read sets of one second of one power-limited loop, measured (reports/h100/2026-12-07/
# fifth-session/callforms/sustained, FA4 vllm orient-gqa-b16-32k-p64): the samples' reads and the
# settled stretch's. Same state; medians 3.5% apart, means 0.05%.
LIMIT_HIGH_MEDIAN = {"min": 1605.0, "median": 1740.0, "max": 1815.0, "mean": 1711.5}
LIMIT_LOW_MEDIAN = {"min": 1605.0, "median": 1680.0, "max": 1815.0, "mean": 1710.6}


def test_a_median_that_jumps_a_clock_level_does_not_excuse_a_slowdown():
    # +4% at the same power-limited state, judged at a 3% threshold (`--threshold 0.03`): by the
    # medians (1740 -> 1680 MHz, -3.4%) the clock would explain it; by the means the clock did
    # not move, so it is a regression.
    base, new = runs(gpu_row("fa4", 104.0, regime="sustained", sm_mhz=LIMIT_LOW_MEDIAN),
                     gpu_row("fa4", 100.0, regime="sustained", sm_mhz=LIMIT_HIGH_MEDIAN), regime="sustained")
    comp = compare_rows(base, new, threshold=0.03)
    d = next(x for x in comp.diffs if x.key[1] == "fa4")
    assert d.speed == "slower" and comp.regressed
    assert "does not explain it" in d.problem


def test_a_row_without_a_mean_is_compared_by_medians():
    # A baseline written before schema 6 has no mean: both sides use the median, so a real clock
    # fall (1980 -> 1800 MHz) still explains a +9.5% shift when the new row also has a mean.
    new_clock = {"min": 1780.0, "median": 1800.0, "max": 1815.0, "mean": 1900.0}
    base, new = runs(gpu_row("fa3", 292.7, sm_mhz=new_clock), gpu_row("fa3", 267.2, mhz=1980.0))
    d = next(x for x in compare_rows(base, new).diffs if x.key[1] == "fa3")
    assert d.speed == "clock-shifted" and "1980 -> 1800 MHz" in d.info
