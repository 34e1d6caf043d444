"""The HTML report: every section present (with data or saying it has none), self-contained,
correct on real CPU results and on rows derived from them for the GPU-only sections."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import SECTIONS, build_sections, frame, load, render_html, write_report
from harness.results import Metrics, ResultRow, Timing, read_rows
from typed_rows import ran_row

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"

TINY = """
suite: tiny-report
cases:
  - name: t
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    block_size: 16
    batch:
      - kind: decode
        count: 2
        context_len: 40
"""


def _sections(page: str) -> dict[str, str]:
    """id -> inner HTML of each <section>."""
    return dict(re.findall(r'<section id="([\w-]+)"[^>]*>(.*?)</section>', page, flags=re.S))


def _write(rows: list[ResultRow], folder: Path, header: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(r.model_dump()) + "\n" for r in rows))
    if header is not None:
        (folder / "run.json").write_text(json.dumps(header))
    return folder


@pytest.fixture(scope="module")
def cpu_page() -> str:
    return render_html(load([BASELINE]))


def test_every_section_is_present_in_order(cpu_page):
    ids = re.findall(r'<section id="([\w-]+)"', cpu_page)
    assert ids == [i for i, _ in SECTIONS]


def test_cpu_results_fill_the_sections_they_can(cpu_page):
    secs = _sections(cpu_page)
    for sid in ("run-header", "correctness", "problems", "latency", "latency-context", "latency-batch",
                "page-size", "roofline"):
        assert "no data in these results" not in secs[sid], sid
    for sid in ("latency-context", "latency-batch", "page-size", "roofline"):
        assert 'src="data:image/png;base64,' in secs[sid], sid
    # GPU-only sections say what they looked for.
    assert "no data in these results (looked for timed rows whose variant has fa_version" in secs["fa-versions"]
    assert "no data in these results (looked for timed rows of backends named '*-cascade'" in secs["cascade"]
    # The header shows device, versions and the command.
    assert "Intel" in secs["run-header"] or "cpu" in secs["run-header"]
    assert "harness run ci/smoke.yaml" in secs["run-header"] and "torch" in secs["run-header"]


def test_correctness_matrix_has_every_cell_and_the_reason_as_tooltip(cpu_page):
    rows = read_rows(BASELINE)
    secs = _sections(cpu_page)
    matrix = secs["correctness"]
    assert matrix.count('<td class="st st-pass"') == sum(r.status == "pass" for r in rows)
    unsup = next(r for r in rows if r.status == "unsupported")
    assert re.search(r'class="st st-unsupported" title="unsupported: ' + re.escape(unsup.reason), matrix)
    assert unsup.reason in secs["problems"]  # and in a table, not only on hover


def test_page_is_self_contained(cpu_page):
    assert not re.search(r'(src|href)="(https?:)?//', cpu_page)
    assert "<link" not in cpu_page and "<script src" not in cpu_page and "@import" not in cpu_page


def test_latency_table_holds_medians_and_intervals(cpu_page):
    rows = [r for r in read_rows(BASELINE) if r.timing]
    lat = _sections(cpu_page)["latency"]
    r = rows[0]
    assert f"{r.timing['median_us']:.1f} [{r.timing['ci_low_us']:.1f}-{r.timing['ci_high_us']:.1f}]" in lat


def _gpu_like(rows: list[ResultRow]) -> list[ResultRow]:
    """Rows shaped as the GPU backends write them, derived from real CPU rows: flash-attn with
    fa_version 2/3/4 (FA3 faster), and a cascade backend next to its plain one."""
    timed = [r for r in rows if r.status == "pass" and r.timing]
    out = []
    for r in timed:
        for v, scale in ((2, 1.0), (3, 0.6), (4, 0.5)):
            t = {k: (x * scale if k.endswith("_us") else x) for k, x in r.timing.items()}
            out.append(r.model_copy(update={"backend": "flash-attn", "variant": {"fa_version": v},
                                            "variant_label": f"fa_version={v}", "timing": Timing.model_validate(t)}))
    for r in timed[:3]:
        out.append(r.model_copy(update={"backend": "flashinfer"}))
        t = {k: (x * 0.5 if k.endswith("_us") else x) for k, x in r.timing.items()}
        out.append(r.model_copy(update={"backend": "flashinfer-cascade", "timing": Timing.model_validate(t)}))
    return out


def test_fa_versions_cascade_and_ceilings_from_gpu_shaped_rows(tmp_path):
    rows = _gpu_like(read_rows(BASELINE))
    header = json.loads((BASELINE / "run.json").read_text())
    header["ceilings"] = {"peak_tflops": 800.0, "peak_tbps": 4.0}
    folder = _write(rows, tmp_path / "gpu", header)
    secs = _sections(render_html(load([folder])))
    fa = secs["fa-versions"]
    assert "FA2 (us)" in fa and "FA3 (us)" in fa and "FA4 (us)" in fa and "FA2/FA3 speedup" in fa
    assert "1.67" in fa and "2.00" in fa  # 1/0.6 and 1/0.5
    assert 'src="data:image/png' in fa
    cas = secs["cascade"]
    assert "flashinfer-cascade" in cas and "2.00" in cas and 'src="data:image/png' in cas
    assert "Ceilings from run header: ceilings: 800 TFLOP/s, 4 TB/s" in secs["roofline"]


def test_ceilings_measured_into_rows_are_drawn(tmp_path):
    rows = read_rows(BASELINE)
    rows = [r.model_copy(update={"metrics": Metrics.model_validate(
                {**r.metrics.model_dump(), "roofline": {"ceiling_tflops": 700.0, "ceiling_tbps": 4.5,
                                                        "pct_of_ceiling": 12.5, "bound": "memory"}})})
            if r.metrics else r for r in rows]
    secs = _sections(render_html(load([_write(rows, tmp_path / "r")])))
    assert "metrics.roofline" in secs["roofline"] and "700 TFLOP/s" in secs["roofline"]
    assert "% of bounding ceiling" in secs["latency"] and "12.5" in secs["latency"]


def test_sparse_and_empty_results_still_render(tmp_path):
    # Old or partial rows: no timing, no batch, no config, no header.
    bare = [ResultRow(suite="s", case="c", backend="b", status="error", reason="forward: boom"),
            ran_row(3.0, case="c", backend="d")]
    secs = _sections(render_html(load([_write(bare, tmp_path / "bare")])))
    assert "forward: boom" in secs["problems"] and "no run.json" in secs["run-header"]
    assert "no data in these results" in secs["roofline"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "results.jsonl").write_text("")
    page = render_html(load([empty]))
    assert re.findall(r'<section id="([\w-]+)"', page) == [i for i, _ in SECTIONS]
    assert page.count("no data in these results (") >= len(SECTIONS) - 1


def test_two_runs_in_one_report(tmp_path):
    loaded = load([BASELINE, BASELINE])
    assert len(loaded.headers) == 2 and len(frame(loaded)) == 2 * len(read_rows(BASELINE))
    assert "(2 runs)" in {s.id: s for s in build_sections(loaded)}["correctness"].html


def test_cli_report_and_bad_input(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(BASELINE), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "no such results folder" in err and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_run_with_report_flag_writes_report_html(tmp_path):
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    out = tmp_path / "res"
    rc = main(["run", str(suite), "--backends", "torch-math", "--device", "cpu", "--out", str(out), "--quiet",
               "--no-time", "--report"])
    assert rc == 0
    page = (out / "report.html").read_text()
    assert "tiny-report" in page and 'class="st st-pass"' in page


def test_write_report_is_atomic_and_returns_path(tmp_path):
    p = write_report([BASELINE], tmp_path / "sub" / "r.html")
    assert p.exists() and not (tmp_path / "sub" / "r.html.tmp").exists()


def test_cascade_pairs_with_the_backend_family_when_no_exact_plain_name(tmp_path):
    rows = [r for r in read_rows(BASELINE) if r.status == "pass" and r.timing and r.backend == "torch-math"][:2]
    casc = [r.model_copy(update={"backend": "torch-cascade"}) for r in rows]
    secs = _sections(render_html(load([_write(rows + casc, tmp_path / "c")])))
    assert "torch-cascade" in secs["cascade"] and "torch-math" in secs["cascade"] and "1.00" in secs["cascade"]
