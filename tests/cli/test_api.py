"""harness.api from a script (worker processes), from stdin (in this process) and from a script
without a main guard (one clear error); load/report/compare on committed results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env

import harness
from harness import api

ROOT = Path(__file__).resolve().parents[2]
ENV = subprocess_env()
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"
CALL = ("import harness\n"
        "df = harness.run({suite!r}, out={out!r}, device='cpu', backends='torch-math', case=['decode-gqa[block_size=16,count=1]'], no_time=True)\n"
        "print('ROWS', len(df), sorted(set(df['status'])), df.attrs['case_legend'])\n")


def _py(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], input=stdin, cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=300)


def test_import_harness_is_light():
    r = _py(["-c", "import sys, harness; print('torch' in sys.modules, 'harness.api' in sys.modules, "
                   "callable(harness.run))"])
    assert r.stdout.split() == ["False", "False", "True"], r.stderr


def test_run_from_a_guarded_script_uses_workers(tmp_path):
    script = tmp_path / "s.py"
    body = CALL.format(suite=str(ROOT / "ci" / "smoke.yaml"), out=str(tmp_path / "r"))
    script.write_text("if __name__ == '__main__':\n" + "".join(f"    {ln}\n" for ln in body.splitlines()))
    r = _py([str(script)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ROWS 1 ['pass'] {'c1': 'decode-gqa[block_size=16,count=1]'}" in r.stdout
    assert "1 worker(s)" in r.stdout  # the run line names the isolated worker


def test_run_from_stdin_runs_in_this_process(tmp_path):
    r = _py(["-"], stdin=CALL.format(suite=str(ROOT / "ci" / "smoke.yaml"), out=str(tmp_path / "r")))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ROWS 1 ['pass']" in r.stdout and "in-process" in r.stdout


def test_a_script_without_a_main_guard_gets_one_clear_error(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(CALL.format(suite=str(ROOT / "ci" / "smoke.yaml"), out=str(tmp_path / "r")))
    r = _py([str(script)])
    assert r.returncode == 1
    assert "HarnessError" in r.stderr and 'if __name__ == "__main__":' in r.stderr and "isolation=False" in r.stderr
    assert not (tmp_path / "r").exists()  # nothing started, nothing half-written


def test_load_is_flat_with_a_case_legend():
    df = harness.load([BASELINE])
    assert len(df) > 10 and {"results", "case_id", "label", "status", "check.max_abs_err"} <= set(df.columns)
    assert not any(isinstance(v, dict) for v in df.iloc[0].tolist())  # flat: no nested payloads
    legend = df.attrs["case_legend"]
    assert set(df["case_id"]) == set(legend) and "decode-gqa[block_size=16,count=1]" in legend.values()


def test_compare_and_report(tmp_path):
    comp = api.compare(BASELINE, BASELINE, correctness_only=True)
    assert not comp.regressed and comp.diffs
    out = api.report([BASELINE], tmp_path / "r.html")
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")


def test_bad_input_is_one_harness_error(tmp_path):
    with pytest.raises(api.HarnessError, match="no such results"):
        harness.load(tmp_path / "nowhere")
    with pytest.raises(api.HarnessError, match="nope.yaml"):
        harness.run(tmp_path / "nope.yaml", device="cpu", isolation=False)
    with pytest.raises(api.HarnessError, match="threshold"):
        api.compare(BASELINE, BASELINE, threshold="lots")
