"""The report's cross-check section reads its explaining columns and its SM clock from the same
cells as `harness crosscheck`'s markdown (harness/crosscheck/table.py ``cells_of``): a clock read
while a timer ran (``during``) or by the graph re-timing widens the range in both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.crosscheck.table import cells_of
from harness.report import build_frame, load
from harness.report.core import Table
from harness.report.sections.crosscheck import crosscheck

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "ci" / "baselines" / "cpu-smoke"


def test_the_clock_column_is_the_markdowns(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    row = {"row": 0, "case": "c", "backend": "b", "variant": "v", "graph": True, "mode": "hot", "device": "cuda:0",
           "harness_us": 10.0, "ratio": 1.0, "flagged": False, "state": "agrees",
           "here": {"median_us": 10.0, "sm_clock_mhz": {"before": 1980.0, "after": 1965.0}},
           "here_graph": {"median_us": 10.1, "sm_clock_mhz": {"before": 1980.0, "during": 1410.0, "after": 1980.0}},
           "outside": {"t": {"median_us": 10.0, "sm_clock_mhz": {"before": 1950.0, "during": 1500.0, "after": 1965.0}}}}
    (run / "crosscheck.json").write_text(json.dumps({"rows": [row], "timers": ["t"], "tolerance": 0.03}))
    tables = [b for b in crosscheck(build_frame(load([run]))) if isinstance(b, Table)]
    assert tables, "no cross-check table in the section"
    shown = tables[0].data.iloc[0]
    assert shown["SM MHz"] == cells_of(row)["SM MHz"] == "1410-1980"
    assert shown["harness here us"] == cells_of(row)["harness here us"]
