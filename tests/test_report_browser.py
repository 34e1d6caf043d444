"""The report in a real browser: headless Chromium (Debian's chromium + chromium-driver, driven
by selenium) loads a report made from a run in this test, with no JS error in the console, and
shows every section. ci/install_browser.sh installs what it needs."""

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
        context_len: {dist: uniform, low: 20, high: 80}
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
               "--quiet", "--report"])
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


def test_report_loads_without_js_errors_and_shows_every_section(report, driver):
    from selenium.webdriver.common.by import By

    driver.get(report.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    assert driver.execute_script("return document.body.dataset.ready") == "yes", "the page script did not finish"
    for sid, title in SECTIONS:
        el = driver.find_element(By.ID, sid)
        assert el.is_displayed(), sid
        assert title in el.find_element(By.TAG_NAME, "h2").text
    # Sections with data here, and the GPU-only ones that say they have none.
    assert "no data in these results" in driver.find_element(By.ID, "fa-versions").text
    assert "no data in these results" not in driver.find_element(By.ID, "page-size").text
    # Plots decoded as images (a broken data URI has naturalWidth 0).
    widths = driver.execute_script(
        "return Array.from(document.querySelectorAll('img.plot')).map(i => i.naturalWidth)")
    assert widths and all(w > 100 for w in widths)
    # The skip reason is on the matrix cell as a tooltip.
    cell = driver.find_element(By.CSS_SELECTOR, "#correctness td.st-unsupported")
    assert "softcap" in cell.get_attribute("title")
    assert _severe(driver) == []


def test_sorting_and_filtering_work_without_errors(report, driver):
    from selenium.webdriver.common.by import By

    driver.get(report.as_uri())
    table = driver.find_elements(By.CSS_SELECTOR, "#latency table.sortable")[-1]
    heads = table.find_elements(By.CSS_SELECTOR, "thead th")
    col = [h.text for h in heads].index("median_us")
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
        ".filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent)")
    assert shown == ["softcap"]
    assert _severe(driver) == []


def test_a_js_error_would_be_caught(report, driver, tmp_path):
    # The console check is live: a page with a broken script is reported.
    bad = tmp_path / "bad.html"
    bad.write_text(report.read_text().replace('document.body.dataset.ready = "yes";', "undefinedFunction();"))
    driver.get(bad.as_uri())
    assert any("undefinedFunction" in m for m in _severe(driver))


H200 = Path(__file__).resolve().parent.parent / "reports" / "h200" / "2026-11-29"


@pytest.mark.skipif(not (H200 / "decode-1" / "results.jsonl").exists(), reason="no committed H200 results")
def test_report_from_committed_h200_results(driver, tmp_path):
    """The GPU-only sections fill from the committed H200 rows: FA versions, page sizes, roofline, cascade."""
    from selenium.webdriver.common.by import By

    out = tmp_path / "h200.html"
    folders = ["decode-1", "page-sizes", "cascade-4k", "conf-fi-rest"]
    assert main(["report", *[str(H200 / f) for f in folders], "-o", str(out)]) == 0
    driver.get(out.as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "yes"
    for sid, _ in SECTIONS:
        assert driver.find_element(By.ID, sid).is_displayed(), sid
    for sid in ("fa-versions", "page-size", "roofline", "cascade"):
        assert "no data in these results" not in driver.find_element(By.ID, sid).text, sid
    # The e5m2 mismatches of the H200 run are in the matrix, with their reason on hover.
    cells = driver.find_elements(By.CSS_SELECTOR, "#correctness td.st-mismatch")
    assert cells and all("LSE" in c.get_attribute("title") for c in cells)
    assert _severe(driver) == []
