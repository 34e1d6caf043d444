"""`harness repro`: a result row -> a standalone script (torch + the library only) that exits 1
when the backend's call mismatches an inline fp64 reference and 0 when it passes; --shrink
makes a failing case smaller while it still fails."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attn_contract import AttentionConfig
from harness.cli import main
from harness.registry import resolve

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "suites" / "conformance-cpu.yaml"
MUTANT = "mutants.cpu:SwappedRequests"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The 6-request mixed case on the real CPU backends and one broken one (rows 0, 1, 2)."""
    out = tmp_path_factory.mktemp("repro") / "run"
    cwd = os.getcwd()
    os.chdir(ROOT)  # the rows' reproducers name the suite relative to the repository root
    try:
        main(["run", str(SUITE.relative_to(ROOT)), "--case", "mixed", "--backends", f"torch-math,sdpa,{MUTANT}",
              "--device", "cpu", "--no-time", "--no-isolation", "--out", str(out), "--quiet"])
    finally:
        os.chdir(cwd)
    return out


def repro(*args: str) -> int:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return main(["repro", *args])
    finally:
        os.chdir(cwd)


def run_script(path: Path) -> subprocess.CompletedProcess:
    # A bare environment path: the script must not need the repository on sys.path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=path.parent, env=env,
                          timeout=120)


def imported_modules(source: str) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mods.add((node.module or "").split(".")[0])
    return mods


