"""Headless Chromium for the report tests (Debian's chromium + chromium-driver, driven by
selenium; ci/install_browser.sh installs them): where the binaries are, the driver the
``driver`` fixture (conftest.py) yields, and the checks every report page must pass."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
NO_CHROMIUM = "no chromium binary (run ci/install_browser.sh)"


def chrome() -> Iterator[Any]:
    """One headless Chromium at 1400 x 1000, quit afterwards."""
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
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def severe(drv: Any) -> list[str]:
    """The console's errors since the last call."""
    return [e["message"] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]


def check_page(driver: Any, page: Path) -> None:
    """Every section shown; images decoded; no sideways page scroll at 1400 px; no JS error."""
    from selenium.webdriver.common.by import By

    from harness.report import SECTIONS

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
    assert severe(driver) == []
