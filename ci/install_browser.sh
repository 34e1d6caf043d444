#!/usr/bin/env bash
# Headless browser for tests/report/test_report_browser.py: Debian's Chromium and ChromeDriver, and
# selenium to drive them (given the driver's path, selenium downloads nothing).
set -euo pipefail
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi
python -c "import selenium" 2>/dev/null || python -m pip install -q "selenium>=4.10"
chromium --version
chromedriver --version
