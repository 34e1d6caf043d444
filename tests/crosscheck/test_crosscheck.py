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
from harness.crosscheck.driver import DEADLINE_REASON, PENDING_REASON, crosscheck
from harness.crosscheck.run import CrosscheckError, split_call, verdict
from harness.records.results import read_rows

ROOT = Path(__file__).resolve().parents[2]

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
    assert ("| harness us | adapter here us | harness here us | kernel us (profiler) | torch.utils.benchmark.Timer us |" in md
            and "## Not re-timed" in md)
    assert data["complete"] is True and data["selected"] == 3
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

    sec = build_sections(load([bad]), only=["crosscheck"])[0]
    assert sec.has_data and not sec.error
    table = next(b for b in sec.blocks if b["kind"] == "table")
    shown = [dict(zip(table["columns"], (c[0] for c in r))) for r in table["rows"]]
    verdicts = [x["verdict"] for x in shown]
    assert any(v.startswith("FLAGGED") for v in verdicts)
    # the explaining columns: harness-here timed on the cpu, the GPU-only ones say why not
    tm_shown = next(x for x in shown if x["backend"].startswith("torch-math"))
    assert float(tm_shown["harness here us"]) == pytest.approx(tm["here"]["median_us"], rel=1e-3)
    assert tm_shown["kernel us (profiler)"] == "n/a on cpu" and tm_shown["SM MHz"] == "n/a on cpu"
    assert float(tm_shown["adapter here us"]) == pytest.approx(tm["here_adapter"]["median_us"], rel=1e-3)
    # the row's 50x median is off from the harness timer here too, on both calls
    assert "row vs here" in tm["reason"] and "row vs adapter here" in tm["reason"]
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


def test_explaining_columns_on_cpu(results):
    """harness-here is timed on the CPU too; the GPU-only profiler and clock columns say so."""
    assert main(["crosscheck", str(results), "--tolerance", "900%", "--min-run-time", "0.05", "--backend", "torch-math"]) == 0
    data = json.loads((results / "crosscheck.json").read_text())
    (r,) = data["rows"]
    assert r["backend"] == "torch-math" and data["selected"] == 1 and data["not_retimed"] == []
    here = r["here"]
    assert here["median_us"] > 0 and here["n"] >= 1 and here["settings"].startswith("harness time_callable(eager, hot")
    assert here["sm_clock_mhz"] == "n/a on cpu" and r["kernel"] == "n/a on cpu"
    assert r["outside"]["torch.utils.benchmark.Timer"]["sm_clock_mhz"] == "n/a on cpu"
    adapter = r["here_adapter"]  # the adapter's own timed call, the same timer, this process
    assert adapter["median_us"] > 0 and "adapter's timed_call" in adapter["settings"] and adapter["sm_clock_mhz"] == "n/a on cpu"
    assert set(r["comparisons"]) == {"row_vs_here", "here_vs_outside", "row_vs_adapter_here", "adapter_vs_standalone"}
    assert r["comparisons"]["adapter_vs_standalone"]["ratio"] == pytest.approx(adapter["median_us"] / here["median_us"])
    assert r["comparisons"]["row_vs_here"]["ratio"] == pytest.approx(r["harness_us"] / here["median_us"])
    assert r["inputs"] == "harness batch (generate on cpu)"
    line = next(x for x in (results / "crosscheck.md").read_text().splitlines() if "torch-math" in x and x.startswith("|"))
    assert line.count("n/a on cpu") == 2 and "| adapter here us | harness here us |" in (results / "crosscheck.md").read_text()


def test_deadline_after_one_row_leaves_a_valid_table_with_the_rest_marked(results, tmp_path, capsys):
    folder = _edited(results, tmp_path / "dl", lambda r: r)
    assert main(["crosscheck", str(folder), "--deadline", "0", "--tolerance", "900%", "--min-run-time", "0.05"]) == 0
    data = json.loads((folder / "crosscheck.json").read_text())
    assert [r["backend"] for r in data["rows"]] == ["torch-math"] and data["complete"] is True
    assert [(x["backend"], x["reason"]) for x in data["not_retimed"]] == [("sdpa", DEADLINE_REASON),
                                                                         ("sdpa-loop", DEADLINE_REASON)]
    assert "not re-timed: deadline" in (folder / "crosscheck.md").read_text()
    err = capsys.readouterr().err  # progress per row goes to stderr
    assert "#0 dec / torch-math []: harness" in err and f"#1 dec / sdpa []: {DEADLINE_REASON}" in err
    # --resume keeps the re-timed row and re-times the rest
    assert main(["crosscheck", str(folder), "--resume", "--tolerance", "900%", "--min-run-time", "0.05"]) == 0
    again = json.loads((folder / "crosscheck.json").read_text())
    assert again["rows"][0] == {**data["rows"][0], **{k: again["rows"][0][k] for k in ("reason",)}}
    assert [r["backend"] for r in again["rows"]] == ["torch-math", "sdpa"]
    assert "#0 dec / torch-math []: kept from the earlier cross-check (--resume)" in capsys.readouterr().err


def test_the_table_after_every_row_lists_the_rows_not_reached_as_pending(results, tmp_path):
    rows = read_rows(str(results))
    seen: list[dict] = []
    final = crosscheck(rows, 9.0, min_run_s=0.05, selected=[0, 2], on_progress=lambda t: seen.append(json.loads(
        json.dumps(t, default=str))))
    assert len(seen) == 2 and [s["complete"] for s in seen] == [False, False] and final["complete"] is True
    first = seen[0]
    assert first["checked"] == 1 and [(x["row"], x["reason"]) for x in first["not_retimed"]] == [(2, PENDING_REASON)]
    assert [(x["row"], x["reason"]) for x in final["not_retimed"]] == [(2, "backend sdpa-loop offers no standalone_call")]
    assert final["selected"] == 2 and final["of_rows"] == 3
    # a table left by a stopped command: the report says it is incomplete and lists the pending row
    folder = _edited(results, tmp_path / "stopped", lambda r: r)
    (folder / "crosscheck.json").write_text(json.dumps(first))
    from harness.report import build_sections, load

    sec = build_sections(load([folder]), only=["crosscheck"])[0]
    texts = " ".join(b.get("text", "") for b in sec.blocks if b["kind"] == "text")
    assert "incomplete" in texts and not sec.error
    skipped = [b for b in sec.blocks if b["kind"] == "table"][-1]
    assert any(PENDING_REASON in str(c) for r in skipped["rows"] for c in r)


def test_filters_and_bad_deadline(results, capsys):
    assert main(["crosscheck", str(results), "--case", "nope*"]) == 2
    assert main(["crosscheck", str(results), "--deadline", "-1"]) == 2
    err = capsys.readouterr().err
    assert "no row matches --case ['nope*']" in err and "--deadline -1.0" in err and "Traceback" not in err
