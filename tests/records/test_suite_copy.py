"""The suite travels with its results: repro and --resume work from any directory."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from harness.cli import main, resume_command
from harness.records.results import RESULTS_FILE, read_header, read_rows
from harness.records.suite_copy import SUITE_COPY, find_suite

ROOT = Path(__file__).resolve().parents[2]
CASES = ["--case", "decode-gqa[block_size=16,count=1]", "--case", "decode-gqa[block_size=32,count=1]"]
RUN = ["--device", "cpu", "--backends", "torch-math", "--no-isolation", "--no-time", "--quiet", *CASES]


def _run_from(start: Path, monkeypatch, out: Path) -> None:
    start.mkdir()
    shutil.copy(ROOT / "ci" / "smoke.yaml", start / "s.yaml")
    monkeypatch.chdir(start)
    assert main(["run", "s.yaml", "--out", str(out), *RUN]) == 0


def test_the_copy_is_written_and_repro_finds_the_suite_from_anywhere(tmp_path, monkeypatch):
    out = tmp_path / "res"
    _run_from(tmp_path / "start", monkeypatch, out)
    assert (out / SUITE_COPY).read_bytes() == (ROOT / "ci" / "smoke.yaml").read_bytes()
    h = read_header(out)
    assert h["suite_file"] == "s.yaml" and h["suite_file_abs"] == str(tmp_path / "start" / "s.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert find_suite(out, "s.yaml") == str(tmp_path / "start" / "s.yaml")  # via the run's cwd
    assert main(["repro", str(out), "0", "-o", "r0.py"]) == 0 and (elsewhere / "r0.py").is_file()
    # The original changed since the run: the copy (what ran) is used.
    (tmp_path / "start" / "s.yaml").write_text("suite: other\ncases: []\n")
    assert find_suite(out, "s.yaml") == str(out / SUITE_COPY)
    (tmp_path / "start" / "s.yaml").unlink()
    assert main(["repro", str(out / RESULTS_FILE), "1", "-o", "r1.py"]) == 0


def test_resume_from_another_directory(tmp_path, monkeypatch):
    out = tmp_path / "res"
    _run_from(tmp_path / "start", monkeypatch, out)
    lines = (out / RESULTS_FILE).read_text().splitlines()
    assert len(lines) == 2
    (out / RESULTS_FILE).write_text(lines[0] + "\n")  # as if killed after the first cell
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # The command the interrupt message prints: the folder's copy and absolute paths.
    cmd = resume_command(["run", "s.yaml", "--out", str(out), *RUN], out)
    argv = shlex.split(cmd)[1:]
    assert argv[1] == str(out / SUITE_COPY)
    assert main(argv) == 0
    assert len(read_rows(out)) == 2
    # The suite as typed at the start also works from here (resolved against the run's cwd).
    (out / RESULTS_FILE).write_text(lines[0] + "\n")
    assert main(["run", "s.yaml", "--resume", str(out), *RUN]) == 0
    assert len(read_rows(out)) == 2
