"""What a newcomer reads first is right: the README's set-up, and no workplace-internal paths
in the user instructions (contributor docs may have them)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_has_no_workplace_internal_paths():
    # (machine paths anywhere in the repository: tests/project/test_repo_hygiene.py)
    assert ".devkit" not in README, "the workplace's set-up belongs in docs/contributing.md"
    assert "devkit" in (ROOT / "docs" / "contributing.md").read_text()


def test_readme_setup_says_python_venv_and_how_the_browser_test_is_skipped():
    setup = README[README.index("## Set up"):README.index("## Commands")]
    assert "Python 3.11 or newer" in setup and "python3 -m venv" in setup
    assert "chromium" in setup and "chromedriver" in setup and "skipped" in setup and "ci/install_browser.sh" in setup
    # the claims hold: the project needs 3.11, and the browser test does skip without Chromium
    assert 'requires-python = ">=3.11"' in (ROOT / "pyproject.toml").read_text()
    assert "skipif(CHROMIUM is None" in (ROOT / "tests" / "report" / "test_report_browser.py").read_text()


def test_adding_a_backend_is_documented_with_a_tested_example():
    doc = (ROOT / "docs" / "adding-a-backend.md").read_text()
    for needed in ("PYTHONPATH", "entry point", "`name`", "availability(variant)", "capabilities(variant)",
                   "get_builder_cls()", "get_impl_cls()", "devices=frozenset", "suites/conformance.yaml",
                   "examples/naive_backend.py"):
        assert needed in doc, needed
    section = README[README.index("## Adding a backend"):]
    assert "examples/naive_backend.py" in section and "conformance" in section and "PYTHONPATH" in section
    assert (ROOT / "examples" / "naive_backend.py").is_file()
    assert "test_example_backend" in (ROOT / "tests" / "registry" / "test_example_backend.py").name


def test_every_documented_cli_flag_exists():
    from harness.cli import build_parser

    help_text = " ".join(a.format_help() for a in build_parser()._subparsers._group_actions[0].choices.values())
    for flag in set(re.findall(r"`(--[a-z][a-z-]+)", README)):
        assert flag in help_text, flag
