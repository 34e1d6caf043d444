"""The report in a real browser: headless Chromium (Debian's chromium + chromium-driver, driven
by selenium; tests/helpers/browser_page.py) loads a report made from a run in this test, with no JS error
in the console, and shows every section, with images decoded and no sideways page scroll at
1400 px. (The page of the committed H200 results is checked in tests/report/test_report.py, which builds
it anyway.) ci/install_browser.sh installs what it needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.browser_page import CHROMIUM, NO_CHROMIUM, check_page, severe
from harness.cli import main

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)]

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


def test_report_loads_without_js_errors_and_shows_every_section(report, driver):
    from selenium.webdriver.common.by import By

    check_page(driver, report)
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
    assert severe(driver) == []


def test_a_js_error_would_be_caught(report, driver, tmp_path):
    # The console check is live: a page with a broken script is reported.
    bad = tmp_path / "bad.html"
    bad.write_text(report.read_text().replace('document.body.dataset.ready = "yes";', "undefinedFunction();"))
    driver.get(bad.as_uri())
    assert any("undefinedFunction" in m for m in severe(driver))
