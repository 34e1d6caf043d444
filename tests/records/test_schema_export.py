"""File formats: JSON Schemas (`harness schema`), schema_version in rows and run.json, readers
that accept every committed version and refuse a newer one, `harness export`."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from harness import cli
from harness.records.formats import ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION
from harness.records.results import read_header, read_rows
from harness.records.schema import row_schema, suite_schema

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates the exported schemas (the test extra installs it)")

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"
ONE_CASE = ["--case", "decode-gqa[block_size=16,count=1]", "--backends", "torch-math"]


def _schema(what: str, capsys) -> dict:
    assert cli.main(["schema", what]) == 0
    return json.loads(capsys.readouterr().out)


def test_schemas_are_valid_json_schema_and_every_suite_validates(capsys):
    for what in ("row", "run"):
        jsonschema.Draft202012Validator.check_schema(_schema(what, capsys))
    s = _schema("suite", capsys)
    v = jsonschema.Draft202012Validator(s)
    files = sorted(ROOT.glob("suites/*.yaml")) + sorted(ROOT.glob("ci/*.yaml"))
    assert len(files) > 10
    for f in files:
        assert not list(v.iter_errors(yaml.safe_load(f.read_text()))), f
    bad = yaml.safe_load((ROOT / "ci" / "smoke.yaml").read_text())
    bad["cases"][0]["num_head"] = 8  # a typo the loader rejects too
    assert list(v.iter_errors(bad))
    assert suite_schema() == s


def test_rows_and_run_json_carry_the_version(tmp_path):
    out = tmp_path / "r"
    assert cli.main(["run", str(ROOT / "ci" / "smoke.yaml"), "--device", "cpu", "--no-isolation", "--no-time",
                     "--quiet", "--out", str(out), *ONE_CASE]) == 0
    (line,) = (out / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["schema_version"] == ROW_SCHEMA_VERSION
    assert json.loads((out / "run.json").read_text())["schema_version"] == RUN_SCHEMA_VERSION
    row = read_rows(out)[0]
    jsonschema.validate(json.loads(line), row_schema())
    assert row.schema_version == ROW_SCHEMA_VERSION


def test_every_committed_results_file_reads():
    files = sorted({p.parent for p in (ROOT / "tests" / "data").rglob("results.jsonl*")} |
                   {p.parent for p in (ROOT / "ci" / "baselines").rglob("results.jsonl*")})
    assert files
    versions = set()
    for d in files:
        versions |= {r.schema_version for r in read_rows(d)}
        read_header(d)
    assert 1 in versions  # rows from before the field: read as version 1
    # ...and they write back exactly as they were: no key added.
    old = read_rows(BASELINE)[0]
    assert old.schema_version == 1 and "schema_version" not in old.model_dump()


def test_a_newer_file_is_refused_with_a_clear_message(tmp_path, capsys):
    d = tmp_path / "new"
    d.mkdir()
    row = json.loads((BASELINE / "results.jsonl").read_text().splitlines()[0])
    (d / "results.jsonl").write_text(json.dumps({**row, "schema_version": ROW_SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(ValueError, match="newer than this harness reads"):
        read_rows(d)
    assert cli.main(["export", str(d), "--csv", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "line 1" in err and "upgrade attn-harness" in err and not (tmp_path / "x.csv").exists()
    (d / "run.json").write_text(json.dumps({"schema_version": RUN_SCHEMA_VERSION + 1}))
    with pytest.raises(ValueError, match="run.json schema_version"):
        read_header(d)


def test_export_csv_is_flat_one_row_per_cell(tmp_path):
    out = tmp_path / "cells.csv"
    assert cli.main(["export", str(BASELINE), "--csv", str(out)]) == 0
    with out.open() as fh:
        recs = list(csv.DictReader(fh))
    assert len(recs) == len(read_rows(BASELINE))
    assert {"case", "case_id", "backend", "status", "check.max_abs_err", "config.block_size"} <= set(recs[0])
    assert not any(v.startswith("{") for r in recs for v in r.values() if v)  # no nested mappings left


def test_export_parquet_needs_pyarrow(tmp_path, capsys):
    out = tmp_path / "cells.parquet"
    rc = cli.main(["export", str(BASELINE), "--parquet", str(out)])
    if importlib.util.find_spec("pyarrow") is None:
        assert rc == 2 and "needs pyarrow" in capsys.readouterr().err and not out.exists()
    else:
        import pandas as pd

        assert rc == 0 and len(pd.read_parquet(out)) == len(read_rows(BASELINE))
