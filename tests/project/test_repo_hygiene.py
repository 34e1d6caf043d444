"""The repository points only at itself: no machine-local paths (a workplace's shared folder, a
home or root directory), and every file path it names under the project's own folders exists.

Run records under reports/ are left out except their READMEs: a run.json records the folder a run
started in and a log what the machine printed, by design (docs/reports.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".tmpl", ".j2", ".txt", ".cfg", ".ini", ".json", ".html", ""}
# Spelled in pieces so this file does not match itself.
MACHINE_PATHS = re.compile("|".join([r"\.\./" + "shared", r"(?<![\w.~-])/" + "work/", r"/" + "root/",
                                     r"/" + r"home/\w", r"/" + r"Users/\w"]))
# Repository paths that name a file of this project's own code: they must exist.
OWN_FILE = re.compile(r"(?<![\w./-])((?:harness|backends|attn_contract|ci)/[\w/-]*\w\.(?:py|sh|yaml|md|tmpl|j2))\b")
# Written as an example of a file to create (docs/architecture.md, "How to add a backend").
EXAMPLES = {"backends/my_kernel.py"}


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    files = []
    for rel in out.decode().split("\0"):
        if not rel or (rel.startswith("reports/") and not rel.endswith("README.md")):
            continue
        p = ROOT / rel
        if p.suffix in TEXT and p.is_file():
            files.append(p)
    return files


def _lines(p: Path):
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return
    yield from enumerate(text.splitlines(), 1)


def test_no_machine_local_paths():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
             for p in tracked_text_files() for n, line in _lines(p) if MACHINE_PATHS.search(line)]
    assert found == [], "paths of one machine or workplace:\n" + "\n".join(found)


def test_every_named_project_file_exists():
    missing = []
    for p in tracked_text_files():
        if p.is_relative_to(ROOT / "tests") or p.is_relative_to(ROOT / "reports"):
            continue  # tests name the files of the trees they make; a session's README, its commit's
        for n, line in _lines(p):
            for m in OWN_FILE.finditer(line):
                ref = m.group(1)
                if ref not in EXAMPLES and not (ROOT / ref).exists():
                    missing.append(f"{p.relative_to(ROOT)}:{n}: {ref}")
    assert missing == [], "references to files that do not exist:\n" + "\n".join(missing)


def test_the_patterns_catch_what_they_are_for():
    assert MACHINE_PATHS.search("see ../" + "shared/docs/x.md") and MACHINE_PATHS.search("at /" + "work/main")
    assert MACHINE_PATHS.search("/" + "root/.cache/x") and not MACHINE_PATHS.search("a network/work/ folder")
    assert [m.group(1) for m in OWN_FILE.finditer("(harness/cli.py, `ci/mem_diag.py`)")] == [
        "harness/cli.py", "ci/mem_diag.py"]


# The one test that reads reports/: every committed results folder must load with the current code.
READS_REPORTS = ROOT / "tests" / "records" / "test_readable_forever.py"


def test_no_test_reads_the_reports_folder():
    # reports/ grows every session and may be pruned: golden rows are copied under tests/data/.
    # Only loading all of it (READS_REPORTS) reads it, so a pruned folder fails no other test.
    into_reports = re.compile(r"""/\s*["']reports["']|glob\(\s*["']reports/|["']reports/[\w*]""")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py"))
             if p.name != Path(__file__).name and p != READS_REPORTS
             for n, line in _lines(p) if into_reports.search(line) and not line.lstrip().startswith("#")]
    assert found == []
