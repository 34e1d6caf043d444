"""tools/callforms_clocks.py (docs/measurement.md §13's table) reads rows through the one reader
and gives one error line and exit 2 for a folder without results."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest

from harness.cli import main as harness

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a CPU run (~5-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_table_from_a_burst_and_a_sustained_folder(tmp_path, capsys):
    tool = runpy.run_path(str(ROOT / "tools" / "callforms_clocks.py"))
    assert harness(["run", str(ROOT / "suites" / "conformance-cpu.yaml"), "--case", "mixed*", "--backends", "sdpa",
                    "--min-samples", "2", "--max-samples", "3", "--quiet", "--out", str(tmp_path / "burst")]) == 0
    shutil.copytree(tmp_path / "burst", tmp_path / "sustained")  # the same rows: every ratio is 1
    capsys.readouterr()
    assert tool["main"]([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| sdpa, -"))
    assert "| 1 / 1 |" in line and "(1.000-1.000)" in line  # CPU rows: no clock, no settled clock
    assert tool["main"]([str(tmp_path / "nosuch")]) == 2
    assert "no such results folder" in capsys.readouterr().err


def test_the_median_columns_read_medians_where_rows_also_record_a_mean(tmp_path, capsys):
    # Since records.clocks.sm_clock reads a row's mean first (schema 6), the table's median columns
    # and its "within 3%" count (a median against the settled stretch's median) must ask for the
    # median: with the default they read means (the sixth session's table of 2026-12-07 did).
    # Clock figures: FA4 vllm orient-gqa-b16-32k-p64 (H100 2026-12-07, fifth session).
    from helpers.sampled_rows import write_run
    from helpers.typed_rows import gpu_row

    tool = runpy.run_path(str(ROOT / "tools" / "callforms_clocks.py"))
    burst = gpu_row("k", 100.0)
    sus = gpu_row("k", 104.0, regime="sustained",
                  sm_mhz={"min": 1605.0, "median": 1740.0, "max": 1815.0, "mean": 1711.5})
    sus = sus.model_copy(update={"timing": sus.timing.model_copy(update={"settled_sm_clock_mhz": 1680.0})})
    write_run([burst], tmp_path / "burst")
    write_run([sus], tmp_path / "sustained")
    assert tool["main"]([str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| b, -"))
    # median 1740 against 1680 is 3.6% apart: outside (the mean, 1711.5, would be within)
    assert line.split(" | ")[5:8] == ["1740", "1680", "0/1"]
