"""A baseline of several runs: each row judged against its own spread over them
(harness/analysis/compare_runs.py). Hand-made GPU-like rows (tight CIs), no timing of this box."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.analysis.compare import compare_paths
from harness.analysis.compare_runs import read_baseline, run_folders
from harness.cli import main
from harness.records.timing_parts import (CudaGraphInfo)
from helpers.sampled_rows import write_run
from helpers.typed_rows import ran_row

LEVELS = (16.3, 17.6)  # the H100's two levels of FlashInfer decode mha[count=1] (issue 44)


def _run(seed: int, c0: float, n: int = 12) -> list:
    """n graph-replayed CUDA rows (CI ±0.3%, medians jittered ±0.3% between runs); row c0's
    median is ``c0`` us."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        med = c0 if i == 0 else (20.0 + 3 * i) * (1 + rng.uniform(-0.003, 0.003))
        row = ran_row(med, med * 0.997, med * 1.003, case=f"c{i}", backend="flashinfer", device="cuda:0")
        row.timing.cuda_graph = CudaGraphInfo(used=True, reason="")
        out.append(row)
    return out


def _runs(tmp: Path, name: str, c0s: tuple[float, ...]) -> Path:
    folder = tmp / name
    for i, c0 in enumerate(c0s):
        write_run(_run(100 + i, c0), folder / f"run-{i + 1}")
    return folder


def test_a_two_level_row_passes_when_the_baseline_runs_cover_both_levels(tmp_path, capsys):
    covered = _runs(tmp_path, "covered", (LEVELS[0], LEVELS[1], LEVELS[0]))
    one_level = _runs(tmp_path, "one-level", (LEVELS[0], LEVELS[0] * 1.002, LEVELS[0] * 0.998))
    new = write_run(_run(7, LEVELS[1]), tmp_path / "new")
    # The baseline's runs saw 17.6: the new run landing there is within the row's spread.
    comp = compare_paths(covered, new)
    assert not comp.regressed and comp.baseline_runs == 3
    d = next(d for d in comp.diffs if d.key[1] == "c0")
    assert d.speed == "same" and "within the spread of the 3 baseline runs 16.30-17.60 us" in d.info
    assert main(["compare", str(covered), str(new)]) == 0
    assert "spread over the baseline's 3 runs" in capsys.readouterr().out
    # Several paths are the same baseline as their folder.
    assert main(["compare", *map(str, run_folders(covered)), str(new)]) == 0
    capsys.readouterr()
    # Runs that all sat on the low level: 17.6 is outside every one of them (+8%) and fails.
    comp = compare_paths(one_level, new)
    assert [d.key[1] for d in comp.regressions] == ["c0"]
    assert "slowest of 3 baseline runs" in comp.regressions[0].info
    assert main(["compare", str(one_level), str(new)]) == 1
    # One run (today's behaviour): the low level alone, 17.6 fails.
    single = run_folders(covered)[0]
    assert [d.key[1] for d in compare_paths(single, new).regressions] == ["c0"]


def test_a_slowdown_beyond_every_baseline_run_still_fails(tmp_path):
    covered = _runs(tmp_path, "covered", (LEVELS[0], LEVELS[1], LEVELS[0]))
    slower = write_run(_run(8, LEVELS[1] * 1.08), tmp_path / "slower")  # 19.0 us: +8% over the slow level
    comp = compare_paths(covered, slower)
    assert [d.key[1] for d in comp.regressions] == ["c0"]
    d = comp.regressions[0]
    assert d.base.timing.median_us == pytest.approx(LEVELS[1]) and d.ratio == pytest.approx(1.08, abs=0.002)
    # Faster than every baseline run is reported faster, never failed.
    faster = write_run(_run(9, LEVELS[0] * 0.9), tmp_path / "faster")
    comp = compare_paths(covered, faster)
    assert not comp.regressed and next(d for d in comp.diffs if d.key[1] == "c0").speed == "faster"


def test_baseline_paths_and_bad_input(tmp_path, capsys):
    covered = _runs(tmp_path, "covered", LEVELS)
    assert [f.name for f in run_folders(covered)] == ["run-1", "run-2"]
    assert read_baseline([covered, run_folders(covered)[0]]).count == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no sub-folder holds one"):
        run_folders(empty)
    assert main(["compare", str(empty), str(run_folders(covered)[0])]) == 2
    assert "no sub-folder holds one" in capsys.readouterr().err


def test_match_backend_compares_a_patched_build_with_the_builtins_rows(tmp_path, capsys):
    """The slowed FlashInfer build (tests/mutants/slowed.py) runs under its own name; its rows
    meet the baseline's ``flashinfer`` rows through --match-backend, and a slowed row fails."""
    from harness.registry import resolve

    cls = resolve("mutants.slowed:FlashInferExtraLaunch")
    assert cls.name == "flashinfer-extra-launch" and cls.get_impl_cls().__name__ == "ExtraLaunchImpl"
    base = _runs(tmp_path, "base", (LEVELS[0], LEVELS[0] * 1.001, LEVELS[0] * 0.999))
    slowed = [r.model_copy(update={"backend": cls.name}) for r in _run(11, LEVELS[0] * 1.08)]
    new = write_run(slowed, tmp_path / "slowed")
    assert main(["compare", str(base), str(new)]) == 1  # unmatched: every row missing
    assert "missing" in capsys.readouterr().out
    assert main(["compare", str(base), str(new), "--match-backend", f"{cls.name}=flashinfer"]) == 1
    comp = compare_paths(base, new, match_backend={cls.name: "flashinfer"})
    assert [d.key[1] for d in comp.regressions] == ["c0"] and all(d.new is not None for d in comp.diffs)
    assert main(["compare", str(base), str(new), "--match-backend", "nonsense"]) == 2


def test_the_gate_takes_a_folder_of_runs_and_never_flattens_it(tmp_path, capsys):
    from harness.cli.commands.gate import main as gate_main

    covered = _runs(tmp_path, "covered", (LEVELS[0], LEVELS[1], LEVELS[0]))
    new = write_run(_run(7, LEVELS[1]), tmp_path / "new")
    assert gate_main(["--results", str(new), "--baseline", str(covered)]) == 0
    assert "spread over the baseline's 3 runs" in capsys.readouterr().out
    assert gate_main(["--update-baseline", "--baseline", str(covered)]) == 2
    assert "baseline of several runs" in capsys.readouterr().err
    assert len(run_folders(covered)) == 3
