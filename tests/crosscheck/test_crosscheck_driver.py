"""The cross-check's pass over rows (harness/crosscheck/driver.py): the profiler's kernel times in a
pass after every row's timers, flagged rows first and always, the rest while the deadline allows,
each record judged again with its kernel time. No GPU: the rows are the committed H100 burst
cross-check's, whose device this machine lacks, so a profile that is attempted fails and says why."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from harness.crosscheck.driver import profile_pass
from harness.crosscheck.run import PROFILED_LATER, BatchCache
from harness.records.results import ResultRow

RUN = Path(__file__).resolve().parents[1] / "data/h100/2026-12-07/callforms/burst"


def _waiting() -> tuple[list[dict], list[ResultRow]]:
    with gzip.open(RUN / "crosscheck.json.gz", "rt") as f:
        records = json.load(f)["rows"][:4]
    with gzip.open(RUN / "results.jsonl.gz", "rt") as f:
        rows = [ResultRow.model_validate_json(line) for line in f if line.strip()]
    for r in records:
        r["kernel"] = PROFILED_LATER
    records[2]["flagged"] = True  # as if this one were flagged
    return records, rows


def test_after_the_deadline_only_flagged_rows_are_profiled_and_every_record_is_judged_again():
    import torch

    if torch.cuda.is_available():
        import pytest
        pytest.skip("a CUDA device is here: the profiles would run")
    records, rows = _waiting()
    lines: list[str] = []
    profile_pass(records, rows, 0.03, None, BatchCache(), lambda: 0.0, lines.append)
    flagged, rest = records[2], [r for i, r in enumerate(records) if i != 2]
    assert flagged["kernel"].startswith("failed: row timed on cuda")  # attempted: its explanation reads it
    assert all(r["kernel"] == "not profiled: the deadline had passed" for r in rest)
    # judged again from its figures: the verdict's fields are the recorded figures' (not the test's flag)
    assert flagged["flagged"] is False and "reason" in flagged
    assert lines == ["profiled 0 of 4 rows after every row's timers"]


def test_with_time_left_every_waiting_row_is_attempted_and_rows_profiled_already_are_left_alone():
    import torch

    if torch.cuda.is_available():
        import pytest
        pytest.skip("a CUDA device is here: the profiles would run")
    records, rows = _waiting()
    done = {"per_call_us": 50.0, "calls": 20, "top": []}
    records[0]["kernel"] = done
    profile_pass(records, rows, 0.03, None, BatchCache(), lambda: None)
    assert records[0]["kernel"] is done
    assert all(r["kernel"].startswith("failed: ") for r in records[1:])
    assert all("kernel" in r["cost_s"] for r in records[1:])


def test_resume_judges_an_earlier_cross_checks_rows_again_by_this_versions_rules(tmp_path):
    # The committed H100 sustained cross-check with its four host-bound rows written as a version
    # before the host-bound rule wrote them (the first/ run of 2026-12-08: three of them flagged).
    # --resume keeps every row (nothing is re-timed: no GPU needed) and judges each again from its
    # figures and its row: the host-bound rule applies to them now.
    import shutil

    from harness.cli import main

    src = RUN.parent / "sustained"
    folder = tmp_path / "sustained"
    shutil.copytree(src, folder)
    with gzip.open(src / "crosscheck.json.gz", "rt") as f:
        old = json.load(f)
    host_bound = [r["row"] for r in old["rows"] if r.get("state") == "host-bound"]
    assert host_bound == [13, 43, 44, 45]
    for r in old["rows"]:
        if r["row"] in host_bound:
            r.pop("host_bound", None)
            r.update(state="matched", flagged=True, reason="as an earlier version judged it")
    (folder / "crosscheck.json.gz").unlink()
    (folder / "crosscheck.json").write_text(json.dumps({**old, "host_bound": 0, "flagged": 6}))
    assert main(["crosscheck", str(folder), "--resume"]) == 1  # rows 0 and 32 stay flagged, as committed
    new = json.loads((folder / "crosscheck.json").read_text())
    assert new["checked"] == 57 and new["not_retimed"] == [] and new["host_bound"] == 4 and new["flagged"] == 2
    assert [r["row"] for r in new["rows"] if r["flagged"]] == [0, 32]
    assert [r["row"] for r in new["rows"] if r["state"] == "host-bound"] == host_bound
    assert all(r["reason"].startswith("host-bound") for r in new["rows"] if r["row"] in host_bound)
