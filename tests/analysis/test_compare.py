"""The regression gate: it fires on a slowdown beyond the noise, on a wrong result, on a missing
or newly skipped row, and stays quiet on two real runs of the same code."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.analysis.compare import classify_speed, compare_paths, compare_rows, parse_threshold, to_markdown
from harness.records.results import ResultRow, Timing, read_rows, row_json
from helpers.typed_rows import as_status, ran_row

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"
SMOKE = ROOT / "ci" / "smoke.yaml"
H200 = ROOT / "tests" / "data" / "h200" / "session-a"  # copies of reports/h200/2026-11-29 rows


def _write(rows: list[ResultRow], path: Path) -> Path:
    path.write_text("".join(row_json(r) + "\n" for r in rows))
    return path


def _row(median: float, lo: float, hi: float, **kw) -> ResultRow:
    return ran_row(median, lo, hi, **kw)


@pytest.fixture(scope="module")
def real_rows() -> list[ResultRow]:
    """Real CPU results of ci/smoke.yaml (the committed baseline)."""
    rows = read_rows(BASELINE)
    assert any(r.status == "pass" and r.timing for r in rows)
    return rows


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two real CPU runs of the same code on part of ci/smoke.yaml (timed)."""
    outs = []
    for i in range(2):
        out = tmp_path_factory.mktemp(f"run{i}") / "res"
        rc = main(["run", str(SMOKE), "--device", "cpu", "--out", str(out), "--quiet", "--no-isolation",
                   "--case", "decode-context[[]context_len=32]", "--case", "softcap-sinks"])
        assert rc == 0
        outs.append(out)
    return outs[0], outs[1]


# ---------------------------------------------------------------- classification rules
@pytest.mark.parametrize("base, new, expected", [
    ((100, 98, 102), (103, 101, 105), "same"),       # within the threshold
    ((100, 98, 102), (130, 128, 132), "slower"),     # beyond it, intervals apart
    ((100, 98, 102), (80, 78, 82), "faster"),
    ((100, 70, 140), (130, 100, 170), "ambiguous"),  # beyond it, but inside the noise
    ((100, 98, 102), (108, 101, 115), "ambiguous"),  # 8% > 5%, intervals touch
])
def test_classify_speed_uses_threshold_and_intervals(base, new, expected):
    speed, ratio = classify_speed(_row(*base), _row(*new), 0.05)
    assert speed == expected
    assert ratio == pytest.approx(new[0] / base[0])


def test_rows_without_timing_are_not_timed():
    b = ran_row(None)
    assert classify_speed(b, _row(100, 99, 101), 0.05) == ("not timed", None)


@pytest.mark.parametrize("text, value", [("5%", 0.05), ("0.05", 0.05), ("5", 0.05), ("12.5%", 0.125)])
def test_threshold_parsing(text, value):
    assert parse_threshold(text) == pytest.approx(value)


def test_bad_threshold_is_one_error(capsys):
    rc = main(["compare", str(BASELINE), str(BASELINE), "--threshold", "fast"])
    assert rc == 2 and "--threshold 'fast'" in capsys.readouterr().err


# ---------------------------------------------------------------- the gate fires
def _scaled(r: ResultRow, factor: float) -> ResultRow:
    """``r`` with every time of its timing multiplied by ``factor`` (a synthetic slowdown)."""
    t = {k: (v * factor if k.endswith("_us") and isinstance(v, float) else v) for k, v in r.timing.model_dump().items()}
    return r.model_copy(update={"timing": Timing.model_validate(t)})