@pytest.mark.parametrize("backend", ["torch-math", "sdpa"])
def test_script_of_a_passing_row_exits_0(results, tmp_path, backend):
    script = tmp_path / "r.py"
    assert repro(str(results), "mixed", "--backend", backend, "-o", str(script)) == 0
    done = run_script(script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 6 requests pass" in done.stdout
    assert imported_modules(script.read_text()) <= {"math", "sys", "torch"}


def test_script_of_a_mutant_reproduces_its_bug(results, tmp_path):
    script = tmp_path / "m.py"
    assert repro(str(results), "2", "-o", str(script)) == 0  # row 2: the mutant, selected by index
    text = script.read_text()
    assert not imported_modules(text) & {"harness", "attn_contract", "backends", "mutants"}
    done = run_script(script)
    assert done.returncode == 1, done.stdout + done.stderr
    # The swapped requests (0 and 1) fail, the others pass, against the harness's own limit.
    lines = [l for l in done.stdout.splitlines() if l.startswith("request ")]
    assert [("MISMATCH" in l) for l in lines] == [True, True, False, False, False, False]
    assert "limit 0.00147" in lines[0]  # 3 * 2^-11 + 2^-20 * sqrt(96), fp16


def test_row_selected_by_its_reproducer_string(results, tmp_path):
    from harness.records.results import read_rows

    row = read_rows(results)[1]
    script = tmp_path / "s.py"
    assert repro(str(results), row.reproducer, "-o", str(script)) == 0
    assert "SDPA" in script.read_text() or "scaled_dot_product_attention" in script.read_text()


def test_shrink_reduces_a_failing_case_and_it_still_fails(results, tmp_path, capsys):
    script = tmp_path / "small.py"
    assert repro(str(results), "2", "--shrink", "--max-attempts", "12", "-o", str(script)) == 0
    log = capsys.readouterr().out
    assert "still fails, keep" in log and "smallest failing" in log
    ns: dict = {}
    for line in script.read_text().splitlines():
        if line.startswith(("QUERY_LENS =", "SEQ_LENS =")):
            exec(line.split("#")[0], ns)
    assert len(ns["QUERY_LENS"]) < 6 or sum(ns["SEQ_LENS"]) < 829  # the row: 6 requests, 829 KV tokens
    done = run_script(script)
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.mark.parametrize("args, needle", [
    (["/nonexistent/results", "0"], "no such results folder"),
    (["RESULTS", "99"], "out of range"),
    (["RESULTS", "no-such-case"], "no row matches"),
    (["RESULTS", "mixed"], "matches 3 rows"),
    (["RESULTS", "0", "--shrink"], "not a mismatch"),
    (["RESULTS", "mixed", "--backend", "sdpa", "--suite", "/nonexistent.yaml"], "not found"),
])
def test_bad_input_is_one_line_and_exit_2(results, tmp_path, capfd, args, needle):
    args = [str(results) if a == "RESULTS" else a for a in args]
    out = tmp_path / "never.py"
    assert repro(*args, "-o", str(out)) == 2
    err = capfd.readouterr().err.strip()
    assert needle in err and "Traceback" not in err
    assert not out.exists()


def test_backend_without_standalone_call_is_refused(tmp_path, capfd):
    """A mutant other than SwappedRequests offers no standalone call: exit 2, one line."""
    out = tmp_path / "run"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        main(["run", str(SUITE.relative_to(ROOT)), "--case", "mixed", "--backends", "mutants.cpu:DropLastContext",
              "--device", "cpu", "--no-time", "--no-isolation", "--out", str(out), "--quiet"])
    finally:
        os.chdir(cwd)
    capfd.readouterr()
    assert repro(str(out), "0", "-o", str(tmp_path / "x.py")) == 2
    assert "repro not supported for backend mutant-DropLastContext" in capfd.readouterr().err


@pytest.mark.parametrize("backend, variant", [
    ("flash-attn", {"fa_version": 2}), ("flash-attn", {"fa_version": 3}), ("flash-attn", {"fa_version": 4}),
    ("flashinfer", {"decode_tensor_cores": True, "prefill_backend": "fa2"}),
    ("flashinfer", {"decode_tensor_cores": False, "prefill_backend": "auto"}),
])
def test_gpu_library_calls_are_valid_python_without_harness_imports(backend, variant):
    """The GPU snippets cannot run here; they must parse and import only torch and the library."""
    b = resolve(backend)
    for cfg in (AttentionConfig(8, 2, 128), AttentionConfig(32, 4, 128, kv_cache_dtype="fp8_e5m2", block_size=256),
                AttentionConfig(8, 2, 64, sliding_window=40, softcap=4.0, kv_layout="HND")):
        src = b.standalone_call(cfg, variant)
        assert src and "out" in src
        mods = imported_modules(src)
        assert mods and mods <= {"torch", "flash_attn", "flash_attn_interface", "flashinfer"}, mods
    # fa_version auto takes the version the row recorded.
    if backend == "flash-attn":
        assert "flash_attn_interface" in b.standalone_call(AttentionConfig(8, 2, 128), {"fa_version": "auto"},
                                                           {"fa_version": 3})


def test_flashinfer_e5m2_mismatch_rows_get_the_known_bug_diagnosis():
    """The H200 rows of the FlashInfer e5m2 mask-fill bug (kv_scale auto) match the diagnosis;
    rows with the same configuration but a larger scale (fill far below) do not."""
    from backends.flashinfer import FlashInferBackend
    from harness.records.results import read_rows
    from harness.spec import load_suite
    from harness.case.workload import kv_scales
    from attn_contract import LayerParams

    cases = {c.name: c for c in load_suite(ROOT / "suites" / "conformance.yaml").cases}
    rows = [r for r in read_rows(ROOT / "tests" / "data" / "h200" / "session-b" / "conf-fi")
            if r.status == "mismatch" and r.case in cases]
    assert rows
    for r in rows:
        case = cases[r.case]
        layer = LayerParams(*kv_scales(case))
        diag = FlashInferBackend.diagnose_mismatch(case.attention_config(), r.variant, layer, r.check.model_dump())
        assert diag and "known FlashInfer bug" in diag and "-0.424 after scaling" in diag, (r.case, diag)
        assert FlashInferBackend.diagnose_mismatch(case.attention_config(), r.variant, LayerParams(0.01, 0.01),
                                                   r.check.model_dump()) is None


def test_runner_appends_a_backends_diagnosis_to_the_mismatch_reason():
    import torch

    from harness.plan.cells import RunOptions, group_by_case, plan_cells
    from harness.cell.case import iterate_case
    from harness.spec import load_suite
    from mutants.cpu import SwappedRequests

    Diagnosed = type("Diagnosed", (SwappedRequests,), {
        "name": "mutant-Diagnosed", "__module__": __name__,
        "diagnose_mismatch": classmethod(lambda cls, config, variant, layer, check:
                                         f"known bug: rows swapped ({check['num_failed_requests']} requests)")})
    suite = load_suite(SUITE)
    opts = RunOptions(device=torch.device("cpu"), time=False, case_patterns=["mixed"], suite_path=str(SUITE))
    rows = [r for g in group_by_case(plan_cells(suite, [Diagnosed, resolve("torch-math")], opts))
            for r in iterate_case(g, suite, opts)]
    bad = next(r for r in rows if r.backend == "mutant-Diagnosed")
    assert bad.status == "mismatch" and bad.reason.endswith("; known bug: rows swapped (2 requests)")
    assert bad.check.diagnosis == "known bug: rows swapped (2 requests)"
    good = next(r for r in rows if r.backend == "torch-math")
    assert good.status == "pass" and good.check.diagnosis is None
