"""Defects a newcomer found from a fresh clone (issue 40): each bad input is one clear line
naming the file, flag or field, exit 2, no traceback, nothing half-written."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from harness.cli import main

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


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """One small finished run (two backends, checked, not timed) that the tests copy."""
    d = tmp_path_factory.mktemp("ran")
    suite = d / "tiny.yaml"
    suite.write_text(TINY.replace("block_size: 16", "block_size: [16, 32]"))
    out = d / "r"
    argv = ["run", str(suite), *FAST, "--out", str(out)]
    argv[argv.index("torch-math")] = "torch-math,sdpa"
    assert main(argv) == 0
    return out


def _one_error(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return " ".join(err.split())


def _copy(ran: Path, tmp_path: Path, name: str = "c") -> Path:
    return Path(shutil.copytree(ran, tmp_path / name))


# ---------------------------------------------------------------- 1: corrupt results.jsonl.gz

@pytest.mark.parametrize("damage", ["truncated", "not-gzip"])
@pytest.mark.parametrize("command", ["report", "compare", "export", "recommend"])
def test_a_corrupt_gz_is_one_line_naming_it(ran, tmp_path, capsys, damage, command):
    d = _copy(ran, tmp_path)
    packed = gzip.compress((d / "results.jsonl").read_bytes())
    (d / "results.jsonl").unlink()
    gz = d / "results.jsonl.gz"
    gz.write_bytes(packed[:len(packed) // 2] if damage == "truncated" else b"garbage")
    argv = {"report": ["report", str(d), "-o", str(tmp_path / "x.html")],
            "compare": ["compare", str(ran), str(d)],
            "export": ["export", str(d), "--csv", str(tmp_path / "x.csv")],
            "recommend": ["recommend", str(d)]}[command]
    err = _one_error(capsys, main(argv))
    assert f"{gz}: not a readable gzip file" in err
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "x.csv").exists()


# ---------------------------------------------------------------- 2: --seed

@pytest.mark.parametrize("seed", ["-1", "99999999999999999999"])
def test_a_seed_out_of_range_is_refused_before_anything_is_written(tiny, tmp_path, capsys, seed):
    out = tmp_path / "r"
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--out", str(out), f"--seed={seed}"]))
    assert f"--seed {seed}: an integer from 0 to 2**63-1" in err
    assert not out.exists()


def test_the_seed_flag_and_the_suite_field_share_one_range():
    from harness.cli.run_flags import RunFlags
    from harness.spec.limits import MAX_SEED

    limits = RunFlags.model_fields["seed"].metadata
    assert any(getattr(m, "le", None) == MAX_SEED for m in limits)
    assert any(getattr(m, "ge", None) == 0 for m in limits)


def test_a_folder_left_by_a_failed_start_does_not_block_its_out(tiny, tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "results.jsonl").write_text("")  # what a start stopped before its first row leaves
    (out / "run.json").write_text("{}")
    assert main(["run", str(tiny), *FAST, "--out", str(out)]) == 0
    assert (out / "results.jsonl").read_text().count("\n") == 1


# ---------------------------------------------------------------- 5: output paths

@pytest.mark.parametrize("command", ["report", "export", "compare-markdown", "suggest"])
def test_an_output_path_that_is_a_folder(ran, tmp_path, capsys, command):
    d = tmp_path / "somedir"
    d.mkdir()
    argv = {"report": ["report", str(ran), "-o", str(d)],
            "export": ["export", str(ran), "--csv", str(d)],
            "compare-markdown": ["compare", str(ran), str(ran), "--markdown", str(d)],
            "suggest": ["recommend", str(ran), "--suggest", str(d)]}[command]
    err = _one_error(capsys, main(argv))
    assert f"{d}: is a folder; give a file name to write" in err
    assert list(d.iterdir()) == []


def test_schema_output_under_a_missing_folder_is_written(tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "x.json"
    assert main(["schema", "row", "-o", str(out)]) == 0
    assert out.read_text().startswith("{")


@pytest.mark.parametrize("where", ["/proc/x", "/proc/x/y"])
def test_an_out_folder_that_cannot_be_made(tiny, capsys, where):
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--out", where]))
    assert f"--out {where}: cannot make the folder" in err


def test_recommend_out_that_cannot_be_made(ran, capsys):
    err = _one_error(capsys, main(["recommend", str(ran), "--out", "/proc/x"]))
    assert "/proc/x/recommend.md: cannot make its folder /proc/x" in err


# ---------------------------------------------------------------- 7: misleading messages

def test_a_corrupt_run_json_names_the_file(ran, tmp_path, capsys):
    d = _copy(ran, tmp_path)
    (d / "run.json").write_text('{"suite": ')
    err = _one_error(capsys, main(["report", str(d), "-o", str(tmp_path / "x.html")]))
    assert f"{d / 'run.json'}: not valid JSON" in err


# ---------------------------------------------------------------- 8: accepted silently

def test_a_folder_with_two_different_rows_files_is_refused(ran, tmp_path, capsys):
    d = _copy(ran, tmp_path)
    rows = (d / "results.jsonl").read_text().splitlines(keepends=True)
    (d / "results.jsonl.gz").write_bytes(gzip.compress("".join(rows[:1]).encode()))
    err = _one_error(capsys, main(["report", str(d), "-o", str(tmp_path / "x.html")]))
    assert f"{d}: holds both results.jsonl and results.jsonl.gz and they differ" in err
    (d / "results.jsonl.gz").write_bytes(gzip.compress("".join(rows).encode()))  # the same rows: fine
    assert main(["report", str(d), "-o", str(tmp_path / "x.html")]) == 0


@pytest.mark.parametrize("argv, message", [
    (["compare", "{ran}", "{ran}", "--threshold", "-5%"], "--threshold '-5%': out of range"),
    (["recommend", "{ran}", "--tie", "-3%"], "--tie '-3%': out of range"),
])
def test_a_negative_percentage_reaches_the_flags_own_check(ran, capsys, argv, message):
    err = _one_error(capsys, main([a.format(ran=ran) for a in argv]))
    assert message in err and "expected one argument" not in err


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model"], "--model no-such-model: unknown model 'no-such-model'"),
    (["--model", "./none.json"], "--model ./none.json: model: ./none.json: no such config.json"),
    (["--model", "llama-3.1-8b", "--tp", "3"], "--model llama-3.1-8b --tp 3: model llama-3.1-8b: field tp: 3 does not"),
    (["--batch-spec", "zz"], "--batch-spec zz: segment 'zz'"),
])
def test_a_bad_command_line_override_blames_the_flag_not_the_suite(tiny, tmp_path, capsys, args, message):
    out = tmp_path / "r"
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--out", str(out), *args]))
    assert message in err and str(tiny) not in err and "case 'gqa'" not in err
    assert not out.exists()


# ---------------------------------------------------------------- 8: accepted silently

@pytest.mark.parametrize("args, message", [
    (["--model", "llama-3.1-8b,,"], "--model 'llama-3.1-8b,,': an empty item"),
    (["--batch-spec", "2q16", "--batch-spec", ""], "--batch-spec '2q16 ': an empty item"),
    (["--variant", "flash-attn.fa_version=2"], "--variant flash-attn: flash-attn is not in this run (its backends: "
                                               "torch-math); add it to --backends or drop the --variant"),
])
def test_what_was_dropped_or_ignored_is_an_error(tiny, tmp_path, capsys, args, message):
    out = tmp_path / "r"
    err = _one_error(capsys, main(["run", str(tiny), *FAST, "--out", str(out), *args]))
    assert message in err
    assert not out.exists()


def test_a_repeated_batch_spec_adds_cases(tiny, tmp_path):
    from harness.records.results import read_rows

    out = tmp_path / "r"
    assert main(["run", str(tiny), *FAST, "--out", str(out), "--batch-spec", "2q16", "--batch-spec", "1q1s64,q8"]) == 0
    assert sorted(r.case for r in read_rows(out)) == ["gqa/1q1s64", "gqa/2q16", "gqa/q8"]


# ---------------------------------------------------------------- 3: --no-check rows

def test_a_no_check_run_is_unchecked_everywhere_a_status_is_shown(tiny, tmp_path, capsys):
    from harness.analysis.compare import compare_paths
    from harness.records.results import Status, read_rows

    out = tmp_path / "r"
    argv = ["run", str(tiny), *FAST, "--out", str(out), "--no-check"]
    argv.remove("--quiet")
    assert main(argv) == 0
    term = capsys.readouterr().out
    rows = read_rows(out)
    assert [r.status for r in rows] == [Status.UNCHECKED] and rows[0].check is None
    assert "unchk" in term and "1 row(s) were not checked either (--no-check)" in " ".join(term.split())
    assert main(["export", str(out), "--csv", str(tmp_path / "x.csv")]) == 0
    assert ",unchecked," in (tmp_path / "x.csv").read_text()
    assert main(["report", str(out), "-o", str(tmp_path / "x.html")]) == 0
    assert 'st-unchecked">unchecked 1' in (tmp_path / "x.html").read_text()
    # compare: a checked run of the same cells says the status changed; never a silent "same".
    checked = tmp_path / "c"
    assert main(["run", str(tiny), *FAST, "--out", str(checked)]) == 0
    comp = compare_paths(out, checked, threshold=0.05, correctness_only=True)
    assert [d.info for d in comp.diffs] == ["status unchecked -> pass"]


# ---------------------------------------------------------------- 4: crosscheck and repro

def test_crosscheck_gates_gpu_and_process_clock_rows_and_reports_cpu_wall_clock_ones():
    from harness.crosscheck.run import gated, verdict

    outside = {"a": {"median_us": 100.0}, "b": {"median_us": 110.0}}
    assert gated("cuda:0", "cuda_event") and gated("cpu", "process_time") and not gated("cpu", "wall_clock")
    v = verdict(500.0, outside, 0.03, gated=False)
    assert v["flagged"] is False and v["noisy"] is True and "outside 3%" in v["reason"]
    assert verdict(500.0, outside, 0.03)["flagged"] is True
    assert verdict(105.0, outside, 0.03, gated=False)["noisy"] is False


def test_crosscheck_of_a_clean_cpu_wall_clock_run_flags_nothing(tmp_path, capsys):
    import json

    suite = tmp_path / "s.yaml"
    suite.write_text(TINY.replace("block_size: 16", "block_size: [16, 32]"))
    out = tmp_path / "r"
    argv = ["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--quiet", "--no-isolation",
            "--max-time", "0.05", "--out", str(out)]
    assert main(argv) == 0
    # One row made 50x off: on the CPU wall clock it is reported as noisy, never a flag (exit 0).
    lines = (out / "results.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["timing"]["median_us"] *= 50
    (out / "results.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert main(["crosscheck", str(out), "--min-run-time", "0.02"]) == 0
    data = json.loads((out / "crosscheck.json").read_text())
    assert data["checked"] == 4 and data["flagged"] == 0
    assert data["rows"][0]["noisy"] and "noisy, not flagged (CPU wall clock)" in (out / "crosscheck.md").read_text()


def test_repro_of_an_unsupported_row_refuses(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(TINY.replace("head_size: 32", "head_size: 32\n    softcap: 4.0"))
    out = tmp_path / "r"
    assert main(["run", str(suite), *FAST[:2], "--backends", "sdpa", "--quiet", "--no-time", "--no-isolation",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    script = tmp_path / "x.py"
    err = _one_error(capsys, main(["repro", str(out), "0", "-o", str(script)]))
    assert "row #0 (gqa / sdpa []) is unsupported: logits softcap not supported" in err
    assert "no call to reproduce" in err and not script.exists()


# ---------------------------------------------------------------- 7: more misleading messages

def test_an_interrupt_before_a_resume_starts_names_the_saved_rows(ran, capsys):
    import argparse

    from harness.cli.entry import _interrupted

    args = argparse.Namespace(resume=str(ran), started_out_dir=None)
    argv = ["run", "s.yaml", "--resume", str(ran)]
    assert _interrupted(args, argv) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert f"interrupted: 4 finished row(s) are saved in {ran}; continue with:" in err
    assert "nothing to resume" not in err


def test_compare_warns_when_the_runs_used_different_clocks(tiny, tmp_path):
    from harness.analysis.compare import compare_paths

    outs = []
    for clock in ("wall", "process"):
        out = tmp_path / clock
        argv = ["run", str(tiny), *FAST, "--out", str(out), "--max-time", "0.02", "--cpu-clock", clock]
        argv.remove("--no-time")
        assert main(argv) == 0
        outs.append(out)
    comp = compare_paths(*outs, threshold=0.05)
    assert any("timed on different clocks (baseline: wall_clock; new: process_time)" in w for w in comp.warnings)
    assert not any("different clocks" in w for w in compare_paths(outs[0], outs[0], threshold=0.05).warnings)


# ---------------------------------------------------------------- 8: duplicated rows, long names

def test_a_results_file_with_every_row_twice_is_reported_once_with_a_warning(ran, tmp_path, capsys):
    d = _copy(ran, tmp_path)
    text = (d / "results.jsonl").read_text()
    (d / "results.jsonl").write_text(text + text)
    out = tmp_path / "x.html"
    assert main(["report", str(d), "-o", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: {d}: 4 duplicate row(s)" in err
    page = out.read_text()
    assert "4 rows from 1 source(s)" in " ".join(page.split()) and "4 duplicate row(s)" in page


def test_a_very_long_case_name_is_cut_in_terminal_lines_and_whole_in_the_files(tmp_path, capsys):
    from harness.records.results import read_rows

    name = "n" * 3000
    suite = tmp_path / "s.yaml"
    suite.write_text(TINY.replace("name: gqa", f"name: {name}"))
    out = tmp_path / "r"
    argv = ["run", str(suite), *FAST, "--out", str(out)]
    argv[argv.index("torch-math")] = "torch-math,plugins.crashy:NaNBackend"
    assert main(argv) == 0
    cap = capsys.readouterr()
    lines = (cap.out + cap.err).splitlines()
    assert max(len(x) for x in lines) < 600 and any("n…" in x for x in lines)
    assert {r.case for r in read_rows(out)} == {name}


# ---------------------------------------------------------------- 9: the rest

def test_a_worker_still_starting_is_killed_at_shutdown_not_waited_for():
    """A Ctrl-C at startup waited up to 5 s for a worker that reads its pipe only once torch is
    imported: such a worker is killed at once, nothing is sent to it."""
    import multiprocessing as mp
    import time as _time

    from harness.execute.local import LocalExecutor, _Slot

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_time.sleep, args=(60,), daemon=True)
    proc.start()
    ex = LocalExecutor.__new__(LocalExecutor)
    ex.slots, ex.spares, ex.prestarted = [_Slot(index=0, device="cpu", opts=None, proc=proc, conn=parent, ready=False)], {}, []
    ex._shutdown()
    assert not proc.is_alive() and proc.exitcode == -9
    with pytest.raises(EOFError):  # the pipe was closed with no Shutdown message in it
        child.recv()


def test_the_python_api_quiet_prints_no_summary(tiny, tmp_path, capsys):
    import harness

    df = harness.run(tiny, out=tmp_path / "r", device="cpu", backends="torch-math", no_time=True, isolation=False,
                     quiet=True)
    assert len(df) == 1 and capsys.readouterr().out == ""


def test_gate_with_a_missing_baseline_stops_before_running(tiny, tmp_path, capsys):
    from harness.cli.commands.gate import main as gate

    out = tmp_path / "new"
    assert gate(["--suite", str(tiny), "--baseline", str(tmp_path / "none"), "--out", str(out), "--device", "cpu"]) == 2
    assert "no baseline at" in capsys.readouterr().err and not out.exists()


def test_a_run_where_nothing_ran_says_what_runs_here(tiny, tmp_path, capsys):
    argv = ["run", str(tiny), *FAST, "--out", str(tmp_path / "r")]
    argv[argv.index("torch-math")] = "flash-attn"  # not installed on the CPU test machines
    assert main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing ran: all" in err and "skipped or unsupported on cpu" in err
    assert "did not include:" in err and "torch-math" in err and "--batch-spec" in err


# ---------------------------------------------------------------- run speed (issue 40 B)

def test_the_worker_started_before_torch_runs_the_cells(tiny, tmp_path, caplog):
    import logging

    from harness.records.results import read_rows

    caplog.set_level(logging.INFO, logger="harness.execute.local")
    out = tmp_path / "r"
    argv = ["run", str(tiny), *FAST, "--out", str(out)]
    argv.remove("--no-isolation")
    assert main(argv) == 0
    assert "started before the parent imported torch" in caplog.text
    rows = read_rows(out)
    assert rows[0].status == "pass" and rows[0].worker is not None and rows[0].worker.pid is not None


def test_plain_progress_prints_a_line_per_group_and_every_ten_seconds_with_an_eta():
    from rich.console import Console

    from harness.cli.progress import PlainProgress, eta_s

    now = [0.0]
    con = Console(record=True, width=200)
    p = PlainProgress(con, total=6, label="s", every_s=10.0, clock=lambda: now[0])
    for t, group in ((1, "a"), (2, "a"), (13, "a"), (14, "b"), (15, "b"), (30, "b")):
        now[0] = t
        p.advance(group)
    lines = con.export_text().splitlines()
    assert lines == ["s: 3/6 cells, 0:13 elapsed, ETA 0:13",  # 10 s after the start
                     "s: 4/6 cells, 0:14 elapsed, ETA 0:07 (group a done)",
                     "s: 6/6 cells, 0:30 elapsed"]
    assert eta_s(0, 5, 3.0) is None and eta_s(1, 5, 2.0) == 8.0


def test_a_cold_gpu_run_says_how_long_its_first_calls_took():
    from harness.records.results import read_rows
    from harness.report.terminal.tables import first_call_note

    rows = read_rows(Path(__file__).resolve().parent / "data/h200/models")  # a copy of a committed H200 run
    note = first_call_note(rows)
    assert note.startswith("First calls took 23.7 s in all (flash-attn call_form=vllm,fa_version=4 12.4 s, "
                           "flash-attn call_form=fastest,fa_version=4 11.3 s, 5 more)")
    assert "next run on this machine starts faster" in note
    cpu = [r.model_copy(update={"device": "cpu"}) for r in rows]
    assert first_call_note(cpu) is None  # CPU first calls compile nothing


def test_a_long_steady_call_stops_on_the_noise_target_before_min_samples():
    """sdpa's padded calls (issue 40: 57% of the H200 decode run's cell time) met the 1% target
    3-50x over at min_samples=10: a call of 20 ms or more may stop once the median's CI has its
    confidence (6 samples at 95%). Synthetic samples in seconds, as the timing loop takes them."""
    from harness.timing import TimingOptions
    from harness.timing.stopping import STOP_NOISE, stop_reason

    opts = TimingOptions(min_samples=10, target_rel_noise=0.01, max_time_s=2.0)
    steady = [0.1370, 0.1371, 0.1372, 0.1373, 0.1374, 0.1375]  # a 137 ms call, +-0.2%
    assert stop_reason(steady[:5], 0.7, opts) is None  # 5 samples: no 95% CI of the median yet
    assert stop_reason(steady, 0.8, opts) == STOP_NOISE
    short = [x / 100 for x in steady]  # the same spread on a 1.37 ms call: min_samples still holds
    assert stop_reason(short, 0.01, opts) is None
    noisy = [0.130, 0.134, 0.137, 0.140, 0.145, 0.150]  # long but 7% wide: the target still decides
    assert stop_reason(noisy, 0.8, opts) is None
    assert stop_reason(steady, 0.8, opts.model_copy(update={"long_call_ms": None})) is None
