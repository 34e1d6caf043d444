"""Readable forever: every results folder ever committed under reports/ loads with the current
code, a retired field is dropped on read with a record of it, a schema change without a version
bump fails here, and a version no build wrote is refused with one clear line. Every day's
evidence plan (reports/**/plan.yaml) loads too: a GPU session starts from one.

This is the one test that reads reports/ (tests/project/test_repo_hygiene.py allows exactly this file):
walking all of it, not a sample, is the point. It takes about 3 s on the 2-core box."""

import gzip
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, create_model

from harness.cli import main
from harness.records.formats import ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION
from harness.records.migrate import ROW_RETIRED, Migration
from harness.records.load import load_run
from harness.records.results import ResultRow, RunHeader, read_header, read_rows
from harness.records.schema import fingerprint, row_schema, run_schema

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "reports"
FINGERPRINTS = Path(__file__).with_name("schema_fingerprints.json")
# Written by a build that had timing.sm_clock_mhz.during_median (schema_version 2, later reverted).
RETIRED_FIELD_RUN = COMMITTED / "h200" / "2026-12-02" / "s5" / "s5-mla-decode"


def committed_folders() -> list[Path]:
    files = sorted(COMMITTED.rglob("results.jsonl")) + sorted(COMMITTED.rglob("results.jsonl.gz"))
    return sorted({f.parent for f in files})


def test_every_committed_results_folder_loads():
    folders = committed_folders()
    assert len(folders) >= 80, f"only {len(folders)} results folders under reports/"
    failed, rows, record = [], 0, Migration()
    for d in folders:
        try:
            run = load_run(d)  # typed to the leaves: every row and every run.json key
        except (ValueError, FileNotFoundError) as e:
            failed.append(f"{d.relative_to(ROOT)}: {e}")
            continue
        rows += len(run.rows)
        record.absorb(run.migration)
    assert failed == [], "committed results the current code cannot read:\n" + "\n".join(failed)
    assert rows > 10000
    assert set(record.versions) <= set(range(1, max(ROW_SCHEMA_VERSION, RUN_SCHEMA_VERSION) + 1))


def test_every_committed_plan_loads():
    # a plan that does not parse costs a GPU loan's minutes (one did, briefly, on 2026-12-08)
    from harness.tools.evidence_plan import load_plan

    plans = sorted(COMMITTED.rglob("plan.yaml"))
    assert plans
    for p in plans:
        assert load_plan(p).steps, p


def test_a_retired_field_is_dropped_on_read_and_recorded():
    record = Migration()
    rows = read_rows(RETIRED_FIELD_RUN, record)
    assert rows and record.dropped["timing.sm_clock_mhz.during_median"] > 0
    assert record.notes() and "during_median" in record.notes()[0]
    # Every retired field still appears in some committed file: the registry holds no guesses.
    assert all(r.path for rs in ROW_RETIRED.values() for r in rs)


