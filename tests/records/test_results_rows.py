"""Typed result rows: every committed results file loads, writes back with the same keys, and a
row whose payload does not fit its status (or whose types are wrong) is refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.records.results import (FAILED, NOT_RUN, RAN, Recheck, ResultRow, RunHeader, Status, Timing, read_rows,
                             read_run_header, row_json, rows_frame)
from helpers.typed_rows import check, host, ran_row, timing

ROOT = Path(__file__).resolve().parents[2]
# Every committed rows file the tests keep, plain or compressed: the gate baselines and the copies
# of GPU rows under tests/data/ (reports/ grows every session: the tests do not read it).
COMMITTED = sorted([*ROOT.glob("ci/baselines/*/results.jsonl"), *ROOT.glob("tests/**/results.jsonl"),
                    *ROOT.glob("tests/**/results.jsonl.gz")])


def test_there_are_committed_results():
    assert len(COMMITTED) >= 3  # the H200 session and both gate baselines


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_rows_load_and_write_back_identically(path):
    rows = read_rows(path)
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    assert len(rows) == len(lines) > 0
    for row, old in zip(rows, lines):
        assert isinstance(row.status, Status)
        assert json.loads(row_json(row)) == old  # same keys, same values: old and new files compare
    header = read_run_header(path.parent)
    assert isinstance(header, RunHeader) and header.tool == "attn-harness"


def test_statuses_carry_the_payloads_they_should():
    assert ran_row(10.0).timing.median_us == 10.0
    base = dict(suite="s", case="c", backend="b")
    for st in NOT_RUN | {Status.TIMEOUT}:
        with pytest.raises(ValidationError, match="needs a reason"):
            ResultRow(**base, status=st)
        ResultRow(**base, status=st, reason="why")
        with pytest.raises(ValidationError, match="carries no measurement"):
            ResultRow(**base, status=st, reason="why", timing=timing(1.0))
    with pytest.raises(ValidationError, match="error row carries no timing"):
        ResultRow(**base, status=Status.ERROR, reason="forward: boom", timing=timing(1.0))
    ResultRow(**base, status=Status.ERROR, reason="timing: boom", check=check(), host=host(), traceback="tb")
    with pytest.raises(ValidationError, match="only an error row carries a traceback"):
        ResultRow(**base, status=Status.SKIPPED, reason="x", traceback="tb")
    with pytest.raises(ValidationError, match="mismatch needs a failed check"):
        ResultRow(**base, status=Status.MISMATCH, reason="bad", check=check(True), host=host())
    wrote = check(True).model_copy(update={"inputs_modified": "key"})  # a correct output, inputs overwritten
    ResultRow(**base, status=Status.MISMATCH, reason="backend wrote into its inputs (key)", check=wrote, host=host())
    later = check(True).model_copy(update={"rechecks": [Recheck(when="repeat call", passed=False)]})
    ResultRow(**base, status=Status.MISMATCH, reason="repeat call: wrong", check=later, host=host())
    with pytest.raises(ValidationError, match="pass with a failed check"):
        ResultRow(**base, status=Status.PASS, check=check(False), host=host())
    with pytest.raises(ValidationError, match="needs host costs"):
        ResultRow(**base, status=Status.PASS, check=check())
    with pytest.raises(ValidationError, match="metrics without timing"):
        ResultRow.model_validate({**base, "status": "pass", "host": host().model_dump(), "metrics": {
            "flops": 1.0, "bytes": 1.0, "bytes_q": 0.0, "bytes_kv": 0.0, "bytes_o": 0.0, "bytes_meta": 0.0,
            "visible_pairs": 1, "kv_tokens_read": 1, "intensity": 1.0, "tflops": None, "tbps": None, "roofline": {}}})
    # A pass without a check is a --no-check run: accepted when reading, refused in a checked run.
    unchecked = {**base, "status": "pass", "host": host().model_dump()}
    ResultRow.model_validate(unchecked)  # rows written before 'unchecked' existed (runs now write that)
    with pytest.raises(ValidationError, match="without a check in a checked run"):
        ResultRow.model_validate(unchecked, context={"checked": True})
    with pytest.raises(ValidationError, match="unchecked with a check"):
        ResultRow(**base, status=Status.UNCHECKED, reason="x", check=check(), host=host())
    assert RAN == {Status.PASS, Status.UNCHECKED, Status.MISMATCH} and Status.TIMEOUT in FAILED


def test_strict_types_do_not_coerce():
    good = timing(10.0).model_dump()
    for field, bad in (("samples", True), ("samples", 20.5), ("samples", "20"), ("median_us", "10"),
                       ("median_us", None)):
        with pytest.raises(ValidationError, match=field):
            Timing.model_validate({**good, field: bad})
    with pytest.raises(ValidationError, match="not_a_field"):
        Timing.model_validate({**good, "not_a_field": 1})
    with pytest.raises(ValidationError, match="status"):
        ResultRow(suite="s", case="c", backend="b", status="passed")


def test_a_new_metric_needs_no_model_change_but_must_be_a_number():
    row = ran_row(10.0)
    m = {"flops": 1.0, "bytes": 1.0, "bytes_q": 0.0, "bytes_kv": 0.0, "bytes_o": 0.0, "bytes_meta": 0.0,
         "visible_pairs": 1, "kv_tokens_read": 1, "intensity": 1.0, "tflops": None, "tbps": None, "roofline": {}}
    back = ResultRow.model_validate({**json.loads(row_json(row)), "metrics": {**m, "new_quantity": 2.5}})
    assert back.metrics.model_extra["new_quantity"] == 2.5 and rows_frame([back])["metrics.new_quantity"][0] == 2.5
    with pytest.raises(ValidationError, match="new_quantity"):
        ResultRow.model_validate({**json.loads(row_json(row)), "metrics": {**m, "new_quantity": "2.5"}})


def test_extension_fields_are_written_only_when_set():
    plain = json.loads(row_json(ran_row(10.0)))
    assert "breakdown" not in plain["timing"] and "energy" not in plain["timing"]
    assert "per_request" not in plain["check"] and "worker" not in plain and "traceback" not in plain
    t = timing(10.0, breakdown={"plan": 2.0, "kernel": 8.0}, energy={"available": True, "energy_j": 0.1})
    row = ran_row(None).model_copy(update={"timing": t})
    back = ResultRow.model_validate(json.loads(row_json(row)))
    assert back.timing.breakdown == {"plan": 2.0, "kernel": 8.0} and back.timing.energy.model_dump() == {"available": True, "energy_j": 0.1}


def test_a_bad_row_in_a_file_names_file_line_and_field(tmp_path):
    good = row_json(ran_row(10.0))
    bad = json.loads(good)
    bad["timing"]["samples"] = "many"
    f = tmp_path / "results.jsonl"
    f.write_text(good + "\n" + json.dumps(bad) + "\n" + good + "\n")
    with pytest.raises(ValueError, match=r"results.jsonl: line 2 .*timing.samples"):
        read_rows(f)
    f.write_text(good + "\n" + good[:40])  # a torn last line (killed run) is dropped
    assert len(read_rows(f)) == 1


def test_rows_frame_flattens_payloads_with_short_case_ids():
    rows = read_rows(ROOT / "ci" / "baselines" / "cpu-smoke")
    df = rows_frame(rows + rows)
    assert len(df) == 2 * len(rows)
    for c in ("case_id", "label", "status", "timing.median_us", "check.rel_l2_err", "config.block_size",
              "metrics.flops", "host.build_ms"):
        assert c in df.columns, c
    assert set(df["status"]) <= {s.value for s in Status}
    assert df["case_id"].nunique() == len({r.case for r in rows})
    legend = df.attrs["case_legend"]
    assert all(legend[cid] == case for cid, case in zip(df["case_id"], df["case"]))
    timed = df[df["timing.median_us"].notna()]
    assert (timed["timing.median_us"] > 0).all() and len(timed) > 0
    assert list(rows_frame([]).columns)[:3] == ["suite", "case", "case_id"]


def test_compressed_results_folder_reads_like_the_plain_one(tmp_path):
    """Committed results may be stored as results.jsonl.gz; every reader takes the folder."""
    import gzip
    import shutil

    from harness.records.results import read_rows, results_file

    src = Path(__file__).resolve().parents[2] / "ci" / "baselines" / "cpu-smoke"
    plain = read_rows(src)
    dst = tmp_path / "packed"
    dst.mkdir()
    shutil.copy(src / "run.json", dst / "run.json")
    (dst / "results.jsonl.gz").write_bytes(gzip.compress((src / "results.jsonl").read_bytes()))
    assert results_file(dst).name == "results.jsonl.gz"
    packed = read_rows(dst)
    assert [r.model_dump() for r in packed] == [r.model_dump() for r in plain]
