"""The HTML report: the answer first (verdict, heatmap, fastest correct backend), every section
present and filled from a real CPU run made here and from the committed H200 results, values
read from row fields (never from case names), cascade pairing through call.compare_with, and a
roofline with no unexplained point above a roof."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main
from harness.report import REGISTRY, SECTIONS, build_frame, build_sections, load, render_html, section, write_report
from harness.report.core import Table, Text
from harness.records.results import read_rows
from helpers.report_runs import _json_rows, _write

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"
H200 = ROOT / "tests" / "data" / "h200" / "session-a"  # copies of reports/h200/2026-11-29 rows
H200_FOLDERS = ["decode-1", "decode-2", "page-sizes", "cascade-sweep", "cascade-4k", "orientation", "conf-fi-rest"]
# 2026-11-30's trace replays fill the trace section (2026-11-29 has no trace rows).
H200_TRACES = [H200.parent / "session-b" / f for f in ("trace-azure-conv", "trace-mooncake")]
ANSWER = ("answer-per-model", "heatmap", "verdict", "fastest-correct")

def _sections(page: str) -> dict[str, str]:
    """id -> inner HTML of each <section>."""
    return dict(re.findall(r'<section id="([\w-]+)"[^>]*>(.*?)</section>', page, flags=re.S))


@pytest.fixture(scope="module")
def cpu_page(cpu_run) -> str:
    return (cpu_run / "report.html").read_text()


@pytest.fixture(scope="module")
def h200_loaded():
    if not (H200 / "decode-1" / "run.json").exists():
        pytest.skip("no committed H200 results")
    return load([*(H200 / f for f in H200_FOLDERS), *H200_TRACES])


@pytest.fixture(scope="module")
def h200_built(h200_loaded) -> dict:
    return {s.id: s for s in build_sections(h200_loaded)}


@pytest.fixture(scope="module")
def h200_page(h200_loaded, h200_built, tmp_path_factory) -> Path:
    """The page `harness report` writes for those folders (write_report: load, render_html)."""
    page = tmp_path_factory.mktemp("h200-report") / "h200.html"
    page.write_text(render_html(h200_loaded, built=list(h200_built.values())))
    return page


@pytest.fixture(scope="module")
def h200_sections(h200_page) -> dict[str, str]:
    return _sections(h200_page.read_text())


def test_sections_in_page_order_answer_first_runs_last_and_collapsed(cpu_page):
    ids = re.findall(r'<section id="([\w-]+)"', cpu_page)
    assert ids == [i for i, _ in SECTIONS]
    assert tuple(ids[:4]) == ANSWER and ids[-1] == "run-header"
    assert "page-size" in ids and "variant-axes" in ids and "cascade" in ids and "roofline" in ids
    assert "fa-versions" not in ids  # the FA-only section became the generic variant-axis section
    runs = _sections(cpu_page)["run-header"]
    assert runs.lstrip().startswith("<details><summary>Runs</summary>")
    assert "This section failed" not in cpu_page


def test_cpu_run_fills_the_sections_it_can(cpu_page, cpu_run):
    secs = _sections(cpu_page)
    for sid in ("verdict", "heatmap", "fastest-correct", "correctness", "problems", "latency", "page-size",
                "roofline", "cascade", "run-header"):
        assert "no data in these results" not in secs[sid], sid
    for sid in ("heatmap", "latency", "page-size", "roofline", "cascade"):
        assert 'src="data:image/svg+xml;base64,' in secs[sid], sid
    # No torch backend has a variant axis: the section says what it looked for.
    assert "no data in these results (looked for timed rows of one backend whose variant axis" in secs["variant-axes"]
    assert "<td>command</td>" in secs["run-header"] and "torch 2." in secs["run-header"]


def test_the_run_records_what_the_readers_need_of_its_backends(cpu_run):
    # run.json's backend_facts: the run's backends' engine names and plain counterparts, as the
    # committed table has them (tests/tools/test_engine_table.py checks the table against the classes).
    from harness.analysis.engines import TABLE
    from harness.records.results import read_run_header

    facts = read_run_header(cpu_run).backend_facts
    table = json.loads(TABLE.read_text())["backend_facts"]
    assert sorted(facts) == ["sdpa", "torch-cascade", "torch-math"]
    assert {n: f.model_dump(mode="json") for n, f in facts.items()} == {n: table[n] for n in facts}
    assert facts["torch-cascade"].plain_counterpart == "torch-math"
    assert facts["sdpa"].engine_names["sglang"].name == "torch_native"


def test_cpu_verdict_names_the_measured_winner_of_every_workload(cpu_run):
    rows = [r for r in read_rows(cpu_run) if r.status == "pass" and r.timing]
    df = build_frame(load([cpu_run]))
    verdict = build_sections(load([cpu_run]), only=["verdict"])[0]
    tables = [b for b in verdict.blocks if b["kind"] == "table"]
    got = {}
    for t in tables:
        ci, fi = t["columns"].index("case"), t["columns"].index("fastest")
        for r in t["rows"]:
            got[r[ci][2]] = r[fi][0]  # the case cell's hover text is the full case name
    for case in {r.case for r in rows}:
        timed = [r for r in rows if r.case == case]
        best = min(timed, key=lambda r: r.timing.median_us)
        assert got[case] == df.loc[df["label"] == (best.backend + (f" [{best.variant_label}]" if best.variant_label
                                                                     else "")), "short"].iloc[0], case


def test_only_rows_that_passed_count_for_speed(cpu_run, tmp_path):
    rows = _json_rows(cpu_run)
    case = next(r["case"] for r in rows if r["status"] == "pass" and r.get("timing") and r["backend"] == "sdpa")
    # Make the sdpa row of one case absurdly fast but failing its check: it must not win.
    for r in rows:
        if r["case"] == case and r["backend"] == "sdpa":
            r.update(status="mismatch", reason="max abs err 9")
            r["check"]["passed"] = False
            r["timing"].update(median_us=1e-3, ci_low_us=1e-3, ci_high_us=1e-3)
    secs = {s.id: s for s in build_sections(load([_write(rows, tmp_path / "bad")]), only=["verdict", "fastest-correct"])}
    table = next(b for b in secs["verdict"].blocks if b["kind"] == "table" and any(
        r[0][2] == case for r in b["rows"]))
    row = next(r for r in table["rows"] if r[0][2] == case)
    assert row[table["columns"].index("fastest")][0] != "sdpa"
    fc = next(b for b in secs["fastest-correct"].blocks if b["kind"] == "table")
    assert any("sdpa (1 failed)" in r[-1][0] for r in fc["rows"])


def test_correctness_matrix_has_every_cell_and_the_reason_as_tooltip(cpu_page, cpu_run):
    rows = read_rows(cpu_run)
    secs = _sections(cpu_page)
    matrix = secs["correctness"]
    assert matrix.count('class="st st-pass"') == sum(r.status == "pass" for r in rows)
    unsup = next(r for r in rows if r.status == "unsupported")
    assert re.search(r'class="st st-unsupported" title="unsupported: ' + re.escape(unsup.reason[:30]), matrix)
    assert unsup.reason[:30] in secs["problems"]  # and in a table, not only on hover


def test_page_is_self_contained(cpu_page):
    assert not re.search(r'(src|href)="(https?:)?//', cpu_page)
    assert "<link" not in cpu_page and "<script src" not in cpu_page and "@import" not in cpu_page


def test_latency_table_holds_medians_and_intervals(cpu_run):
    r = next(r for r in read_rows(cpu_run) if r.status == "pass" and r.timing)
    lat = build_sections(load([cpu_run]), only=["latency"])[0]
    t = next(b for b in lat.blocks if b["kind"] == "table")
    cols = t["columns"]
    want = (f"{r.timing.median_us:.2f}", f"{r.timing.ci_low_us:.2f}", f"{r.timing.ci_high_us:.2f}")
    assert any(row[cols.index("case")][2] == r.case and (row[cols.index("median us")][0], row[cols.index("CI low")][0],
                                                        row[cols.index("CI high")][0]) == want for row in t["rows"])


def test_page_size_reads_block_size_from_config_not_from_case_names(cpu_run, tmp_path):
    rows = [r for r in _json_rows(cpu_run) if r["case"].startswith("gqa")]
    # Case names that lie about the page size (and say nothing of it): the config decides.
    for r in rows:
        r["case"] = f"w{r['batch'].get('num_reqs')}-{r['batch'].get('max_seq_len')}-p{r['config']['block_size']}[block_size=999]"
        r.pop("case_params", None)
    sec = build_sections(load([_write(rows, tmp_path / "p")]), only=["page-size"])[0]
    t = next(b for b in sec.blocks if b["kind"] == "table")
    assert "page 16 (us)" in t["columns"] and "page 32 (us)" in t["columns"]
    assert "page 999 (us)" not in t["columns"]


def test_cascade_pairs_through_compare_with_not_a_name_suffix(cpu_run, tmp_path):
    rows = _json_rows(cpu_run)
    casc = [r for r in rows if r["backend"] == "torch-cascade" and r["status"] == "pass" and r.get("timing")]
    assert casc and all(r["call"].get("compare_with") == "torch-math" for r in casc)
    renamed = [{**r, "backend": "two-level"} if r["backend"] == "torch-cascade" else r for r in rows]
    p = build_sections(load([_write(renamed, tmp_path / "c")]), only=["cascade"])[0]
    t = next(b for b in p.blocks if b["kind"] == "table")
    cols = t["columns"]
    pairs = {(r[cols.index("cascade")][0], r[cols.index("plain")][0]) for r in t["rows"]}
    assert pairs == {("two-level", "torch-math")}
    # A backend merely named '*-cascade' without compare_with is not a cascade row.
    fake = [{**r, "backend": "sdpa-cascade"} if r["backend"] == "sdpa" else r
            for r in rows if r["backend"] != "torch-cascade"]
    assert all("compare_with" not in (r.get("call") or {}) for r in fake)
    p2 = build_sections(load([_write(fake, tmp_path / "f")]), only=["cascade"])[0]
    assert not p2.has_data


def test_a_section_is_one_registered_function(cpu_run):
    @section("zz-test-extra", "Extra test section", order=850, looked_for="nothing")
    def extra(df: pd.DataFrame) -> list:
        return [Text(f"{len(df)} rows seen"), Table(df[["case", "backend"]].head(2))]

    try:
        page = render_html(load([cpu_run]))
        secs = _sections(page)
        ids = re.findall(r'<section id="([\w-]+)"', page)
        assert ids.index("zz-test-extra") == ids.index("run-header") - 1
        assert f"{len(read_rows(cpu_run))} rows seen" in secs["zz-test-extra"] and "<table" in secs["zz-test-extra"]
    finally:
        REGISTRY.pop("zz-test-extra")


def test_a_failing_section_shows_its_error_and_the_others_render(cpu_run):
    @section("zz-broken", "Broken", order=860, looked_for="nothing")
    def broken(df: pd.DataFrame) -> list:
        raise KeyError("no such column")

    try:
        secs = _sections(render_html(load([cpu_run])))
        assert "This section failed: KeyError" in secs["zz-broken"]
        assert "no data in these results" not in secs["verdict"]
    finally:
        REGISTRY.pop("zz-broken")


# ---------------------------------------------------------------- committed H200 results


def _h200_rows() -> list[dict]:
    return [json.loads(line) for f in H200_FOLDERS
            for line in gzip.decompress((H200 / f / "results.jsonl.gz").read_bytes()).decode().splitlines() if line.strip()]


LLAMA_B64_4K = "llama3-8b[count=64,context_len=low=2048,high=4096]"


@pytest.mark.slow
def test_h200_verdict_for_llama3_8b_batch_64_4k_is_the_measured_winner(h200_built):
    # Independent of the report's code: median over runs of each label's median on that case.
    per: dict[str, list[dict]] = {}
    for r in _h200_rows():
        if r["case"] == LLAMA_B64_4K and r["status"] == "pass" and r.get("timing"):
            per.setdefault((r["backend"], r["variant_label"]), []).append(r["timing"])
    ranked = sorted((statistics.median(t["median_us"] for t in v), k) for k, v in per.items())
    (best_us, (backend, vl)), (next_us, nk) = ranked[0], ranked[1]
    # Beyond the noise when the envelopes of the two cells' CIs over the runs do not overlap.
    disjoint = max(t["ci_high_us"] for t in per[(backend, vl)]) < min(t["ci_low_us"] for t in per[nk])
    secs = h200_built
    first = next(b for b in secs["verdict"].blocks if b["kind"] == "table")  # llama3-8b's group comes first
    cols = first["columns"]
    row = next(r for r in first["rows"] if r[0][2] == LLAMA_B64_4K)
    assert row[cols.index("batch")][0] == "64" and row[cols.index("context max")][0] == "4.1k"
    assert row[cols.index("fastest")][0].startswith(backend)
    assert row[cols.index("fastest")][2] == f"{backend} [{vl}]"
    assert row[cols.index("median us [95% CI]")][0].startswith(f"{best_us:.4g}")
    assert row[cols.index("margin")][0] == f"{next_us / best_us:.2f}x"
    assert row[cols.index("beyond noise?")][0] == ("yes" if disjoint else "no: overlap")
    head = next(b for b in secs["verdict"].blocks if b["kind"] == "heading")
    assert head["text"].startswith("llama3-8b") and "H32/KV8 D128 bf16 · page 16" in head["text"]


@pytest.mark.slow
def test_h200_sections_all_filled(h200_sections):
    for sid, _ in SECTIONS:
        if sid in ("callform-gap", "crosscheck", "spec-decode"):  # those rows predate call forms, the cross-check and graph modes
            assert "no data in these results" in h200_sections[sid]
            continue
        assert "no data in these results" not in h200_sections[sid], sid
        assert "This section failed" not in h200_sections[sid], sid
    va = h200_sections["variant-axes"]
    assert "flash-attn: fa_version" in va and "fa_version=3 (us)" in va and "fa_version=4 (us)" in va
    assert "flashinfer: decode_tensor_cores" in va
    # e5m2 mismatches of the H200 run: in the matrix with their reason on hover, and they exclude
    # flashinfer from "fastest correct" at that shape only.
    assert re.search(r'class="st st-mismatch" title="mismatch: [^"]*LSE', h200_sections["correctness"])
    # The page-size sweep covers FA2's 256/512 and the others' small pages on one axis.
    for p in (1, 16, 256, 512):
        assert f"page {p} (us)" in h200_sections["page-size"]


@pytest.mark.slow
def test_h200_cascade_pairs_every_cascade_row_with_its_compare_with_backend(h200_built):
    rows = [r for r in _h200_rows() if r["status"] == "pass" and r.get("timing") and "compare_with" in (r.get("call") or {})]
    sec = h200_built["cascade"]
    t = next(b for b in sec.blocks if b["kind"] == "table")
    cols = t["columns"]
    # One table row per (case, cascade backend+variant), merged over runs.
    assert len(t["rows"]) == len({(r["case"], r["backend"], r["variant_label"]) for r in rows})
    for r in t["rows"]:
        casc, plain = r[cols.index("cascade")][0], r[cols.index("plain")][0]
        want = "flash-attn " if casc.startswith("flash-attn-cascade") else "flashinfer "
        assert plain.startswith(want), (casc, plain)
        if casc.startswith("flash-attn-cascade [fa_version=3"):
            assert "fa_version=3" in plain  # the plain variant that agrees on fa_version


@pytest.mark.slow
def test_h200_roofline_effective_bytes_and_no_unexplained_point_above_a_roof(h200_loaded, h200_built):
    df = build_frame(h200_loaded)
    casc = df[(df["backend"] == "flashinfer-cascade") & (df["case"] == "decode[num_kv_heads=8,length=4096,count=8]")
              & df["passed"]].iloc[0]
    per_tok = casc["metrics.bytes_kv"] / casc["metrics.kv_tokens_read"]
    assert casc["bytes_eff"] == pytest.approx(casc["metrics.bytes"] - (8 - 1) * 4096 * per_tok)
    # Physical check: with the prefix read once, shared-prefix rows fall back under the memory
    # roof (one within 3%: the roof is a read+write copy; that point is labelled, below).
    shared = df[df["passed"] & df["median"].notna() & (df["batch.prefix_groups"].fillna(0) > 0)]
    ceiling = df["metrics.roofline.ceiling_tbps"].max()
    eff_tbps = shared["bytes_eff"] / (shared["median"] * 1e-6) / 1e12
    logical = shared["metrics.bytes"] / (shared["median"] * 1e-6) / 1e12
    assert eff_tbps.notna().all() and (eff_tbps <= 1.03 * ceiling).all()
    assert (logical > ceiling).sum() >= 10 * max(1, (eff_tbps > ceiling).sum())  # why the effective series exists
    sec = h200_built["roofline"]
    texts = " ".join(b.get("text", "") for b in sec.blocks)
    assert "hollow triangles" in texts and "would sit above the memory roof" in texts
    # Any point above a roof is in the table with a reason.
    tables = [b for b in sec.blocks if b["kind"] == "table"]
    above = sum(len(t["rows"]) for t in tables)
    assert above >= (eff_tbps > 1.02 * ceiling).sum()
    for t in tables:
        assert all(r[t["columns"].index("why")][0] for r in t["rows"])


@pytest.mark.slow
def test_h200_heatmap_and_fastest_correct(h200_sections, h200_built):
    assert h200_sections["heatmap"].count("<img") >= 3
    fc = h200_built["fastest-correct"]
    t = next(b for b in fc.blocks if b["kind"] == "table")
    first = t["rows"][0]
    assert first[0][0].startswith("llama3-8b") and first[t["columns"].index("fastest correct")][0]


# ---------------------------------------------------------------- robustness and CLI


def test_sparse_and_empty_results_still_render(cpu_run, tmp_path):
    # Partial rows (an error, a passing row without batch, config or metrics) and no header.
    ok = next(r for r in _json_rows(cpu_run) if r["status"] == "pass" and r.get("timing"))
    ok = {**ok, "case": "c", "backend": "d", "batch": {}, "config": {}, "metrics": None}
    ok.pop("case_params", None), ok.pop("case_group", None), ok.pop("layout", None)
    bare = [{"suite": "s", "case": "c", "backend": "b", "status": "error", "reason": "forward: boom"}, ok]
    secs = _sections(render_html(load([_write(bare, tmp_path / "bare")])))
    assert "forward: boom" in secs["problems"] and "no run.json" in secs["run-header"]
    assert "no data in these results" in secs["roofline"]
    assert "no data in these results" not in secs["verdict"]
    assert all("This section failed" not in v for v in secs.values())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.jsonl").write_text("")
    page = render_html(load([empty]))
    assert re.findall(r'<section id="([\w-]+)"', page) == [i for i, _ in SECTIONS]
    assert page.count("no data in these results (") >= len(SECTIONS) - 1
    assert "This section failed" not in page


def test_two_runs_in_one_report(tmp_path):
    loaded = load([BASELINE, BASELINE])
    assert len(loaded.runs) == 2 and len(build_frame(loaded)) == 2 * len(read_rows(BASELINE))
    matrix = build_sections(loaded, only=["correctness"])[0]
    assert any("(2 runs)" in c[0] for b in matrix.blocks if b["kind"] == "table" for r in b["rows"] for c in r)


def test_cli_report_and_bad_input(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(BASELINE), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "no such results folder" in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_write_report_is_atomic_and_returns_path(tmp_path):
    p = write_report([BASELINE], tmp_path / "sub" / "r.html")
    assert p.exists() and not (tmp_path / "sub" / "r.html.tmp").exists()


@pytest.mark.slow
def test_h200_page_has_every_section_whole_and_stays_compact(h200_page):
    text = h200_page.read_text()
    assert re.findall(r'<section id="([\w-]+)"', text) == [i for i, _ in SECTIONS]
    assert h200_page.stat().st_size < 2_500_000
    # one whole document: every section opened is closed, and the page ends where HTML does
    assert text.count("<section ") == text.count("</section>") == len(SECTIONS)
    assert text.rstrip().endswith("</html>")


@pytest.mark.slow
@pytest.mark.browser
def test_h200_page_in_a_browser(h200_page, driver):
    """The committed H200 results' page in headless Chromium (tests/helpers/browser_page.py): every section
    fills, the answers lead the first screen, and the verdict row for Llama-3-8B decode at batch
    64 / 4k context is right."""
    from selenium.webdriver.common.by import By

    from helpers.browser_page import check_page, severe

    check_page(driver, h200_page)
    for sid, _ in SECTIONS:
        if sid in ("callform-gap", "crosscheck", "spec-decode"):  # those rows predate call forms, the cross-check and graph modes
            continue
        assert "no data in these results" not in driver.find_element(By.ID, sid).text, sid
    # The first screen (1400 x 1000, not scrolled) opens with the answer per model shape, then the
    # heatmaps of the winners (the report's order: the answers first, the detailed tables after).
    tops = driver.execute_script("return ['answer-per-model', 'heatmap'].map(i => "
                                 "document.getElementById(i).getBoundingClientRect().top)")
    assert 0 <= tops[0] < tops[1] < 1000, tops
    # The verdict row for that workload, further down.
    row = driver.execute_script(
        "const td = Array.from(document.querySelectorAll('#verdict td')).find(t => t.title === arguments[0]);"
        "if (!td) { return null; } const tr = td.parentElement; const r = tr.getBoundingClientRect();"
        "const head = Array.from(tr.closest('table').tHead.rows[0].cells).map(c => c.textContent);"
        "return {bottom: r.bottom, top: r.top, cells: Array.from(tr.cells).map(c => c.textContent), head: head,"
        " h: window.innerHeight, sx: window.scrollY};", LLAMA_B64_4K)
    assert row is not None, "no verdict row for llama3-8b batch 64 / 4k"
    assert row["sx"] == 0 and row["top"] > tops[1], row
    cells = dict(zip(row["head"], row["cells"]))
    assert cells["batch"] == "64" and cells["context max"] == "4.1k"
    assert cells["fastest"] and cells["margin"].endswith("x") and cells["beyond noise?"]
    # Its group heading names the model and the shape.
    heading = driver.find_element(By.CSS_SELECTOR, "#verdict h3").get_attribute("textContent")  # collapsed
    assert heading.startswith("llama3-8b") and "H32/KV8 D128 bf16" in heading
    # The e5m2 mismatches of the H200 run are in the matrix, with their reason on hover.
    cells = driver.find_elements(By.CSS_SELECTOR, "#correctness td.st-mismatch")
    assert cells and all("LSE" in c.get_attribute("title") for c in cells)
    assert severe(driver) == []


def test_build_sections_only_the_named_ones(cpu_run):
    loaded = load([cpu_run])
    assert [s.id for s in build_sections(loaded, only=["latency", "verdict"])] == ["verdict", "latency"]
    with pytest.raises(KeyError, match="no-such-section"):
        build_sections(loaded, only=["no-such-section"])


# ---------------------------------------------------------------- speed of the page builder (issue 40)


def test_sections_built_in_worker_processes_give_the_same_page(cpu_run):
    # The forked workers return the same blocks, figures included (the SVG is deterministic).
    loaded = load([cpu_run])
    serial = [(r.id, r.blocks, r.error) for r in build_sections(loaded, jobs=1)]
    forked = [(r.id, r.blocks, r.error) for r in build_sections(loaded, jobs=3)]
    assert [i for i, _, _ in forked] == [i for i, _ in SECTIONS]
    assert forked == serial
    assert sum(b["kind"] == "figure" for _, blocks, _ in serial for b in blocks) >= 4


def test_figures_are_compact_svg_with_text_as_text(cpu_run):
    import base64
    import xml.etree.ElementTree as ET

    figs = [b for r in build_sections(load([cpu_run]), only=["latency", "heatmap"], jobs=1)
            for b in r.blocks if b["kind"] == "figure"]
    assert figs
    for f in figs:
        head, _, data = f["uri"].partition(",")
        assert head == "data:image/svg+xml;base64"
        svg = base64.b64decode(data).decode()
        root = ET.fromstring(svg)  # well-formed
        assert root.tag.endswith("svg") and root.get("viewBox")
        assert "<metadata>" not in svg and "\n" not in svg
        assert "<text" in svg  # labels are text (drawn by the browser), not glyph outlines
        assert not re.search(r' d="[^"]*\d\.\d{3}', svg)  # coordinates to 0.01 pt


def test_the_report_imports_no_backend_class_or_torch():
    # harness.analysis.recommend reaches the backend classes (torch with them); the page builder
    # imports it only inside the sections that use it, in their worker process.
    import subprocess
    import sys

    code = ("import sys, harness.report as r; r.registered(); import harness.analysis.recommend;"
            "print(sorted(m for m in ('torch', 'attn_contract.backend') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- layout at 1400 px (issue 40, defect 6)
