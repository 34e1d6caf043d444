"""Speed of the instrument (issue 14): where each row's time went, the run's wall time,
variant axes that cannot change a result, cost-balanced workers, torch baselines and the
memory estimate of the batched torch backends."""

import json
import math

import pytest
import yaml

from harness.cli import main
from harness.results import read_rows
from harness.spec import parse_suite

SMALL = """
suite: speed
cases:
  - name: dec
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: [2, 5]
        context_len: {dist: uniform, low: 10, high: 70}
"""


def test_rows_record_where_the_time_went_and_run_json_the_wall_time(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--out", str(out),
                 "--quiet", "--max-time", "0.05"]) == 0
    rows = read_rows(out)
    assert len(rows) == 4 and all(r.status == "pass" for r in rows)
    for r in rows:
        b = r.host["breakdown_ms"]
        assert {"prepare", "setup", "build", "first_call", "check", "timing", "metrics", "other", "precheck"} <= set(b)
        assert all(v >= 0 for v in b.values())
        # The stages (precheck excluded: it runs before the cell's clock starts) add up to the cell.
        assert math.isclose(sum(v for k, v in b.items() if k != "precheck"), r.host["cell_ms"], rel_tol=1e-6)
        assert set(r.host["case_ms"]) == {"generate", "reference"} and r.host["case_cells"] == 2
    header = json.loads((out / "run.json").read_text())
    assert header["wall_s"] >= header["run_s"] > 0
    tb = header["time_breakdown_s"]
    # Case-level stages are counted once per case, not once per row.
    assert math.isclose(tb["generate"], sum({r.case: r.host["case_ms"]["generate"] for r in rows}.values()) / 1e3,
                        abs_tol=2e-3)
    assert tb["cells"] <= header["run_s"]
