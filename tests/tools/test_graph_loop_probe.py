"""tools/graph_loop_probe.py (issue 46, the outside timers' disagreement): one error line and exit
2 for a row index the results do not have; on a machine without CUDA it says it skipped."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(tmp_path):
    from helpers.sampled_rows import write_run
    from helpers.typed_rows import gpu_row

    write_run([gpu_row("k", 60.0, regime="sustained"), gpu_row("j", 61.0, regime="sustained")], tmp_path / "r")
    return tmp_path / "r"


def test_a_row_index_outside_the_results_is_one_error_line(results, capsys):
    tool = runpy.run_path(str(ROOT / "tools" / "graph_loop_probe.py"))
    assert tool["main"]([str(results), "--rows", "1,2"]) == 2
    assert capsys.readouterr().err.strip() == "error: --rows: '2' is not a row index of these results (0-1)"
    assert tool["main"]([str(results), "--rows", "x"]) == 2
    assert tool["main"]([str(results.parent / "nosuch"), "--rows", "0"]) == 2
    capsys.readouterr()
    assert tool["main"]([str(results), "--rows", "0", "--idle", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --idle: -1 is below 0"


def test_without_cuda_it_says_it_skipped(results, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the probe would run")
    tool = runpy.run_path(str(ROOT / "tools" / "graph_loop_probe.py"))
    assert tool["main"]([str(results), "--rows", "0,1"]) == 0
    assert capsys.readouterr().out.strip() == "skipped: no CUDA device here"
    assert tool["main"]([str(results), "--rows", "1", "--per-sample", "--profile-first", "--idle", "0.5"]) == 0
    assert capsys.readouterr().out.strip() == "skipped: no CUDA device here"