def test_a_field_nobody_retired_is_still_refused(tmp_path):
    # Migration drops what the registry names, at its path; any other unknown key stays an error.
    line = gzip.decompress((RETIRED_FIELD_RUN / "results.jsonl.gz").read_bytes()).decode().splitlines()[1]
    row = json.loads(line)
    assert "during_median" in row["timing"]["sm_clock_mhz"]
    row["timing"]["during_median"] = row["timing"]["sm_clock_mhz"]["during_median"]
    (tmp_path / "results.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="line 1 is not a valid result row: timing.during_median"):
        read_rows(tmp_path)


@pytest.mark.parametrize("version,says", [(0, "not a version any attn-harness wrote"), (-1, "not a version"),
                                          ("2", "not a version"), (True, "not a version"),
                                          ("newer", "newer than this harness reads")])
def test_a_version_no_build_wrote_is_refused(tmp_path, version, says):
    newer = version == "newer"
    row = {"schema_version": ROW_SCHEMA_VERSION + 1 if newer else version, "suite": "s", "case": "c", "backend": "b", "status": "skipped", "reason": "r"}
    (tmp_path / "results.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=says) as e:
        read_rows(tmp_path)
    assert "results.jsonl: line 1" in str(e.value)
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": RUN_SCHEMA_VERSION + 1 if newer else version}))
    with pytest.raises(ValueError, match=says):
        read_header(tmp_path)


def test_a_schema_change_bumps_the_version():
    recorded = json.loads(FINGERPRINTS.read_text())
    for what, model, version in (("row", ResultRow, ROW_SCHEMA_VERSION), ("run", RunHeader, RUN_SCHEMA_VERSION)):
        now = fingerprint(model)
        was = recorded[what].get(str(version))
        assert was == now, (
            f"the {what} schema changed (fingerprint {now}, recorded {was} for version {version}): bump "
            f"harness/records/formats.py's version, add a reader for the old one if its files no longer validate "
            f"(harness/records/migrate.py), and record the new fingerprint in {FINGERPRINTS.name}")
        # An earlier version's fingerprint never changes: its files are out there.
        assert list(recorded[what]) == sorted(recorded[what], key=int)


class _Inner(BaseModel):
    a: int = 0
    """a docstring"""


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    x: float | None = None
    inner: _Inner | None = None
    items: list[_Inner] = []
    status: Literal["pass", "error"] = "pass"


def _variant(**fields: Any) -> type[BaseModel]:
    """_Outer with fields replaced (name -> (type, default)) or dropped (name -> None)."""
    kept = {n: (f.annotation, f.default) for n, f in _Outer.model_fields.items() if fields.get(n, 1) is not None}
    kept.update({n: f for n, f in fields.items() if f is not None})
    return create_model("_Outer", __config__=ConfigDict(extra="forbid"), **kept)


def test_a_fingerprint_ignores_words_but_not_fields():
    base = fingerprint(_Outer)
    assert fingerprint(_variant()) == base  # the same fields, built another way

    class Worded(BaseModel):  # the same field under another class name and docstring
        a: int = 0
        """other words"""

    assert fingerprint(_variant(inner=(Worded | None, None))) == base
    changed = {
        "added": _variant(extra=(int, 0)),
        "renamed": _variant(x=None, y=(float | None, None)),
        "retyped": _variant(x=(int | None, None)),
        "default": _variant(x=(float | None, 1.0)),
        "nested retyped": _variant(inner=(create_model("_Inner", a=(str, "")) | None, None)),
        "nested added": _variant(items=(list[create_model("_Inner", a=(int, 0), b=(int, 0))], [])),
        "literal": _variant(status=(Literal["pass", "error", "timeout"], "pass")),
        "extra allowed": create_model("_Outer", __config__=ConfigDict(extra="allow"),
                                      **{n: (f.annotation, f.default) for n, f in _Outer.model_fields.items()}),
    }
    prints = {what: fingerprint(m) for what, m in changed.items()}
    assert base not in prints.values() and len(set(prints.values())) == len(prints), prints
    # The real models: one more field on a row or a run header changes its fingerprint.
    for model in (ResultRow, RunHeader):
        grown = create_model(model.__name__, __base__=model, added=(int, 0))
        assert fingerprint(grown) != fingerprint(model)


def test_report_and_export_read_a_run_with_a_retired_field(tmp_path, capsys):
    assert main(["export", str(RETIRED_FIELD_RUN), "--csv", str(tmp_path / "rows.csv")]) == 0
    assert len((tmp_path / "rows.csv").read_text().splitlines()) > 10
    assert main(["report", str(RETIRED_FIELD_RUN), "-o", str(tmp_path / "report.md")]) == 0
    assert "flashinfer-mla" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("what", ["row", "run"])
def test_the_schema_explains_every_field(what):
    """``harness schema row|run``: every property of every model has a description (the field's docstring)."""
    schema = {"row": row_schema, "run": run_schema}[what]()
    missing = [f"{name}.{prop}" for name, d in [("(top)", schema), *schema.get("$defs", {}).items()]
               for prop, p in d.get("properties", {}).items() if not p.get("description")]
    assert missing == []


def test_the_run_schema_lists_every_key_a_run_writes():
    """Every top-level key of every committed run.json is a declared RunHeader field."""
    declared = set(run_schema()["properties"])
    seen: set[str] = set()
    for f in COMMITTED.rglob("run.json"):
        seen |= set(json.loads(f.read_text()))
    assert seen and seen <= declared, sorted(seen - declared)
