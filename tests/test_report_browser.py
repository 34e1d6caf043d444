"""The report in a real browser: headless Chromium (Debian's chromium + chromium-driver, driven
by selenium) loads a report made from a run in this test, with no JS error in the console, and
shows every section, with images decoded and no sideways page scroll at 1400 px; from the
committed H200 results, the answers lead the first screen and the Llama-3-8B batch 64 / 4k verdict row is right.
ci/install_browser.sh installs what it needs."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import SECTIONS

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (run ci/install_browser.sh)")

SUITE = """
suite: browser
cases:
  - name: gqa
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    block_size: [16, 32]
    batch:
      - kind: decode
        count: [1, 3]
        context_len: [24, 96]
  - name: softcap
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    softcap: 20.0
    batch:
      - kind: decode
        count: 2
        context_len: 30
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("browser")
    (d / "suite.yaml").write_text(SUITE)
    out = d / "res"
    rc = main(["run", str(d / "suite.yaml"), "--backends", "torch-math,sdpa", "--device", "cpu", "--out", str(out),
               "--quiet", "--max-time", "0.05", "--report", "--no-isolation"])
    assert rc == 0
    return out / "report.html"


@pytest.fixture(scope="module")
def driver():
    assert CHROMEDRIVER, "chromium is installed but chromedriver is not (apt-get install chromium-driver)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # Root in a container, no network: no sandbox, nothing that phones home.
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: selenium never tries to download one.
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _severe(drv) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]


def _check_page(driver, page) -> None:
    """Every section shown; images decoded; no sideways page scroll at 1400 px; no JS error."""
    from selenium.webdriver.common.by import By

    driver.set_window_size(1400, 1000)
    driver.get(page.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    assert driver.execute_script("return document.body.dataset.ready") == "yes", "the page script did not finish"
    for sid, title in SECTIONS:
        el = driver.find_element(By.ID, sid)
        assert el.is_displayed(), sid
        assert title in el.text, sid
    # Plots decoded as images (a broken data URI has naturalWidth 0).
    widths = driver.execute_script(
        "return Array.from(document.querySelectorAll('img.plot')).map(i => i.naturalWidth)")
    assert widths and all(w > 100 for w in widths)
    # Wide tables scroll inside their box; the page never scrolls sideways.
    inner = driver.execute_script("return window.innerWidth")
    assert inner == 1400 or inner > 1300
    assert driver.execute_script("return document.documentElement.scrollWidth") <= inner
    # No table cell squeezed to a sliver (one character per line).
    narrow = driver.execute_script(
        "return Array.from(document.querySelectorAll('td')).filter(td => td.textContent.trim().length > 3"
        " && td.getBoundingClientRect().width > 0 && td.getBoundingClientRect().width < 24).length")
    assert narrow == 0
    assert _severe(driver) == []


def test_report_loads_without_js_errors_and_shows_every_section(report, driver):
    from selenium.webdriver.common.by import By

    _check_page(driver, report)
    # Sections with data here, and the ones that say they have none.
    assert "no data in these results" in driver.find_element(By.ID, "variant-axes").text
    for sid in ("verdict", "heatmap", "fastest-correct", "page-size", "latency"):
        assert "no data in these results" not in driver.find_element(By.ID, sid).text, sid
    # The skip reason is on the matrix cell as a tooltip.
    cell = driver.find_element(By.CSS_SELECTOR, "#correctness td.st-unsupported")
    assert "softcap" in cell.get_attribute("title")
    # The run headers are at the end, collapsed.
    assert driver.execute_script("return document.querySelector('#run-header details').open") is False


def test_sorting_and_filtering_work_without_errors(report, driver):
    from selenium.webdriver.common.by import By

    driver.get(report.as_uri())
    table = driver.find_elements(By.CSS_SELECTOR, "#latency table.sortable")[-1]
    heads = table.find_elements(By.CSS_SELECTOR, "thead th")
    col = [h.text for h in heads].index("median us")
    heads[col].click()
    vals = [float(r.find_elements(By.TAG_NAME, "td")[col].text) for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert vals == sorted(vals)
    heads[col].click()
    vals = [float(r.find_elements(By.TAG_NAME, "td")[col].text) for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert vals == sorted(vals, reverse=True)
    box = driver.find_element(By.ID, "filter")
    box.send_keys("softcap")
    shown = driver.execute_script(
        "return Array.from(document.querySelectorAll('#correctness table.matrix tbody tr'))"
        ".filter(r => r.style.display !== 'none').map(r => r.cells[0].title)")
    assert shown == ["softcap"]
    assert _severe(driver) == []


def test_a_js_error_would_be_caught(report, driver, tmp_path):
    # The console check is live: a page with a broken script is reported.
    bad = tmp_path / "bad.html"
    bad.write_text(report.read_text().replace('document.body.dataset.ready = "yes";', "undefinedFunction();"))
    driver.get(bad.as_uri())
    assert any("undefinedFunction" in m for m in _severe(driver))


H200 = Path(__file__).resolve().parent / "data" / "h200" / "2026-11-29"  # copies of reports/h200 rows


LLAMA_B64_4K = "llama3-8b[count=64,context_len=low=2048,high=4096]"


@pytest.mark.skipif(not (H200 / "decode-1" / "run.json").exists(), reason="no committed H200 results")
def test_report_from_committed_h200_results(driver, tmp_path):
    """From the committed H200 rows every section fills, the answers lead the first screen, and the
    verdict row for Llama-3-8B decode at batch 64 / 4k context is right."""
    from selenium.webdriver.common.by import By

    out = tmp_path / "h200.html"
    folders = ["decode-1", "decode-2", "page-sizes", "cascade-sweep", "cascade-4k", "orientation", "conf-fi-rest"]
    # 2026-11-30's trace rows fill the trace section (2026-11-29 has none)
    traces = [H200.parent / "2026-11-30" / f for f in ("trace-azure-conv", "trace-mooncake")]
    assert main(["report", *[str(H200 / f) for f in folders], *map(str, traces), "-o", str(out)]) == 0
    _check_page(driver, out)
    for sid, _ in SECTIONS:
        if sid in ("callform-gap", "crosscheck"):  # those rows predate call forms and the cross-check
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
    assert _severe(driver) == []
