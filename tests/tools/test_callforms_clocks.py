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
