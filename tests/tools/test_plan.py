"""`harness plan`: steps run in order with their limits, logs and plan.json survive, bad plans exit 2."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from harness.cli import main


def _plan(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "plan.yaml"
    p.write_text(body)
    return p


def test_steps_run_in_order_with_limits_and_every_result_is_packed(tmp_path, capsys):
    plan = _plan(tmp_path, """
env: {GREETING: hello}
steps:
  - {name: first, run: "echo $GREETING; mkdir -p $RESULTS/first && echo 1 > $RESULTS/first/out", timeout_s: 20, why: a}
  - {name: hangs, run: "sleep 30", timeout_s: 1}
  - {name: fails, run: "exit 3", timeout_s: 20}
""")
    res, arc = tmp_path / "res", tmp_path / "res.tgz"
    rc = main(["plan", str(plan), "--results", str(res), "--archive", str(arc)])
    assert rc == 1  # a step failed
    rec = json.loads((res / "plan.json").read_text())
    assert [(s["name"], s["rc"], s["timed_out"]) for s in rec["steps"]] == [
        ("first", 0, False), ("hangs", 124, True), ("fails", 3, False)]
    assert rec["steps"][1]["seconds"] < 25  # cut at its limit, not left to finish
    assert (res / "logs" / "first.log").read_text().strip() == "hello"
    with tarfile.open(arc) as tar:
        assert {"res/first/out", "res/logs/fails.log", "res/plan.json"} <= set(tar.getnames())
    assert "[first] hello" in capsys.readouterr().out


def test_only_and_deadline(tmp_path):
    plan = _plan(tmp_path, """
steps:
  - {name: a, run: "true", timeout_s: 5}
  - {name: b, run: "true", timeout_s: 5}
""")
    assert main(["plan", str(plan), "--results", str(tmp_path / "r"), "--only", "b"]) == 0
    assert [s["name"] for s in json.loads((tmp_path / "r" / "plan.json").read_text())["steps"]] == ["b"]
    assert main(["plan", str(plan), "--results", str(tmp_path / "r2"), "--deadline", "1"]) == 0
    assert not (tmp_path / "r2" / "plan.json").exists()  # both skipped: under 15 s left for each


def test_only_runs_steps_in_the_order_it_names_them(tmp_path):
    # the H200 loan of 2026-12-06 asked for setup,decode,gate where the file had gate first:
    # the gate ran before the runs it compares and failed
    plan = _plan(tmp_path, """
steps:
  - {name: gate, run: "test -f $RESULTS/made", timeout_s: 5}
  - {name: make, run: "touch $RESULTS/made", timeout_s: 5}
""")
    assert main(["plan", str(plan), "--results", str(tmp_path / "r"), "--only", "make,gate"]) == 0
    assert [s["name"] for s in json.loads((tmp_path / "r" / "plan.json").read_text())["steps"]] == ["make", "gate"]


def test_bad_plans_are_one_error_exit_2(tmp_path, capsys):
    cases = {
        "steps: []": "field steps",
        "steps: [{name: a, run: x, timeout_s: '5'}]": "field steps.0.timeout_s",
        "steps: [{name: a, run: x, timeout_s: 5}, {name: a, run: y, timeout_s: 5}]": "unique",
        "steps: [{name: 'a b', run: x, timeout_s: 5}]": "field steps.0.name",
        "steps: [{name: a, run: x, timeout_s: 5, extra: 1}]": "field steps.0.extra",
        "steps: [": "plan.yaml",
    }
    for body, expected in cases.items():
        rc = main(["plan", str(_plan(tmp_path, body)), "--results", str(tmp_path / "r"), "--dry-run"])
        err = capsys.readouterr().err
        assert rc == 2 and expected in err and "Traceback" not in err, (body, err)
    good = _plan(tmp_path, "steps: [{name: a, run: 'true', timeout_s: 5}]")
    assert main(["plan", str(good), "--only", "nosuch"]) == 2
    assert "no step called nosuch" in capsys.readouterr().err

