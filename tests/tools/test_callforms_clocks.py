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


def test_the_settled_clock_is_judged_by_the_means_with_the_medians_beside(tmp_path, capsys):
    # At the power limit the samples' median and the settled stretch's median can sit a clock level
    # apart while their means agree (docs/measurement.md §13): the count judges the means and shows
    # the medians' count beside it. Clock figures: FA4 vllm orient-gqa-b16-32k-p64 (H100 2026-12-07,
    # fifth session: samples median 1740 mean 1711.5, stretch median 1680 mean 1711).
    from helpers.sampled_rows import write_run
    from helpers.typed_rows import gpu_row

    tool = runpy.run_path(str(ROOT / "tools" / "callforms_clocks.py"))
    burst = gpu_row("k", 100.0)
    sus = gpu_row("k", 104.0, regime="sustained",
                  sm_mhz={"min": 1605.0, "median": 1740.0, "max": 1815.0, "mean": 1711.5})
    t = sus.timing
    clocks = t.clocks.model_copy(update={"window_sm_mhz": t.clocks.sm_mhz.model_copy(
        update={"min": 1605.0, "median": 1680.0, "max": 1815.0, "mean": 1711.0})})
    sus = sus.model_copy(update={"timing": t.model_copy(update={"settled_sm_clock_mhz": 1680.0, "clocks": clocks})})
    off = gpu_row("j", 104.0, regime="sustained", sm_mhz={"min": 1605.0, "median": 1740.0, "max": 1815.0, "mean": 1790.0})
    t = off.timing
    clocks = t.clocks.model_copy(update={"window_sm_mhz": t.clocks.sm_mhz.model_copy(
        update={"median": 1740.0, "mean": 1700.0})})
    off = off.model_copy(update={"timing": t.model_copy(update={"settled_sm_clock_mhz": 1740.0, "clocks": clocks})})
    write_run([burst, gpu_row("j", 100.0)], tmp_path / "burst")
    write_run([sus, off], tmp_path / "sustained")
    assert tool["main"]([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| b, -"))
    # the clock columns read means (1711.5 and 1790 -> 1750.75; stretches 1711 and 1700 -> 1705.5);
    # "k" is within by its means (1711.5 / 1711) and outside by its medians (1740 / 1680), "j" the
    # other way round (1790 / 1700 is 5.3% off; its medians agree)
    assert line.split(" | ")[5:8] == ["1751", "1706", "1/2; 1/2"]
    assert "by the means: 1/2" in out and "by the medians: 1/2" in out
    assert "j: outside 3% by the means 1790 against 1700 MHz" in out
    assert "k: outside 3% by the medians 1740 against 1680 MHz" in out


def test_rows_without_means_are_judged_by_their_medians(tmp_path, capsys):
    # rows written before schema 6 have no means: their medians decide
    from helpers.sampled_rows import write_run
    from helpers.typed_rows import gpu_row

    tool = runpy.run_path(str(ROOT / "tools" / "callforms_clocks.py"))
    sus = gpu_row("k", 104.0, regime="sustained", sm_mhz={"min": 1605.0, "median": 1740.0, "max": 1815.0})
    sus = sus.model_copy(update={"timing": sus.timing.model_copy(update={"settled_sm_clock_mhz": 1680.0})})
    write_run([gpu_row("k", 100.0)], tmp_path / "burst")
    write_run([sus], tmp_path / "sustained")
    assert tool["main"]([str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("| b, -"))
    assert line.split(" | ")[5:8] == ["1740", "1680", "-; 0/1"]
