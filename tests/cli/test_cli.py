"""The CLI end to end on a tiny suite, and every class of bad input: one message, exit 2,
nothing written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env
from harness.cli import main

TINY = """
suite: tiny
description: two small cells
cases:
  - name: gqa
    num_heads: 8
    num_kv_heads: 2
    head_size: 32
    block_size: [16, 32]
    batch:
      - kind: decode
        count: 3
        context_len: {dist: uniform, low: 10, high: 60}
      - kind: extend
        count: 1
        query_len: 7
        context_len: 20
"""


@pytest.fixture()
def tiny(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def test_run_end_to_end(tiny, tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["run", str(tiny), "--backends", "torch-math,sdpa", "--device", "cpu", "--out", str(out), "--quiet"])
    assert rc == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    assert {r["status"] for r in rows} == {"pass"}
    assert {r["backend"] for r in rows} == {"torch-math", "sdpa"}
    for r in rows:
        assert r["timing"]["median_us"] > 0 and r["metrics"]["flops"] > 0
        assert r["reproducer"].startswith("harness run ") and "--case" in r["reproducer"]
    header = json.loads((out / "run.json").read_text())
    assert header["device"]["type"] == "cpu" and header["torch"] and header["git_sha"]
    assert "torch-math" in header["backends"]
    printed = capsys.readouterr().out
    assert "Summary" in printed and "pass" in printed


def test_reproducer_reruns_one_cell(tiny, tmp_path):
    out = tmp_path / "res"
    main(["run", str(tiny), "--backends", "torch-math", "--device", "cpu", "--out", str(out), "--quiet", "--no-time",
          "--no-isolation"])
    first = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    argv = first["reproducer"].split(" ", 1)[1]
    import shlex

    out2 = tmp_path / "again"
    assert main(shlex.split(argv) + ["--out", str(out2), "--quiet", "--no-time", "--no-isolation"]) == 0
    again = [json.loads(x) for x in (out2 / "results.jsonl").read_text().splitlines()]
    assert len(again) == 1 and again[0]["case"] == first["case"]
    assert again[0]["check"]["max_abs_err"] == first["check"]["max_abs_err"]


def test_large_cells_are_skipped_on_cpu_with_the_reason(tiny, tmp_path):
    out = tmp_path / "res"
    main(["run", str(tiny), "--backends", "torch-math", "--device", "cpu", "--out", str(out), "--quiet",
          "--cpu-max-gflop", "0.000001", "--no-isolation"])
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["status"] == "skipped" and "too large for the CPU" in r["reason"] for r in rows)


@pytest.mark.parametrize(
    "suite_text, args, message",
    [
        ("suite: x\ncases: [\n", [], "malformed YAML"),
        (TINY.replace("head_size: 32", "head_size: 32\n    colour: red"), [], "unknown field(s) ['colour']"),
        (TINY.replace("head_size: 32", "head_size: large"), [], "field head_size"),
        (TINY.replace("num_kv_heads: 2", "num_kv_heads: 3"), [], "must be a multiple of num_kv_heads"),
        (TINY.replace("block_size: [16, 32]", "block_size: 0"), [], "field block_size"),
        (TINY, ["--backends", "nope"], "unknown backend 'nope'"),
        (TINY, ["--backends", "no.such.module:Backend"], "cannot import"),
        (TINY, ["--variant", "oops"], "expected BACKEND.AXIS=VALUE"),
        (TINY, ["--case", "zzz"], "nothing to run"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, capsys, suite_text, args, message):
    p = tmp_path / "s.yaml"
    p.write_text(suite_text)
    out = tmp_path / "res"
    rc = main(["run", str(p), "--device", "cpu", "--out", str(out), "--quiet", *args,
               *([] if "--backends" in args else ["--backends", "torch-math"])])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    assert not out.exists(), "nothing is written for bad input"


@pytest.mark.slow  # subprocess runs (~8-11 s): the slow job (CI) keeps the test command under 4 minutes
def test_cli_subprocess_exit_code_and_list():
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "suites/does-not-exist.yaml"], cwd=root,
                       capture_output=True, text=True, env=subprocess_env())
    assert r.returncode == 2 and "no such suite file" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "harness.cli", "list"], cwd=root, capture_output=True, text=True,
                       env=subprocess_env(COLUMNS="250"))
    assert r.returncode == 0
    assert "torch-math" in r.stdout and "sdpa" in r.stdout and "yes" in r.stdout


def test_reproducer_names_plugin_backends_by_spec(tiny, tmp_path):
    out = tmp_path / "res"
    main(["run", str(tiny), "--backends", "plugins.crashy:NaNBackend", "--device", "cpu", "--out", str(out),
          "--quiet", "--no-time", "--no-isolation"])
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert "--backends plugins.crashy:NaNBackend" in row["reproducer"]


def test_summary_groups_size_reasons_by_kind():
    from harness.cli.summary import reason_kind as _reason_kind

    a = _reason_kind("too large for the CPU: 0.6 GFLOP > --cpu-max-gflop 0.5 (run on a GPU)")
    b = _reason_kind("too large for the CPU: 40.9 GFLOP > --cpu-max-gflop 0.5 (run on a GPU)")
    c = _reason_kind("too large for the CPU: KV cache 1,300 MiB > --cpu-max-kv-mib 128 (run on a GPU)")
    assert a == b and "--cpu-max-gflop 0.5" in a and "40.9" not in b
    assert c != a and "MiB >" in c
    assert _reason_kind("block_size 16 not allowed") == "block_size 16 not allowed"


@pytest.mark.parametrize("strict", [False, True])
def test_failed_cells_end_with_a_closing_line_and_strict_sets_the_exit_code(tiny, tmp_path, capsys, strict):
    out = tmp_path / "res"
    rc = main(["run", str(tiny), "--backends", "torch-math,plugins.crashy:NaNBackend", "--device", "cpu",
               "--out", str(out), "--quiet", "--no-time", "--no-isolation", *(["--strict"] if strict else [])])
    err = " ".join(capsys.readouterr().err.split())
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    failed = sum(r["status"] in ("mismatch", "error", "timeout") for r in rows)
    assert failed == 2
    if strict:
        assert rc == 1 and f"{failed} cell(s) failed (mismatch/error/timeout): exit 1" in err
    else:
        assert rc == 0 and f"{failed} cell(s) failed (mismatch/error/timeout): exit 0; --strict makes that exit 1" in err


def test_a_clean_run_has_no_failure_line(tiny, tmp_path, capsys):
    rc = main(["run", str(tiny), "--backends", "torch-math", "--device", "cpu", "--out", str(tmp_path / "r"),
               "--quiet", "--no-time", "--no-isolation"])
    assert rc == 0 and "failed" not in capsys.readouterr().err


@pytest.mark.slow  # two CPU runs (~7 s): the slow job (CI) keeps the test command under 4 minutes
def test_keep_raw_keeps_every_sample_in_the_row(tmp_path):
    from harness.records.load import load_run

    suite = Path(__file__).resolve().parents[2] / "suites" / "conformance-cpu.yaml"
    for flag, out in ((["--keep-raw"], tmp_path / "raw"), ([], tmp_path / "plain")):
        assert main(["run", str(suite), "--case", "mixed*", "--backends", "sdpa", "--min-samples", "3",
                     "--max-samples", "4", "--quiet", "--out", str(out), *flag]) == 0
    raw = [r.timing for r in load_run(tmp_path / "raw").rows if r.timing is not None]
    plain = [r.timing for r in load_run(tmp_path / "plain").rows if r.timing is not None]
    assert raw and plain
    assert all(t.raw_us is not None and len(t.raw_us) == t.samples for t in raw)
    assert all(t.raw_us is None for t in plain)
