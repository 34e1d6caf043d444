"""Inputs that were taken silently or answered confusingly: each is refused with one line
(exit 2), or says what it did (issue: empty list items, a free-text clock regime, Ctrl-C before
the arguments were read, the model download switch, merge into a file, a closed stdout,
--clock-regime where it does nothing, CPU noise in crosscheck, the no-time verdict lines)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.typed_rows import CFG, check, host, timing
from rich.console import Console

from harness.cli import entry, main
from harness.records.results import ResultRow, ResultWriter, write_header
from conftest import subprocess_env
from harness.records.header import RunHeader

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "ci" / "smoke.yaml"
BASELINE = ROOT / "ci" / "baselines" / "cpu-smoke"  # 24 --no-time CPU rows
ONE = ["--case", "decode-gqa[block_size=16,count=1]", "--backends", "torch-math"]
ENV = subprocess_env()  # keeps the caller's PYTHONPATH (the GPU kit's libraries come from it)
BATCH = {"num_reqs": 1, "num_tokens": 1, "num_decode": 1, "num_prefill": 0, "num_extend": 0,
         "max_query_len": 1, "max_seq_len": 64, "mean_seq_len": 64.0, "prefix_groups": 0}


def _harness(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env or ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("flag, value", [("--backends", ""), ("--backends", "sdpa,,"), ("--backends", ",sdpa"),
                                         ("--devices", "cpu,,cpu"), ("--devices", "")])
def test_empty_list_items_are_refused(tmp_path, capsys, flag, value):
    out = tmp_path / "r"
    assert main(["run", str(SMOKE), flag, value, "--no-time", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {value!r}: an empty item" in err and not out.exists()


def _timed_run(folder: Path) -> Path:
    with ResultWriter(folder) as w:
        w.write(ResultRow(suite="s", case="c", backend="sdpa", status="pass", device="cuda:0", config=CFG, batch=BATCH,
                          check=check(True), host=host(), timing=timing(10.0, 9.0, 11.0, clock_regime="burst")))
    write_header(folder, RunHeader.model_validate({"device": {"type": "cuda", "name": "NVIDIA H200", "capability": "9.0"}}))
    return folder


def test_a_clock_regime_that_is_not_one_is_refused_with_file_row_field(tmp_path, capsys):
    run = _timed_run(tmp_path / "run")
    f = run / "results.jsonl"
    f.write_text(f.read_text().replace('"clock_regime": "burst"', '"clock_regime": "warm"'))
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(f) in err and "line 1" in err and "timing.clock_regime" in err and "'burst' or 'sustained'" in err
    assert not (tmp_path / "r.html").exists()


def test_ctrl_c_before_the_arguments_are_read_still_points_at_the_resumed_rows(tmp_path, capsys, monkeypatch):
    run = tmp_path / "r"
    shutil.copytree(BASELINE, run)

    def ctrl_c():  # the user's Ctrl-C lands while the parser modules are still importing
        raise KeyboardInterrupt

    monkeypatch.setattr(entry, "build_parser", ctrl_c)
    assert main(["run", str(SMOKE), "--resume", str(run)]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert "nothing to resume" not in err and "24 finished row(s) are saved in" in err and "--resume" in err


MODEL_SUITE = "suite: m\ncases:\n  - model: {repo}\n    batch: [{{kind: decode, count: 1, context_len: 64}}]\n"


def test_download_allowed_without_huggingface_hub_says_it_is_missing(tmp_path):
    suite = tmp_path / "m.yaml"
    suite.write_text(MODEL_SUITE.format(repo="meta-llama/Llama-3.1-8B-Instruct"))
    code = ("import sys; sys.modules['huggingface_hub'] = None  # this interpreter has no huggingface_hub\n"
            "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {**ENV, "HARNESS_ALLOW_DOWNLOAD": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    p = subprocess.run([sys.executable, "-c", code, "validate", str(suite)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "huggingface_hub is not installed" in err and "llama-3.1-8b" in err
    assert "allow a download with" not in err


def test_a_repo_id_taken_from_the_built_ins_says_which(tmp_path):
    suite = tmp_path / "m.yaml"
    suite.write_text(MODEL_SUITE.format(repo="google/gemma-2-9b-it"))
    env = {k: v for k, v in ENV.items() if k != "HARNESS_ALLOW_DOWNLOAD"}
    p = _harness("validate", str(suite), env={**env, "HF_HUB_CACHE": str(tmp_path / "hub")})
    err = " ".join(p.stderr.split())
    assert p.returncode == 0 and "google/gemma-2-9b-it is not in the local Hugging Face cache" in err
    assert "the built-in gemma-2-9b stands for it" in err and err.count("stands for it") == 1


def test_merge_into_a_file_says_it_is_not_a_folder(tmp_path, capsys):
    target = tmp_path / "afile.txt"
    target.write_text("notes\n")
    assert main(["merge", str(BASELINE), "-o", str(target)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is a file, not a folder" in err and "already holds" not in err and target.read_text() == "notes\n"


def test_a_closed_stdout_is_not_a_failure(tmp_path):
    for cmd in (f"{sys.executable} -m harness report {BASELINE} -o {tmp_path / 'r.html'} | head -c 0",
                f"{sys.executable} -m harness schema row | head -1"):
        p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=ROOT, env=ENV, capture_output=True,
                           text=True, timeout=180)
        assert p.returncode == 0 and "Error" not in p.stderr and "Traceback" not in p.stderr, (cmd, p.stderr)


@pytest.mark.slow
def test_a_run_piped_into_head_exits_0(tmp_path):
    cmd = (f"{sys.executable} -m harness run {SMOKE} --device cpu --no-time {' '.join(repr(a) for a in ONE)} "
           f"--out {tmp_path / 'r'} | head -1")
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr and "Error" not in p.stderr, p.stderr


def test_clock_regime_notes():
    from harness.cli.commands.run import clock_regime_notes

    assert clock_regime_notes(["run", "s.yaml"], None, "cpu") == []
    assert clock_regime_notes(["run", "s.yaml", "--clock-regime", "burst"], "burst", "cuda") == []
    (cpu,) = clock_regime_notes(["run", "s.yaml", "--clock-regime", "sustained"], "sustained", "cpu")
    assert "cpu run has no GPU clock" in cpu
    twice = clock_regime_notes(["--clock-regime", "burst", "--clock-regime=sustained"], "sustained", "cuda")
    assert twice == ["--clock-regime given 2 times: the last one, sustained, is used"]


@pytest.mark.slow
def test_clock_regime_on_a_cpu_run_gets_a_note(tmp_path):
    p = _harness("run", str(SMOKE), "--device", "cpu", "--no-time", *ONE, "--clock-regime", "burst",
                 "--clock-regime", "sustained", "--out", str(tmp_path / "r"))
    err = " ".join(p.stderr.split())
    assert p.returncode == 0 and "given 2 times" in err and "has no GPU clock" in err


def test_crosscheck_on_cpu_calls_a_wall_clock_ratio_noise():
    from harness.crosscheck.explain import NA_CPU, explain

    cpu = {"median_us": 100.0, "sm_clock_mhz": NA_CPU}
    for adapter_us in (83.0, 122.0):
        out = explain(100.0, 100.0, cpu, NA_CPU, 0.05, adapter={"median_us": adapter_us, "sm_clock_mhz": NA_CPU})
        text = " ".join(out["because"])
        assert "the standalone source is not the adapter's call" not in text and "CPU wall-clock noise" in text
    gpu = explain(100.0, 100.0, {"median_us": 100.0, "sm_clock_mhz": {"before": 1980}}, {"per_call_us": 100.0}, 0.05,
                  adapter={"median_us": 83.0, "sm_clock_mhz": {"before": 1980}})
    assert any("the standalone source is not the adapter's call" in b for b in gpu["because"])


def test_a_no_time_run_ends_with_one_verdict_line():
    from harness.records.results import read_rows
    from harness.report.terminal.tables import print_verdict

    rows = [r.model_copy(update={"timing": None}) for r in read_rows(BASELINE)]  # what a --no-time run writes
    buf = io.StringIO()
    print_verdict(rows, {}, Console(file=buf, width=200))
    text = buf.getvalue()
    assert "no backend passed the check with a timing" not in text
    assert text.count("\n") == 1 and "no row was timed" in text


def test_recorded_regimes_still_load(tmp_path):
    from harness.records.results import read_rows

    (row,) = read_rows(_timed_run(tmp_path / "ok"))
    assert row.timing is not None and row.timing.clock_regime == "burst"
    assert json.loads((tmp_path / "ok" / "results.jsonl").read_text())["timing"]["clock_regime"] == "burst"
