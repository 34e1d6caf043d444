"""Killed runs keep every finished row; --resume runs only what is missing and ends with the
same rows as an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import interrupt, subprocess_env
from harness.cli import main
from harness.records.results import read_header, read_rows, repair_torn_tail

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
suite: resume
cases:
  - name: c
    num_heads: 4
    num_kv_heads: 1
    head_size: 16
    block_size: [8, 16, 32]
    batch:
      - kind: decode
        count: 2
        context_len: {dist: uniform, low: 5, high: 40}
"""
BACKENDS = "torch-math,plugins.crashy:SlowBackend"


def _statuses(out):
    rows = read_rows(out)
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys)), "no cell may be recorded twice"
    return {(r.key, r.status) for r in rows}


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(suite, out, module="harness.cli", backends=BACKENDS, extra=()):
    """The run in its own process group, started with Ctrl-C ignored (as a background job of a
    script, e.g. a CI runner, is), then waited for until the harness has taken SIGINT: from
    there on every moment of startup is the harness's to handle, whatever the parent's
    disposition and however slowly this machine starts Python."""
    env = subprocess_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "run", str(suite), "--device", "cpu", "--backends", backends,
         "--out", str(out), "--no-time", "--quiet", *extra],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_ignore_sigint)
    _wait_sigint_caught(proc)
    return proc


def _wait_sigint_caught(proc, limit=60):
    """Until /proc says the process has a SIGINT handler (the harness's startup guard)."""
    status = Path(f"/proc/{proc.pid}/status")
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit and proc.poll() is None:
        try:
            caught = int(next(ln for ln in status.read_text().splitlines() if ln.startswith("SigCgt:")).split()[1], 16)
        except (OSError, StopIteration):
            return  # no /proc: start as before
        if caught >> (signal.SIGINT - 1) & 1:
            return
        time.sleep(0.005)


def _wait_rows(proc, out, n, limit=60):
    res = out / "results.jsonl"
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if res.exists() and res.read_text().count("\n") >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended before {n} rows: {proc.stderr.read()}")
        time.sleep(0.05)
    interrupt(proc, signal.SIGKILL)
    pytest.fail("no rows appeared")


def _group_gone(pgid, limit=10):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture()
def suite(tmp_path):
    p = tmp_path / "suite.yaml"
    p.write_text(SUITE)
    return p


@pytest.mark.slow  # a whole run in a subprocess (~10-14 s): the slow job (CI) keeps the test command under 4 minutes
def test_sigkill_midway_then_resume_matches_uninterrupted_run(suite, tmp_path):
    baseline = tmp_path / "baseline"
    assert main(["run", str(suite), "--device", "cpu", "--backends", BACKENDS, "--out", str(baseline),
                 "--no-time", "--quiet", "--no-isolation"]) == 0
    expected = _statuses(baseline)
    assert len(expected) == 6

    out = tmp_path / "killed"
    proc = _start(suite, out)
    try:
        _wait_rows(proc, out, 2)
        os.kill(proc.pid, signal.SIGKILL)  # the parent only: its worker must not outlive it
        proc.wait(timeout=10)
        assert _group_gone(proc.pid), "the worker outlived its killed parent"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    before = read_rows(out)
    assert 2 <= len(before) < 6
    # Simulate a kill in the middle of a write: a torn last line.
    with open(out / "results.jsonl", "a") as fh:
        fh.write('{"suite": "resume", "case": "c[block_si')

    # The resume in this process (isolation is not what it tests; the printed command's resume,
    # with workers, is _resume_as_told's).
    assert main(["run", str(suite), "--device", "cpu", "--backends", BACKENDS, "--resume", str(out),
                 "--no-time", "--quiet", "--no-isolation"]) == 0
    assert _statuses(out) == expected
    for line in (out / "results.jsonl").read_text().splitlines():
        json.loads(line)  # the torn line is gone, every line parses
    header = read_header(out)
    (resumed,) = header["resumed"]
    assert resumed["rows_before"] == len(before) and resumed["cells_to_run"] == 6 - len(before)
    assert resumed["torn_bytes_removed"] == len('{"suite": "resume", "case": "c[block_si')
    assert header["command"].startswith("harness run") and header["suite"] == "resume"


@pytest.mark.slow  # a whole run in a subprocess (~10-14 s): the slow job (CI) keeps the test command under 4 minutes
def test_ctrl_c_saves_rows_and_exits_130(suite, tmp_path):
    out = tmp_path / "interrupted"
    proc = _start(suite, out)
    _wait_rows(proc, out, 1)
    rc, err = interrupt(proc, signal.SIGINT)  # what a terminal sends to the whole process group
    assert rc == 130 and "interrupted" in err and "Traceback" not in err, err
    assert _group_gone(proc.pid)
    rows = read_rows(out)
    assert rows and all(r.status == "pass" for r in rows)
    _resume_as_told(err, suite, out)


