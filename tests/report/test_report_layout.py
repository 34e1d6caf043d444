"""The report's layout (issue 40, defect 6): the correctness matrix leads with the backends that
ran, the models report's first table fits its box, small groups are shown, the recommendation
section says where the run was and gives times with units; and the report's --jobs flag."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import build_sections, load, render_html
from helpers.report_runs import _json_rows, _write

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"


GPU_LABELS = [("flash-attn", {"fa_version": v, "call_form": f}) for v in (2, 3, 4) for f in ("vllm", "fastest")] + [
    ("flashinfer", {"decode_tensor_cores": t}) for t in (False, True)]


def _cpu_decode_like(cpu_run: Path, folder: Path) -> Path:
    """A CPU run as suites/decode.yaml makes it: the CPU backends' rows plus eight GPU backend
    variants skipped on every case ("backend unavailable"); their labels sort first."""
    rows = _json_rows(cpu_run)
    skipped = []
    for case in dict.fromkeys(r["case"] for r in rows):
        base = next(r for r in rows if r["case"] == case)
        for backend, variant in GPU_LABELS:
            label = ",".join(f"{k}={v}" for k, v in sorted(variant.items()))
            skipped.append({**base, "backend": backend, "variant": variant, "variant_label": label,
                            "status": "skipped", "reason": "backend unavailable: needs a CUDA device",
                            "check": None, "timing": None, "metrics": None, "call": None, "host": None,
                            "worker": None, "reproducer": ""})
    header = json.loads((cpu_run / "run.json").read_text())
    return _write(skipped + rows, folder, header)


def test_matrix_puts_backends_that_ran_first_and_folds_the_skipped_ones(cpu_run, tmp_path):
    built = build_sections(load([_cpu_decode_like(cpu_run, tmp_path / "d")]), only=["correctness"], jobs=1)[0]
    t = next(b for b in built.blocks if b["kind"] == "table")
    assert t["columns"][:3] == ["case", "shape", "workload"]
    ran = t["columns"][3:-1]
    assert {c.split(" ")[0] for c in ran} == {"sdpa", "torch-math", "torch-cascade"}, t["columns"]
    assert t["columns"][-1] == "not run (8 backends)"
    last = [r[-1] for r in t["rows"]]
    assert all(text == "skipped" and "st-skipped" in cls for text, cls, _ in last)
    assert all(tip.count("backend unavailable") == 8 and "flashinfer" in tip for _, _, tip in last)
    note = " ".join(b["text"] for b in built.blocks if b["kind"] == "text")
    assert "Not run on any case" in note and "flash-attn" in note


def test_matrix_of_a_cpu_decode_run_shows_the_backends_that_ran_at_1400px(cpu_run, tmp_path, driver):
    from helpers.browser_page import check_page

    page = tmp_path / "cpu-decode.html"
    page.write_text(render_html(load([_cpu_decode_like(cpu_run, tmp_path / "d")])))
    check_page(driver, page)
    heads = driver.execute_script(
        "return Array.from(document.querySelectorAll('#correctness table.matrix thead th')).map(th => "
        "[th.textContent, th.getBoundingClientRect().right])")
    inner = driver.execute_script("return window.innerWidth")
    ran = [(t, right) for t, right in heads if t.split(" ")[0] in ("sdpa", "torch-math", "torch-cascade")]
    assert len(ran) == 3 and all(right <= inner for _, right in ran), (heads, inner)


MODELS = ROOT / "tests" / "data" / "h200" / "models"  # copy of the committed reports/h200/2026-12-01/models rows

# In the browser: [box overflows?, cells whose longest unbreakable piece (text between spaces,
# or up to a comma, where the page offers a break) is wider than the cell: a word broken inside].
_FIRST_TABLE_FITS = """
const t = document.querySelector('#' + arguments[0] + ' table'); const w = t.closest('.tablewrap');
const ctx = document.createElement('canvas').getContext('2d'); const broken = [];
for (const td of t.querySelectorAll('td')) {
  const cs = getComputedStyle(td); ctx.font = cs.font;
  const inner = td.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  for (const piece of td.textContent.split(/\\s+|(?<=,)/)) {
    if (ctx.measureText(piece).width > inner + 1) { broken.push(piece); }
  }
}
return [w.scrollWidth > w.clientWidth + 1, broken];
"""


def test_models_report_first_table_fits_its_box_without_breaking_words(tmp_path, driver):
    if not (MODELS / "run.json").exists():
        pytest.skip("no committed models run")
    page = tmp_path / "models.html"
    page.write_text(render_html(load([MODELS])))
    driver.set_window_size(1400, 1000)
    driver.get(page.as_uri())
    first = driver.execute_script("return document.querySelector('section table').closest('section').id")
    assert first == "answer-per-model"
    overflows, broken = driver.execute_script(_FIRST_TABLE_FITS, first)
    assert not overflows and broken == [], broken[:5]
    heads = driver.execute_script("return Array.from(document.querySelectorAll('#answer-per-model table')[0]"
                                  ".tHead.rows[0].cells).map(c => c.getBoundingClientRect().right)")
    assert max(heads) <= driver.execute_script("return window.innerWidth")  # SGLang in view


def test_heatmap_section_shows_groups_with_fewer_than_three_workloads(cpu_run, tmp_path):
    # The CPU run's softcap and shared-prefix groups have one workload each: a table row, not "no data".
    built = build_sections(load([cpu_run]), only=["heatmap"], jobs=1)[0]
    assert any(b["kind"] == "figure" for b in built.blocks)
    t = next(b for b in built.blocks if b["kind"] == "table")
    groups = [r[0][0] for r in t["rows"]]
    assert any(g.startswith("softcap") for g in groups) and any(g.startswith("prefix") for g in groups), groups
    assert all(any(c[0] == "best" for c in r) for r in t["rows"])
    # Only small groups: rows exist, so the section is not empty.
    few = [r for r in _json_rows(cpu_run) if not r["case"].startswith("gqa")]
    only_small = build_sections(load([_write(few, tmp_path / "few")]), only=["heatmap"], jobs=1)[0]
    assert only_small.has_data
    t = next(b for b in only_small.blocks if b["kind"] == "table")
    cols = t["columns"]
    row = next(r for r in t["rows"] if r[0][0].startswith("softcap"))
    assert row[cols.index("torch-math")][0] == "best"


def test_recommendation_says_the_run_was_on_a_cpu_and_gives_times_with_units(cpu_run):
    built = build_sections(load([cpu_run]), only=["recommend"], jobs=1)[0]
    texts = " ".join(b["text"] for b in built.blocks if b["kind"] == "text")
    assert "no run.json" not in texts and "The run was on a CPU" in texts, texts
    win = next(b for b in built.blocks if b["kind"] == "table" and b["title"] == "Winner per bucket")
    medians = [r[win["columns"].index("median")][0] for r in win["rows"]]
    assert medians and all(re.fullmatch(r"\d+(\.\d+)? (µs|ms|s)", m) for m in medians), medians


def test_cli_report_jobs_flag(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(BASELINE), "-o", str(out), "--jobs", "1"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(SystemExit) as e:
        main(["report", str(BASELINE), "-o", str(out), "--jobs", "0"])
    assert e.value.code == 2 and "--jobs '0': give a whole number >= 1" in capsys.readouterr().err
