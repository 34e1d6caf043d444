"""tools/kernel_trace.py: per kernel name its count, median duration and the device's idle gap
before it, from the profiler's chrome-trace events; without a GPU, one error line and exit 2."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

TOOL = runpy.run_path(str(Path(__file__).resolve().parents[2] / "tools" / "kernel_trace.py"))


def test_kernels_summarized_by_name_with_the_gap_before_each():
    ev = [{"cat": "kernel", "name": "flush", "ts": 0.0, "dur": 30.0},
          {"cat": "cpu_op", "name": "aten::zero_", "ts": 1.0, "dur": 2.0},  # not a kernel
          {"cat": "kernel", "name": "decode", "ts": 32.0, "dur": 10.0},
          {"cat": "kernel", "name": "merge", "ts": 43.5, "dur": 1.0},
          {"cat": "kernel", "name": "flush", "ts": 100.0, "dur": 31.0},
          {"cat": "kernel", "name": "decode", "ts": 133.0, "dur": 11.0},
          {"cat": "kernel", "name": "merge", "ts": 145.0, "dur": 1.0}]
    t = TOOL["summarize"](ev)
    assert set(t) == {"flush", "decode", "merge"}
    assert t["decode"]["count"] == 2 and t["decode"]["median_us"] == pytest.approx(10.5)
    assert t["decode"]["median_gap_us"] == pytest.approx(2.0)  # 32 - 30 and 133 - 131
    assert t["merge"]["median_gap_us"] == pytest.approx(1.25)  # 43.5 - 42 and 145 - 144
    assert t["flush"]["median_gap_us"] == pytest.approx(55.5)  # 100 - 44.5; the first has no kernel before it


def test_the_upper_tail_of_durations_and_gaps_is_its_own_figure():
    # nine decodes of 10 us and one of 13: the median stays, the 90th percentile moves
    ev = [{"cat": "kernel", "name": "decode", "ts": 100.0 * i, "dur": 13.0 if i == 9 else 10.0} for i in range(10)]
    t = TOOL["summarize"](ev)["decode"]
    assert t["median_us"] == 10.0 and t["p90_us"] > 12.0
    assert t["median_gap_us"] == 90.0 and t["p90_gap_us"] == pytest.approx(90.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU message")
def test_without_a_gpu_one_error_line_and_exit_2(tmp_path, capsys):
    assert TOOL["main"]([str(tmp_path / "k.json"), "--", "suites/decode.yaml"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
    assert TOOL["main"]([]) == 2


def test_kernels_after_the_hold_are_the_timed_sample_and_those_before_it_the_warm_up():
    # two samples: [warm decode 12 us][spin][timed decode 10 us], an idle gap (the host), again
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    ev = []
    for t0 in (0.0, 1000.0):
        ev += [{"cat": "kernel", "name": "decode", "ts": t0, "dur": 12.0},
               {"cat": "kernel", "name": spin, "ts": t0 + 14.0, "dur": 200.0},
               {"cat": "kernel", "name": "decode", "ts": t0 + 214.0, "dur": 10.0}]
    t = TOOL["summarize"](ev)
    assert t["decode"]["timed_median_us"] == 10.0 and t["decode"]["untimed_median_us"] == 12.0
    assert t["decode"]["median_us"] == 11.0 and t[spin]["count"] == 2
    # no hold in the run: every kernel is "before", nothing is "after"
    plain = TOOL["summarize"]([e for e in ev if e["name"] == "decode"])["decode"]
    assert plain["untimed_median_us"] == 11.0 and plain["timed_median_us"] != plain["timed_median_us"]  # nan