def test_ctrl_c_swallowed_by_a_library_still_stops_the_run(suite, tmp_path):
    # The backend drops the KeyboardInterrupt raised inside its forward (as native code that
    # catches its callback's exception does); the harness remembered the signal and stops at its
    # next safe point instead of running to the end with exit 0.
    out = tmp_path / "swallowed"
    proc = _start(suite, out, backends="plugins.crashy:SwallowingBackend", extra=["--no-isolation"])
    _wait_rows(proc, out, 1)
    rc, err = interrupt(proc, signal.SIGINT)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err, err
    assert 1 <= len(read_rows(out)) < 3


def _resume_as_told(err, suite, out):
    """The interrupt message names the exact command that continues the run; it does, from any
    directory: it names the results folder's copy of the suite, by absolute path."""
    import shlex

    expected = shlex.join(["harness", "run", str((out / "suite.yaml").resolve()), "--device", "cpu", "--backends", BACKENDS,
                           "--no-time", "--quiet", "--resume", str(out)])
    assert expected in " ".join(err.split()), err
    argv = shlex.split(expected)[1:]
    assert main(argv) == 0
    assert len(read_rows(out)) == 6


@pytest.mark.parametrize("module, when", [("harness.cli", 0.3), ("harness", 0.3), ("harness", 1.5),
                                          pytest.param("harness.cli", "header", marks=pytest.mark.slow)])
def test_ctrl_c_at_any_moment_of_startup_exits_130_without_traceback(suite, tmp_path, module, when):
    # While torch imports, while workers start, before any row: one line, never a traceback.
    out = tmp_path / "early"
    proc = _start(suite, out, module)
    if when == "header":
        t0 = time.monotonic()
        while not (out / "run.json").exists() and time.monotonic() - t0 < 60 and proc.poll() is None:
            time.sleep(0.01)
    else:
        time.sleep(when)
    rc, err = interrupt(proc, signal.SIGINT)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert _group_gone(proc.pid)
    if (out / "run.json").exists():
        _resume_as_told(err, suite, out)
    else:
        assert "nothing was run or written" in err or "before the run started: nothing to resume" in err, err


def test_resume_of_a_complete_run_runs_nothing(suite, tmp_path, capsys):
    out = tmp_path / "done"
    args = ["run", str(suite), "--device", "cpu", "--backends", "torch-math", "--no-time", "--quiet", "--no-isolation"]
    assert main([*args, "--out", str(out)]) == 0
    text = (out / "results.jsonl").read_text()
    assert main([*args, "--resume", str(out)]) == 0
    assert (out / "results.jsonl").read_text() == text
    assert "nothing to resume" in capsys.readouterr().out
    # Adding a backend on resume runs only its cells.
    assert main([*args[:5], "torch-math,sdpa", *args[6:], "--resume", str(out)]) == 0
    rows = read_rows(out)
    assert [r.backend for r in rows] == ["torch-math"] * 3 + ["sdpa"] * 3


@pytest.mark.parametrize("setup, message", [
    (lambda out: (out / "run.json").write_text(json.dumps({"suite": "other"})), "holds suite 'other'"),
    (lambda out: (out / "run.json").write_text(json.dumps({"suite": "resume", "seed": 7})), "same seed"),
    (lambda out: (out / "results.jsonl").write_text('garbage\n{"a": 1}\n'), "line 1 is not JSON"),
])
def test_resume_refuses_a_folder_it_cannot_continue(suite, tmp_path, capsys, setup, message):
    out = tmp_path / "bad"
    out.mkdir()
    setup(out)
    rc = main(["run", str(suite), "--device", "cpu", "--backends", "torch-math", "--resume", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_repair_torn_tail(tmp_path):
    p = tmp_path / "results.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    assert repair_torn_tail(p) == 6
    assert p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert repair_torn_tail(p) == 0
    p.write_bytes(b'{"only": "torn')
    assert repair_torn_tail(p) == 14 and p.read_bytes() == b""
    assert repair_torn_tail(tmp_path / "missing.jsonl") == 0


def test_an_error_an_interrupt_caused_exits_130_without_traceback(monkeypatch, tmp_path, capsys):
    """Ctrl-C inside an import turns into another error on its retry (the CI box, 1.5 s into
    `harness run`: numpy's "cannot load module more than once per process" under torch's import,
    a traceback and exit 1): after an interrupt arrived, any error is the interrupt's, exit 130."""
    import signal

    from harness.cli.commands import validate

    def interrupted_import(args):
        try:
            signal.raise_signal(signal.SIGINT)  # the handler harness.cli.main installed raises here
        except KeyboardInterrupt:
            raise ImportError("cannot load module more than once per process") from None

    monkeypatch.setattr(validate, "run", interrupted_import)
    suite = tmp_path / "s.yaml"
    suite.write_text("suite: s\ncases: []\n")
    assert main(["validate", str(suite)]) == 130
    err = capsys.readouterr().err
    assert "interrupted before the run started" in err and "Traceback" not in err
    # without an interrupt the same error is not hidden
    monkeypatch.setattr(validate, "run", lambda args: (_ for _ in ()).throw(ImportError("real")))
    with pytest.raises(ImportError, match="real"):
        main(["validate", str(suite)])
