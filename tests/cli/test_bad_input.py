"""Bad input a newcomer hits: each gets one clear message naming the flag, file, case or field,
exit 2, no traceback and nothing written; and interrupted or scripted runs behave like the
command line."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import interrupt, subprocess_env
from harness.cli import main
from harness.records.results import read_rows

ROOT = Path(__file__).resolve().parents[2]

TINY = """
suite: tiny
cases:
  - name: gqa
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    block_size: 16
    batch:
      - kind: decode
        count: 3
        context_len: 20
"""
FAST = ["--device", "cpu", "--backends", "torch-math", "--quiet", "--no-time", "--no-isolation"]


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def _one_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return " ".join(err.split())


@pytest.mark.parametrize("under", [False, True])
def test_out_at_a_file_or_under_one(tiny, tmp_path, capsys, under):
    f = tmp_path / "taken"
    f.write_text("keep me")
    out = f / "sub" if under else f
    rc = main(["run", str(tiny), *FAST, "--out", str(out)])
    err = _one_error(capsys, rc)
    assert f"--out {out}" in err and ("lies under" if under else "is a file") in err
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("flag", ["--cpu-max-gflop", "--cpu-max-kv-mib"])
@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_cpu_size_limits_must_be_positive(tiny, tmp_path, capsys, flag, value):
    out = tmp_path / "res"
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--out", str(out), flag, value]))
    assert f"{flag} {value}: a positive number" in err
    assert not out.exists()


def test_max_samples_zero_names_max_samples(tiny, tmp_path, capsys):
    out = tmp_path / "res"
    err = _one_error(capsys, main(["run", str(tiny), *FAST[:-2], "--out", str(out), "--max-samples", "0"]))
    assert "max samples 0: must be at least 1" in err and "min samples" not in err
    assert not out.exists()


def test_a_missing_class_is_named_as_missing(tiny, tmp_path, capsys):
    args = ["run", str(tiny), *FAST, "--out", str(tmp_path / "r")]
    args[args.index("torch-math")] = "plugins.crashy:NaNBackendd"
    err = _one_error(capsys, main(args))
    assert "module 'plugins.crashy' has no attribute 'NaNBackendd'; closest: NaNBackend" in err
    assert "not an AttentionBackend subclass" not in err


@pytest.mark.parametrize("name, message", [
    ("''", "cases[0]: field name: must be a non-empty string; got ''"),
    ("'  '", "cases[0]: field name: must be a non-empty string"),
    ("[c1, c2]", "cases[0]: field name: must be a non-empty string; got a list"),
])
def test_case_names_must_be_non_empty_strings(tmp_path, capsys, name, message):
    p = tmp_path / "s.yaml"
    p.write_text(TINY.replace("name: gqa", f"name: {name}"))
    err = _one_error(capsys, main(["validate", str(p)]))
    assert f"{p}: {message}" in err and "field group" not in err


@pytest.mark.parametrize("value, message", [
    ("-1", "field kv_scale: Input should be greater than 0 or 'auto', got -1"),
    ("big", "field kv_scale: Input should be a valid number or 'auto', got 'big'"),
])
def test_a_union_field_gets_one_message(tmp_path, capsys, value, message):
    p = tmp_path / "s.yaml"
    p.write_text(TINY.replace("head_size: 32", f"head_size: 32\n    kv_scale: {value}"))
    err = _one_error(capsys, main(["validate", str(p)]))
    assert f"case 'gqa': {message}" in err
    assert "constrained-float" not in err and "literal[" not in err


def test_a_missing_trace_file_shows_where_it_was_looked_for(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "suites"
    d.mkdir()
    p = d / "s.yaml"
    p.write_text(TINY.split("    batch:")[0] + "    batch: {trace: missing.csv}\n")
    err = _one_error(capsys, main(["validate", str(p)]))
    assert "field batch.trace: missing.csv: no such file" in err and "line 0" not in err
    assert str(d / "missing.csv") in err and str(tmp_path / "missing.csv") in err


def test_resume_with_a_seed_of_a_seedless_run(tiny, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", str(tiny), *FAST, "--out", str(out)]) == 0
    capsys.readouterr()
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--resume", str(out), "--seed", "5"]))
    assert "it ran without --seed" in err and "drop --seed" in err and "None" not in err


@pytest.mark.parametrize("args, message", [
    (["--case", "gq"], "nothing to run: --case 'gq': matches none of the 1 case(s)"),
    (["--case", "nosuch"], "its cases: gqa"),
    (["--backends", ","], "--backends ',': an empty item"),
])
def test_a_filter_that_matches_nothing_is_named(tiny, tmp_path, capsys, args, message):
    argv = ["run", str(tiny), *FAST, "--out", str(tmp_path / "r"), *args]
    if "--backends" in args:
        del argv[argv.index("--backends"):argv.index("--backends") + 2]
    err = _one_error(capsys, main(argv))
    assert message in err
    if args == ["--case", "gq"]:
        assert "closest: gqa" in err
    assert not (tmp_path / "r").exists()


def test_a_case_group_is_offered_as_a_glob(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(TINY.replace("block_size: 16", "block_size: [16, 32]"))
    err = _one_error(capsys, main(["run", str(p), *FAST, "--out", str(tmp_path / "r"), "--case", "gqa"]))
    assert "closest: gqa*" in err


# ---------------------------------------------------------------- real processes

SCRIPT = """
import sys
from harness.cli import main
rc = main(["run", {suite!r}, "--device", "cpu", "--backends", "torch-math", "--out", {out!r}, "--quiet", "--no-time"])
print("rc", rc)
"""


@pytest.mark.slow
def test_main_from_a_script_without_guard_and_from_stdin(tiny, tmp_path):
    """spawn re-runs the parent's __main__ in each worker: neither a script without the
    `if __name__ == "__main__":` guard nor one fed on stdin may lose its cells to that."""
    outs = [tmp_path / "noguard", tmp_path / "stdin"]
    script = tmp_path / "noguard.py"
    script.write_text(SCRIPT.format(suite=str(tiny), out=str(outs[0])))
    env = subprocess_env()
    procs = [subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE),
             subprocess.Popen([sys.executable, "-"], cwd=tmp_path, env=env, text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
    inputs = [None, SCRIPT.format(suite=str(tiny), out=str(outs[1]))]
    for proc, out, given in zip(procs, outs, inputs):
        stdout, stderr = proc.communicate(given, timeout=240)
        assert proc.returncode == 0 and "rc 0" in stdout, stderr
        rows = read_rows(out)
        assert len(rows) == 1 and rows[0].status == "pass", rows[0].reason
        assert "Traceback" not in stderr, stderr


@pytest.mark.slow  # subprocess runs (~8-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_sigterm_keeps_rows_and_prints_the_resume_command(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(TINY.replace("block_size: 16", "block_size: [8, 16, 32]"))
    out = tmp_path / "r"
    argv = ["run", str(suite), "--device", "cpu", "--backends", "torch-math,plugins.crashy:SlowBackend",
            "--out", str(out), "--no-time", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *argv], cwd=ROOT, env=subprocess_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        t0 = time.monotonic()
        res = out / "results.jsonl"
        while not (res.exists() and res.read_text().count("\n") >= 1):
            assert proc.poll() is None and time.monotonic() - t0 < 120, "no row appeared"
            time.sleep(0.05)
    except BaseException:
        interrupt(proc, signal.SIGKILL)
        raise
    rc, err = interrupt(proc, signal.SIGTERM, group=False)  # the parent only, as `kill PID` or a scheduler does
    assert rc == 128 + signal.SIGTERM and "terminated (SIGTERM)" in err and "Traceback" not in err, err
    rows = read_rows(out)
    assert rows and all(r.status == "pass" for r in rows)
    # The command names the suite's copy in the results folder (it resumes from any directory).
    resumed = [str(out / "suite.yaml") if a == str(suite) else a for a in argv]
    told = shlex.join(["harness", *resumed[:resumed.index("--out")], *resumed[resumed.index("--out") + 2:],
                       "--resume", str(out)])
    assert told in " ".join(err.split()), err
    assert main([*shlex.split(told)[1:], "--no-isolation"]) == 0
    assert len(read_rows(out)) == 6
