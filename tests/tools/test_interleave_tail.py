"""tools/interleave_tail.py (the seventh session's reading of issue 44's hot-L2 residue): the tail of
samples over their run's fastest, and whether two rows' disturbed samples share rounds."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = runpy.run_path(str(ROOT / "tools" / "interleave_tail.py"))


def test_disturbed_samples_that_share_rounds_are_counted_against_independence():
    # two runs of 10 rounds; rounds 2 and 7 of each run slow both rows by 3%, round 4 only row a
    def run(base_a: float, base_b: float) -> dict:
        a = [base_a * (1.03 if i in (2, 7) else 1.04 if i == 4 else 1.0) for i in range(10)]
        b = [base_b * (1.03 if i in (2, 7) else 1.0) for i in range(10)]
        return {"a": a, "b": b}

    t = TOOL["tail_stats"]([run(17.0, 13.0), run(17.2, 13.1)], 0.015)
    assert t["rows"]["a"]["disturbed"] == 6 and t["rows"]["b"]["disturbed"] == 4
    assert t["rows"]["a"]["samples"] == 20 and t["rows"]["a"]["q"][3] == pytest.approx(1.03, abs=0.005)
    pair = t["pairs"]["a & b"]
    assert pair["rounds"] == 20 and pair["both"] == 4 and pair["expected"] == pytest.approx(6 * 4 / 20)
    assert "mhz_disturbed" not in t["rows"]["a"]  # no hold clocks given
    # with each sample's hold clock: the disturbed rounds ran at 1755 MHz, the others at 1980
    mhz = [{"a": [1755.0 if i in (2, 4, 7) else 1980.0 for i in range(10)], "b": [None] * 10}] * 2
    t = TOOL["tail_stats"]([run(17.0, 13.0), run(17.2, 13.1)], 0.015, mhz)
    assert t["rows"]["a"]["mhz_disturbed"] == 1755.0 and t["rows"]["a"]["mhz_other"] == 1980.0
    assert t["rows"]["b"]["mhz_disturbed"] is None and t["rows"]["b"]["mhz_other"] is None  # no readings
    # undisturbed runs: nothing counted
    quiet = TOOL["tail_stats"]([{"a": [10.0, 10.01, 10.02], "b": [5.0, 5.01, 5.0]}], 0.015)
    assert quiet["rows"]["a"]["disturbed"] == 0 and quiet["pairs"]["a & b"]["both"] == 0


def test_a_folder_without_kept_samples_is_one_line_and_exit_2(tmp_path, capsys):
    assert TOOL["main"]([str(tmp_path)]) == 2
    assert "no kept samples" in capsys.readouterr().err
