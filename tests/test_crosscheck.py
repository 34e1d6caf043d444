"""`harness crosscheck` on a tiny CPU suite: the outside timer (torch.utils.benchmark) re-times each
row's standalone call. Nothing here depends on timing noise being small: the honest check uses a
wide tolerance, the flagged row's stored median is edited 50x off, the rest asserts structure."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from harness.cli import main
from harness.crosscheck import CrosscheckError, split_call, verdict

ROOT = Path(__file__).resolve().parent.parent

SUITE = """\
suite: crosscheck-tiny
backends: [torch-math, sdpa, sdpa-loop]
cases:
  - name: dec
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: 2
        context_len: 32
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("xc")
    (tmp / "s.yaml").write_text(SUITE)
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(tmp / "s.yaml"), "--device", "cpu", "--quiet",
                        "--max-time", "0.1", "--cpu-clock", "process", "--out", str(tmp / "res")],
                       capture_output=True, text=True, cwd=ROOT, env=subprocess_env())
    assert r.returncode == 0, r.stderr
    return tmp / "res"


def _rows(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines() if x.strip()]


def _edited(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    rows = [edit(r) for r in _rows(src)]
    (dst / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for f in ("crosscheck.json", "crosscheck.md"):
        (dst / f).unlink(missing_ok=True)
    return dst


def test_table_written_honest_rows_within_a_wide_tolerance(results, capsys):
    assert main(["crosscheck", str(results), "--tolerance", "900%", "--min-run-time", "0.05"]) == 0
    data = json.loads((results / "crosscheck.json").read_text())
    md = (results / "crosscheck.md").read_text()
    rows = _rows(results)
    assert {r["backend"] for r in rows} == {"torch-math", "sdpa", "sdpa-loop"} and all(r["status"] == "pass" for r in rows)
    assert sorted(r["backend"] for r in data["rows"]) == ["sdpa", "torch-math"]
    assert data["timers"] == ["torch.utils.benchmark.Timer"] and data["flagged"] == 0 and data["checked"] == 2
    for r in data["rows"]:
        src = rows[r["row"]]
        assert r["harness_us"] == src["timing"]["median_us"] and r["clock"] == "process_time"
        o = r["outside"]["torch.utils.benchmark.Timer"]
        assert o["median_us"] > 0 and "process_time clock" in o["settings"]
        assert r["ratio"] == pytest.approx(r["harness_us"] / r["ref_us"]) and not r["flagged"]
    assert [(x["backend"], x["reason"]) for x in data["not_retimed"]] == [("sdpa-loop", "backend sdpa-loop offers no standalone_call")]
    assert "| harness us | torch.utils.benchmark.Timer us |" in md and "## Not re-timed" in md
    assert "0 flagged" in capsys.readouterr().out.replace("*", "")


def test_a_row_edited_far_off_is_flagged_exit_1_and_shown_in_the_report(results, tmp_path):
    assert main(["crosscheck", str(results), "--tolerance", "900%", "--min-run-time", "0.05"]) == 0
    ref = {r["backend"]: r["ref_us"] for r in json.loads((results / "crosscheck.json").read_text())["rows"]}

    def slow(r):
        if r["backend"] == "torch-math":
            r["timing"]["median_us"] = 50 * ref["torch-math"]  # >= 5x off: no noise can hide it
        return r

    bad = _edited(results, tmp_path / "bad", slow)
    out = tmp_path / "xc.md"
    assert main(["crosscheck", str(bad), "--out", str(out), "--min-run-time", "0.05"]) == 1
    data = json.loads(out.with_suffix(".json").read_text())
    flagged = [r for r in data["rows"] if r["flagged"]]
    assert "torch-math" in [r["backend"] for r in flagged] and data["flagged"] == len(flagged)
    tm = next(r for r in flagged if r["backend"] == "torch-math")
    assert tm["ratio"] > 5 and "outside 3%" in tm["reason"]
    assert "**FLAGGED**" in out.read_text()
    # the report reads crosscheck.json from the results folder
    shutil.copy(out.with_suffix(".json"), bad / "crosscheck.json")
    from harness.report import build_sections, load

    sec = {s.id: s for s in build_sections(load([bad]))}["crosscheck"]
    assert sec.has_data and not sec.error
    table = next(b for b in sec.blocks if b["kind"] == "table")
    verdicts = [dict(zip(table["columns"], (c[0] for c in r)))["verdict"] for r in table["rows"]]
    assert any(v.startswith("FLAGGED") for v in verdicts)
    assert any("flagged" in b.get("text", "") for b in sec.blocks if b["kind"] == "text")


def test_rows_it_cannot_retime_are_listed_with_the_reason(results, tmp_path):
    def edit(r):
        if r["backend"] == "torch-math":
            r["status"], r["reason"] = "mismatch", "edited"
            r["check"]["passed"] = False
        elif r["backend"] == "sdpa":
            r["timing"], r["metrics"], r["timing_skipped"] = None, None, "--no-time"
        return r

    folder = _edited(results, tmp_path / "some", edit)
    assert main(["crosscheck", str(folder)]) == 0  # nothing re-timed, nothing flagged
    data = json.loads((folder / "crosscheck.json").read_text())
    why = {x["backend"]: x["reason"] for x in data["not_retimed"]}
    assert data["rows"] == [] and why == {"torch-math": "status mismatch, not pass", "sdpa": "not timed (--no-time)",
                                          "sdpa-loop": "backend sdpa-loop offers no standalone_call"}


def test_bad_input_is_one_error_and_exit_2(tmp_path, capsys):
    assert main(["crosscheck", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.jsonl").write_text("")
    assert main(["crosscheck", str(tmp_path / "empty")]) == 2
    assert main(["crosscheck", str(tmp_path / "empty"), "--tolerance", "lots"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "Traceback" not in err
    assert "no such results folder" in err and "holds no rows" in err and "--tolerance 'lots'" in err
    assert not (tmp_path / "empty" / "crosscheck.json").exists()


def test_split_call_and_verdict():
    setup, call = split_call("import x\na = 1\nout = torch.empty_like(q)\nfor i in range(2):\n    out[i] = a\n")
    assert setup.endswith("out = torch.empty_like(q)") and call.startswith("for i in range(2):")
    with pytest.raises(CrosscheckError, match="no module-level `out = ...`"):
        split_call("o = f(q)\n")
    two = {"a": {"median_us": 100.0}, "b": {"median_us": 110.0}}
    assert verdict(108.0, two, 0.03)["flagged"] is False  # inside the timers' own spread (100-110)
    v = verdict(120.0, two, 0.03)
    assert v["flagged"] and v["ref_us"] == 105.0 and v["ratio"] == pytest.approx(120 / 105)
    assert verdict(103.0, {"a": {"median_us": 100.0, "q1_us": 99.5, "q3_us": 100.5}}, 0.03)["flagged"] is False
    assert verdict(95.0, {"a": {"median_us": 100.0, "q1_us": 99.5, "q3_us": 100.5}}, 0.03)["flagged"] is True
