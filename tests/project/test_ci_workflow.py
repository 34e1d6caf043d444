"""docs/ci.md's example workflow: its CPU job's commands run here as written; the GPU job's
compare runs on committed H200 results; every harness command parses with the real parser;
and the CI outputs (step summary, ::error lines, JUnit, benchmark JSON) hold what they claim."""

from __future__ import annotations

import pytest

import json
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from conftest import subprocess_env

from harness.cli import build_parser, main
from harness.analysis.compare import compare_rows
from harness.analysis.ci_output import benchmark_entries, github_annotations, junit_xml
from harness.records.results import Status, read_rows, row_json

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "ci.md").read_text()
WORKFLOW = yaml.safe_load(re.search(r"```yaml\n(.*?)```", DOC, re.S).group(1))
H200_BASE, H200_NEW = ROOT / "ci" / "baselines" / "h200-decode", ROOT / "tests" / "data" / "h200" / "session-a" / "decode-2"


def _runs(job: str) -> list[str]:
    return [s["run"] for s in WORKFLOW["jobs"][job]["steps"] if "run" in s]


def test_the_workflow_has_a_cpu_gate_and_a_self_hosted_gpu_job():
    assert WORKFLOW["jobs"]["cpu-gate"]["runs-on"] == "ubuntu-latest"
    assert "self-hosted" in WORKFLOW["jobs"]["gpu"]["runs-on"]
    for cmd in _runs("cpu-gate") + _runs("gpu"):
        argv = shlex.split(cmd)
        if argv[0] == "harness" and argv[1:] != ["--version"]:
            build_parser().parse_args(argv[1:])  # a flag typo fails here (SystemExit)
    bench = next(s for s in WORKFLOW["jobs"]["gpu"]["steps"] if "github-action-benchmark" in s.get("uses", ""))
    assert bench["with"]["tool"] == "customSmallerIsBetter"


@pytest.mark.slow
def test_the_cpu_job_runs_as_written(tmp_path):
    for d in ("ci", "suites"):
        (tmp_path / d).symlink_to(ROOT / d)  # the checkout the job sees, outputs kept out of it
    summary = tmp_path / "summary.md"
    env = subprocess_env(GITHUB_STEP_SUMMARY=str(summary))
    ran = 0
    for cmd in _runs("cpu-gate"):
        argv = shlex.split(cmd)
        if argv[0] not in ("harness", "pytest"):
            continue  # pip: the install the fresh-venv check covers
        argv = [sys.executable, "-m", *argv] if argv[0] == "pytest" else [sys.executable, "-m", "harness", *argv[1:]]
        r = subprocess.run(argv + (["-p", "no:cacheprovider"] if "pytest" in argv else []), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
        ran += 1
    assert ran == 3
    assert "**OK**" in summary.read_text()
    suites = {s.get("name"): s for s in ET.parse(tmp_path / "gate-junit.xml").getroot()}
    assert int(suites["correctness"].get("tests")) == len(read_rows(ROOT / "ci" / "baselines" / "cpu-smoke"))
    assert suites["correctness"].get("failures") == "0"
    (bench,) = json.loads((tmp_path / "cpu-bench.json").read_text())["benchmarks"]
    assert bench["extra_info"]["backend"] == "torch-math"


def test_the_gpu_jobs_compare_on_committed_h200_results(tmp_path, capsys, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.chdir(tmp_path)
    (cmd,) = [c for c in _runs("gpu") if c.startswith("harness compare")]
    argv = [str(H200_NEW) if a == "results/pr" else str(ROOT / a) if a.startswith("ci/") else a
            for a in shlex.split(cmd)[1:]]
    assert main(argv) == 0
    assert "::error" not in capsys.readouterr().out
    entries = json.loads((tmp_path / "bench.json").read_text())
    assert 0 < len(entries) <= len(read_rows(H200_NEW))
    assert all(set(e) >= {"name", "unit", "value"} and e["unit"] == "us" and e["value"] > 0 for e in entries)
    speed = next(s for s in ET.parse(tmp_path / "compare-junit.xml").getroot() if s.get("name") == "speed")
    assert speed.get("failures") == "0" and int(speed.get("tests")) > 0
    assert summary.read_text().strip()


def test_a_regression_is_an_annotation_and_a_junit_failure(tmp_path, monkeypatch, capsys):
    base, new = read_rows(H200_BASE), read_rows(H200_NEW)
    # A graph-timed row for the slowdown (eager/host-bound classes are noise-dominated, not gated).
    timed = [i for i, r in enumerate(new) if r.status == "pass" and r.timing is not None]
    i_slow = next(i for i in timed if new[i].timing.cuda_graph.used)
    i_err = next(i for i in timed if i != i_slow)
    broken = [r.model_copy(update={"status": Status.ERROR, "reason": "forward: boom", "timing": None, "metrics": None})
              if i == i_err else r for i, r in enumerate(new)]
    slow = [r.model_copy(update={"timing": r.timing.model_copy(update={
        "median_us": r.timing.median_us * 3, "ci_low_us": r.timing.ci_low_us * 3, "ci_high_us": r.timing.ci_high_us * 3})})
        if i == i_slow else r for i, r in enumerate(broken)]
    comp = compare_rows(base, slow)
    lines = github_annotations(comp, H200_NEW)
    assert any(l.startswith("::error file=") and "title=correctness regression%3A " in l and "pass -> error" in l
               for l in lines), lines
    assert any("title=speed regression%3A " in l for l in lines), lines
    root = ET.fromstring(junit_xml(comp))
    fails = {s.get("name"): [f.get("type") for f in s.iter("failure")] for s in root}
    assert fails["correctness"] == ["correctness"] and "speed" in fails["speed"]
    assert len(benchmark_entries(comp)) == sum(1 for r in slow if r.timing is not None and r.timing.median_us)
    # From the command line: the ::error lines only under GitHub Actions, after the table.
    new_file = tmp_path / "new.jsonl"
    new_file.write_text("".join(row_json(r) + "\n" for r in slow))
    assert main(["compare", str(H200_BASE), str(new_file)]) == 1
    assert "::error" not in capsys.readouterr().out
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main(["compare", str(H200_BASE), str(new_file)]) == 1
    out = capsys.readouterr().out
    assert out.count("::error file=") == 2 and out.index("::error") > out.index("REGRESSED")