def test_synthetic_slowdown_on_real_gpu_noise_fires(tmp_path, capsys):
    # Two real H200 runs of the same code (their run-to-run noise is the real thing); one row
    # of the second made 30% slower.
    base, new = read_rows(H200 / "decode-1"), read_rows(H200 / "decode-2")
    timed = [r for r in new if r.status == "pass" and r.timing]
    victim = timed[len(timed) // 2]
    new = [_scaled(r, 1.3) if r.key == victim.key else r for r in new]
    b, n = _write(base, tmp_path / "base.jsonl"), _write(new, tmp_path / "new.jsonl")
    md = tmp_path / "summary.md"
    assert main(["compare", str(b), str(n), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out and victim.case in out and "slower: +3" in out
    assert md.read_text() == out
    comp = compare_paths(b, n)
    assert [d.key for d in comp.regressions] == [victim.key]
    assert comp.regressions[0].speed == "slower"
    assert not comp.noise["cuda/cuda_event"].dominated
    # Timing is not judged in correctness-only mode.
    assert main(["compare", str(b), str(n), "--correctness-only"]) == 0


def test_two_real_gpu_runs_of_the_same_code_pass():
    # decode-1 and decode-2: the same suite run twice on one H200 (reports/h200/2026-11-29).
    comp = compare_paths(H200 / "decode-1", H200 / "decode-2")
    m = comp.noise["cuda/cuda_event"]
    assert not comp.regressed and not m.dominated and m.rows >= 20
    assert m.sigma is not None and math.expm1(m.sigma) < 0.01  # ~0.3% run-to-run on the GPU
    assert main(["compare", str(H200 / "decode-1"), str(H200 / "decode-2")]) == 0


def test_slowdown_inside_the_noise_is_ambiguous_not_a_failure():
    # A +30% move whose confidence intervals overlap (a wide-CI row) is reported, not failed.
    base = [_row(100, 99.5, 100.5, case=f"c{i}") for i in range(8)] + [_row(100, 70, 140, case="wide")]
    new = [_row(100.2, 99.7, 100.7, case=f"c{i}") for i in range(8)] + [_row(130, 100, 170, case="wide")]
    comp = compare_rows(base, new)
    d = next(x for x in comp.diffs if x.key[1] == "wide")
    assert d.speed == "ambiguous" and not comp.regressed
    assert "Ambiguous" in to_markdown(comp)


def test_wrong_result_fires(real_rows, tmp_path, capsys):
    victim = next(r for r in real_rows if r.status == "pass")
    new = [as_status(r, "mismatch", "max abs err 0.5 > tol") if r.key == victim.key else r for r in real_rows]
    b, n = _write(real_rows, tmp_path / "b.jsonl"), _write(new, tmp_path / "n.jsonl")
    assert main(["compare", str(b), str(n), "--correctness-only"]) == 1
    out = capsys.readouterr().out
    assert "correctness: pass -> mismatch" in out and victim.case in out
    # ... and the reverse (a fix) is reported, not failed.
    assert main(["compare", str(n), str(b), "--correctness-only"]) == 0
    assert "status mismatch -> pass" in capsys.readouterr().out


def test_missing_row_fires_unless_allowed(real_rows, tmp_path, capsys):
    victim = next(r for r in real_rows if r.status == "pass")
    b = _write(real_rows, tmp_path / "b.jsonl")
    n = _write([r for r in real_rows if r.key != victim.key], tmp_path / "n.jsonl")
    assert main(["compare", str(b), str(n), "--correctness-only"]) == 1
    assert "missing: was pass" in capsys.readouterr().out
    assert main(["compare", str(b), str(n), "--correctness-only", "--allow-missing", victim.case]) == 0
    assert main(["compare", str(b), str(n), "--correctness-only", "--allow-missing", f"*/{victim.backend}/*"]) == 0
    assert main(["compare", str(b), str(n), "--correctness-only", "--allow-missing", "no-such-case"]) == 1


def test_row_that_became_skipped_fires_unless_allowed(real_rows, tmp_path, capsys):
    victim = next(r for r in real_rows if r.status == "pass")
    new = [as_status(r, "skipped", "backend unavailable: x") if r.key == victim.key else r for r in real_rows]
    b, n = _write(real_rows, tmp_path / "b.jsonl"), _write(new, tmp_path / "n.jsonl")
    assert main(["compare", str(b), str(n), "--correctness-only"]) == 1
    assert "stopped running: pass -> skipped" in capsys.readouterr().out
    assert main(["compare", str(b), str(n), "--correctness-only", "--allow-skip"]) == 0
    assert main(["compare", str(b), str(n), "--correctness-only", "--allow-skip", victim.backend]) == 0


def test_new_rows_and_unchanged_unsupported_are_not_regressions(real_rows):
    extra = real_rows[0].model_copy(update={"case": "brand-new"})
    comp = compare_rows(real_rows, real_rows + [extra], correctness_only=True)
    assert not comp.regressed
    assert any(d.info.startswith("new row") for d in comp.diffs)
    assert any(r.status == "unsupported" for r in real_rows)  # stays unsupported: fine


def test_missing_input_is_one_clear_error(tmp_path, capsys):
    rc = main(["compare", str(tmp_path / "nope"), str(BASELINE)])
    err = capsys.readouterr().err
    assert rc == 2 and "no such results folder" in err and "Traceback" not in err


# ---------------------------------------------------------------- quiet on real noise
def test_two_real_runs_of_the_same_code_pass(two_runs, capsys):
    a, b = two_runs
    assert main(["compare", str(a), str(b), "--correctness-only"]) == 0
    # With timing judged too (the default), and at any threshold: CPU wall-clock noise is said
    # to be noise-dominated, never called a regression.
    for threshold in ("5%", "0%"):
        assert main(["compare", str(a), str(b), "--threshold", threshold]) == 0
    assert "noise-dominated" in capsys.readouterr().out
    comp = compare_paths(a, b)
    assert not comp.regressions
    assert sum(d.base is not None and d.new is not None for d in comp.diffs) == len(read_rows(a))


def test_full_smoke_run_against_the_committed_baseline_passes(tmp_path, capsys):
    # The whole ci/smoke.yaml on the CPU backends, timed, against the committed baseline (an
    # earlier real run of the same suite): exit 0, with the noise said.
    out = tmp_path / "smoke"
    assert main(["run", str(SMOKE), "--device", "cpu", "--out", str(out), "--quiet", "--no-isolation"]) == 0
    capsys.readouterr()
    assert main(["compare", str(BASELINE), str(out)]) == 0
    text = capsys.readouterr().out
    assert "**OK**" in text and "cpu/wall_clock" in text and "not gated" in text


def test_identical_results_are_all_same():
    rows = read_rows(H200 / "decode-1")
    comp = compare_rows(rows, rows)
    timed = [d for d in comp.diffs if d.speed != "not timed"]
    assert timed and all(d.speed == "same" for d in timed) and not comp.regressed


def test_cpu_wall_clock_timings_are_noise_dominated_never_gated(real_rows, capsys):
    # The committed CPU baseline against itself made 3x slower: wall-clock CPU timings are
    # reported (with their ratio) but never fail the gate; correctness still would.
    slow = [_scaled(r, 3.0) if r.timing else r for r in real_rows]
    comp = compare_rows(real_rows, slow, threshold=0.0)
    assert not comp.regressed and comp.noise["cpu/wall_clock"].dominated
    assert {d.speed for d in comp.diffs if d.ratio} == {"noisy"}
    md = to_markdown(comp)
    assert "noise-dominated" in md and "not gated" in md and "cpu/wall_clock" in md


def _gate():
    spec = importlib.util.spec_from_file_location("ci_gate", ROOT / "ci" / "gate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def test_gate_script_on_given_results(two_runs, tmp_path, capsys):
    a, b = two_runs
    gate = _gate()
    assert gate(["--results", str(b), "--baseline", str(a), "--correctness-only", "--markdown", str(tmp_path / "g.md")]) == 0
    assert "**OK**" in (tmp_path / "g.md").read_text()
    rows = read_rows(b)
    broken = tmp_path / "broken"
    broken.mkdir()
    _write([as_status(x, "error", "forward: boom") if x.status == "pass" else x for x in rows],
           broken / "results.jsonl")
    capsys.readouterr()
    assert gate(["--results", str(broken), "--baseline", str(a), "--correctness-only"]) == 1
    assert "pass -> error" in capsys.readouterr().out
    assert gate(["--results", str(b), "--baseline", str(tmp_path / "none")]) == 2
    assert "no baseline" in capsys.readouterr().err


def test_gate_script_runs_as_a_command():
    r = subprocess.run([sys.executable, "ci/gate.py", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "--correctness-only" in r.stdout


def test_committed_baseline_covers_the_smoke_suite(real_rows):
    from harness.spec import load_suite

    suite = load_suite(SMOKE)
    keys = {(r.case, r.backend) for r in real_rows}
    assert keys == {(c.name, b) for c in suite.cases for b in suite.backends}


H200_TODAY = Path(__file__).resolve().parents[2] / "tests" / "data" / "h200" / "session-b"


def test_h200_identical_runs_pass_and_a_real_slowdown_fails():
    """Real H200 rows (reports/h200/2026-11-30): the default decode suite twice while the other
    GPU ran correctness jobs (eager torch rows moved up to +37% with host load, graph-replayed
    rows stayed within ±0.5%) must not fail the gate; FA3 doing 1.5x the work must fail it."""
    same = compare_paths(H200_TODAY / "decode-1", H200_TODAY / "decode-2", threshold=0.05)
    assert not same.regressed and len(same.diffs) == 252
    assert not same.noise["cuda/cuda_event"].dominated            # graph-timed rows stay gated
    # the eager torch rows did not hide their launches: host-bound, correctness only
    assert same.noise["cuda/cuda_event/host-bound"].dominated and same.noise["cuda/cuda_event/host-bound"].rows == 72
    slow = compare_paths(H200_TODAY / "rows-base", H200_TODAY / "rows-slow", threshold=0.05)
    assert slow.regressed and len(slow.of("slower")) == 12


def test_an_axis_added_between_the_runs_still_matches_its_rows():
    # The H200 decode suite of 2026-12-01 against 2026-12-02: FlashInfer rows gained
    # decode_backend=wrapper; matched on the axes both runs have, they are not "missing".
    from harness.analysis.compare import compare_rows
    from harness.records.results import variant_label
    from helpers.typed_rows import ran_row

    def fi(v: dict, med: float):
        return ran_row(med, med * 0.999, med * 1.001, backend="flashinfer", variant=v, variant_label=variant_label(v))

    old = [fi({"decode_tensor_cores": t}, 100.0 + t) for t in (True, False)]
    new = [fi({"decode_tensor_cores": t, "decode_backend": "wrapper"}, 100.0 + t) for t in (True, False)]
    comp = compare_rows(old, new)
    assert not comp.regressions and all(d.base is not None and d.new is not None for d in comp.diffs)
    assert any("decode_backend" in w for w in comp.warnings)
    # Two values of the new axis would merge into one old row: those stay unmatched (new/missing).
    two = new + [fi({"decode_tensor_cores": True, "decode_backend": "xqa"}, 90.0)]
    comp2 = compare_rows(old, two)
    assert sum(d.base is None for d in comp2.diffs) == 3 and len(comp2.regressions) == 2  # the old rows: missing
