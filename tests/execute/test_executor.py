"""Crash isolation, timeouts, several workers and memory planning, with backends that really
fail (tests/plugins/crashy.py) run next to the real CPU backends."""

import contextlib
import json
import math

import pytest
import torch
import yaml

from backends.torch_math import TorchMathBackend
from harness.plan import memory
from harness.cli import main
from harness.execute.devices import parse_devices
from harness.records.results import read_rows
from harness.plan.cells import Cell
from harness.spec import parse_suite
from harness.case.workload import generate

ONE_CASE = """
suite: crashy
cases:
  - name: gqa
    num_heads: 4
    num_kv_heads: 2
    head_size: 32
    batch:
      - kind: decode
        count: 3
        context_len: {dist: uniform, low: 10, high: 60}
      - kind: extend
        count: 1
        query_len: 5
        context_len: 17
"""

CRASHY = ["plugins.crashy:SegfaultBackend", "plugins.crashy:RaisingBackend", "plugins.crashy:HangingBackend",
          "plugins.crashy:NaNBackend", "plugins.crashy:StickyCudaErrorBackend"]


def _rows(out):
    return {r.backend: r for r in read_rows(out)}


@pytest.mark.slow
def test_crashes_cost_only_their_own_cell(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE)
    out = tmp_path / "res"
    # Good backends before and after the bad ones: each failure must leave the rest running.
    backends = ["torch-math", *CRASHY, "sdpa"]
    rc = main(["run", str(suite), "--device", "cpu", "--backends", ",".join(backends), "--out", str(out),
               "--no-time", "--quiet", "--cell-timeout", "2"])
    assert rc == 0
    rows = _rows(out)
    assert len(rows) == 7 and len(read_rows(out)) == 7
    for good in ("torch-math", "sdpa"):
        assert rows[good].status == "pass", rows[good].reason
        assert rows[good].check.max_abs_err < 2e-2
    assert rows["crash-segv"].status == "error" and rows["crash-segv"].reason == "worker died: SIGSEGV"
    assert rows["crash-raise"].status == "error"
    assert "RuntimeError: deliberate failure in forward" in rows["crash-raise"].reason
    assert rows["crash-hang"].status == "timeout" and "--cell-timeout 2 s" in rows["crash-hang"].reason
    # A timeout is a resource error: retried once, after the case, in a fresh worker (it hung again).
    assert "retried once in a fresh worker; first attempt:" in rows["crash-hang"].reason
    assert rows["crash-nan"].status == "mismatch" and "NaN outputs" in rows["crash-nan"].reason
    assert rows["crash-nan"].check.num_nan > 0
    assert rows["crash-sticky"].status == "error" and "illegal memory access" in rows["crash-sticky"].reason
    # Workers were replaced after the segfault, the hang and the sticky CUDA error (a poisoned
    # context must not run the next cell), not after a plain exception or a mismatch.
    pid = {b: r.model_dump()["worker"]["pid"] for b, r in rows.items()}
    assert pid["torch-math"] == pid["crash-segv"]
    assert pid["crash-raise"] != pid["crash-segv"]
    assert pid["crash-nan"] != pid["crash-raise"] and pid["crash-nan"] == pid["crash-sticky"]
    assert pid["sdpa"] != pid["crash-sticky"] and pid["crash-hang"] not in (pid["crash-raise"], pid["crash-nan"])
    order = [r.backend for r in read_rows(out)]
    assert order == ["torch-math", "crash-segv", "crash-raise", "crash-nan", "crash-sticky", "sdpa", "crash-hang"]
    # Every line is strict JSON (no NaN literals), even for the NaN backend.
    for line in (out / "results.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_no_isolation_runs_in_process_with_same_results(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,sdpa", "--out", str(out),
                 "--no-time", "--quiet", "--no-isolation"]) == 0
    rows = read_rows(out)
    assert [r.status for r in rows] == ["pass", "pass"] and "worker" not in rows[0].model_dump()


@pytest.mark.parametrize("spec, expected", [("0", None), ("cpu,cpu", ["cpu", "cpu"]), (" cpu ", ["cpu"])])
def test_parse_devices(spec, expected):
    if expected is None and not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            parse_devices(spec)
    elif expected is not None:
        assert parse_devices(spec) == expected


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", ",", "cpu,tpu"])
def test_parse_devices_rejects(bad):
    with pytest.raises(ValueError):
        parse_devices(bad)


def test_bad_robustness_flags_are_usage_errors(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE)
    for args in (["--devices", "tpu"], ["--devices", "cpu,cpu", "--no-isolation"], ["--cell-timeout", "-1"],
                 ["--device", "cpu", "--devices", "cpu"], ["--resume", str(tmp_path / "nothing-here")]):
        rc = main(["run", str(suite), "--backends", "torch-math", "--out", str(tmp_path / "o"), "--quiet", *args])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)


# ---------------------------------------------------------------- memory planning
def _case(text: str, index: int = 0):
    return parse_suite(yaml.safe_load(text)).cases[index]


PREFIX_CASE = """
suite: m
cases:
  - name: m
    num_heads: 8
    num_kv_heads: 2
    head_size: 64
    kv_cache_dtype: [auto, fp8_e4m3]
    block_size: 16
    shared_prefix: {length: 32, groups: 2}
    batch:
      - kind: decode
        count: 5
        context_len: {dist: uniform, low: 1, high: 90}
      - kind: extend
        count: 2
        query_len: 9
        context_len: 40
"""


@pytest.mark.parametrize("index", [0, 1])
def test_memory_terms_match_the_generated_batch(index):
    """The formula's persistent terms are exact for what generate() allocates (CPU, fp64 ref)."""
    from harness.case.reference import reference_attention

    case = _case(PREFIX_CASE, index)
    est = memory.estimate(case, TorchMathBackend, {}, device_type="cpu")
    b = generate(case, "cpu")
    def nbytes(t):
        return t.numel() * t.element_size()

    assert est.kv_cache == nbytes(b.kv_cache)
    assert est.logical == sum(nbytes(k) + nbytes(v) for k, v in zip(b.k_logical, b.v_logical))
    assert est.qkv == nbytes(b.query) + nbytes(b.key) + nbytes(b.value)
    out, lse = reference_attention(b)
    assert est.ref == nbytes(out) + nbytes(lse)
    assert est.peak > est.persistent > 0


def test_memory_estimate_grows_with_the_case():
    small = _case(PREFIX_CASE)
    big = small.model_copy(update={"num_heads": 16})
    assert memory.estimate(big, TorchMathBackend).peak > memory.estimate(small, TorchMathBackend).peak
    # An fp8 cache halves the KV terms.
    fp8 = _case(PREFIX_CASE, 1)
    assert memory.estimate(fp8).kv_cache * 2 == memory.estimate(small).kv_cache


@pytest.mark.gpu  # the CUDA allocator measures the true peak
@pytest.mark.parametrize("backend_name", ["torch-math", "sdpa", "flash-attn", "flashinfer"])
def test_memory_estimate_bounds_the_measured_gpu_peak(backend_name):
    """The estimate must be an upper bound of what a cell really allocates (check included)."""
    from harness import registry
    from harness.plan.cells import RunOptions
    from harness.cell.case import iterate_case

    backend = registry.resolve(backend_name)
    if not backend.availability().available:
        pytest.skip(f"{backend_name} unavailable")
    suite = parse_suite(yaml.safe_load(PREFIX_CASE.replace("count: 5", "count: 64").replace("high: 90", "high: 4000")
                                      .replace("query_len: 9", "query_len: 900")))
    dev = torch.device("cuda")
    opts = RunOptions(device=dev, time=False)
    for case in suite.cases:
        for variant in backend.default_variants():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            (row,) = list(iterate_case([Cell(case, backend, variant)], suite, opts))
            peak = torch.cuda.max_memory_allocated(dev) - base
            est = memory.estimate(case, backend, variant, "cuda")
            if row.status in ("pass", "mismatch"):
                assert est.peak >= peak, (case.name, variant, est.as_dict(), peak)


def test_fit_check_skips_with_the_numbers(tmp_path):
    case = _case(PREFIX_CASE)
    check = memory.make_fit_check(torch.device("cpu"), check=True, budget_mib=1)
    reason = check(Cell(case, TorchMathBackend, {}))
    assert reason and reason.startswith("does not fit: estimated peak") and "--memory-budget-mib" in reason
    assert memory.make_fit_check(torch.device("cpu"), True, budget_mib=4096)(Cell(case, TorchMathBackend, {})) is None


def test_memory_budget_flag_skips_cells(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE)
    out = tmp_path / "res"
    assert main(["run", str(suite), "--device", "cpu", "--backends", "torch-math", "--out", str(out),
                 "--quiet", "--no-isolation", "--memory-budget-mib", "0.1"]) == 0
    (row,) = read_rows(out)
    assert row.status == "skipped" and "does not fit" in row.reason
    peak_mib = memory.estimate(_case(ONE_CASE), TorchMathBackend, {}, "cpu").peak / 2**20
    assert math.isclose(float(row.reason.split("estimated peak ")[1].split(" MiB")[0].replace(",", "")),
                        peak_mib, abs_tol=1)


@contextlib.contextmanager
def _spawned_worker(suite, warm: tuple = ()):
    """A real worker process (spawn, as LocalExecutor starts it) on the CPU, driven by hand
    through its pipe; killed at the end if it is still alive."""
    import multiprocessing as mp

    from harness.plan.cells import RunOptions
    from harness.execute.worker.process import worker_main

    opts = RunOptions(device=torch.device("cpu"), time=False)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=worker_main, args=(child, "cpu", suite, opts, None, 1, None, warm), daemon=True)
    proc.start()
    child.close()
    try:
        yield proc, parent
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
        parent.close()


def _until(parent, kind):
    """The worker's messages up to and including the first of type ``kind``."""
    msgs = []
    while not msgs or not isinstance(msgs[-1], kind):
        assert parent.poll(120), f"no {kind.__name__} from the worker; got {msgs}"
        msgs.append(parent.recv())
    return msgs


@pytest.mark.slow
def test_worker_protocol_is_typed_messages_in_phase_order():
    """A real spawned worker, driven by hand: the messages it sends for one case, in order."""
    from harness.plan.resume import cell_key
    from harness.execute.worker.messages import CaseDone, CellStarted, PreparingCase, RowDone, RunCase, Shutdown, WorkerReady

    suite = parse_suite(yaml.safe_load(ONE_CASE))
    with _spawned_worker(suite) as (proc, parent):
        ready = _until(parent, WorkerReady)
        assert len(ready) == 1 and ready[0].pid == proc.pid
        cell = Cell(suite.cases[0], TorchMathBackend, {})
        parent.send(RunCase([cell]))
        msgs = _until(parent, CaseDone)
        assert [type(m) for m in msgs] == [PreparingCase, CellStarted, RowDone, CaseDone]
        assert msgs[1].key == cell_key(suite, cell)
        assert msgs[2].row.status == "pass" and msgs[2].row.worker.pid == proc.pid
        parent.send(Shutdown())
        proc.join(timeout=30)
        assert proc.exitcode == 0


@pytest.mark.slow
def test_worker_runs_cells_while_a_library_imports_and_gives_the_rest_back(tmp_path, monkeypatch):
    """A spawned worker whose second backend's import is held by a gate: ready at once, runs the
    torch-only cell, gives the gated cell back; a case of gated cells alone waits for the
    import, then runs; LibrariesReady carries the import time and versions."""
    from harness.execute.worker.messages import (CaseDone, CasePartDeferred, CellStarted, LibrariesReady, PreparingCase,
                                         RowDone, RunCase, Shutdown, WorkerReady)
    from plugins.slow_import import GATE_ENV, GatedImportBackend

    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_ENV, str(gate))  # the spawned worker inherits it
    suite = parse_suite(yaml.safe_load(ONE_CASE))
    with _spawned_worker(suite, (GatedImportBackend, TorchMathBackend)) as (proc, parent):
        assert isinstance(_until(parent, WorkerReady)[-1], WorkerReady)  # before the gated import ends
        fast, gated = Cell(suite.cases[0], TorchMathBackend, {}), Cell(suite.cases[0], GatedImportBackend, {})
        parent.send(RunCase([gated, fast]))
        msgs = _until(parent, CaseDone)
        assert [type(m) for m in msgs] == [PreparingCase, CellStarted, RowDone, CasePartDeferred, CaseDone]
        assert msgs[2].row.backend == "torch-math" and msgs[2].row.status == "pass"
        assert [c.backend for c in msgs[3].cells] == [GatedImportBackend]
        parent.send(RunCase(msgs[3].cells))  # nothing of it can run yet: the worker waits
        gate.touch()
        msgs = _until(parent, CaseDone)
        # The worker sends LibrariesReady at its first loop turn after the import ends: before the
        # case's messages when that turn comes before it reads the RunCase (a loaded box), after
        # CaseDone otherwise (worker/process.py). The case's own messages keep their order.
        early = [m for m in msgs if isinstance(m, LibrariesReady)]
        msgs = [m for m in msgs if not isinstance(m, LibrariesReady)]
        assert [type(m) for m in msgs] == [PreparingCase, CellStarted, RowDone, CaseDone]
        assert msgs[2].row.backend == "gated-import" and msgs[2].row.status == "pass"
        libs = early[-1] if early else _until(parent, LibrariesReady)[-1]
        assert set(libs.import_s) == {"gated-import", "torch-math"} and libs.versions["gated-import"]["available"] is True
        parent.send(Shutdown())
        proc.join(timeout=30)
        assert proc.exitcode == 0


@pytest.mark.slow
def test_a_run_goes_on_while_a_library_imports(tmp_path, monkeypatch):
    """harness run with a backend whose import ends only once three rows are written: the
    torch-math cells of all three cases run first, the gated cells after, every cell once, and
    run.json holds the gated backend's version and import time."""
    suite = tmp_path / "s.yaml"
    suite.write_text(ONE_CASE.replace("count: 3", "count: [1, 2, 3]"))
    out = tmp_path / "res"
    from plugins.slow_import import GATE_ENV, LINES_ENV

    monkeypatch.setenv(GATE_ENV, str(out / "results.jsonl"))
    monkeypatch.setenv(LINES_ENV, "3")
    rc = main(["run", str(suite), "--device", "cpu", "--backends", "torch-math,plugins.slow_import:GatedImportBackend",
               "--out", str(out), "--no-time", "--quiet"])
    assert rc == 0
    rows = read_rows(out)
    assert [r.backend for r in rows[:3]] == ["torch-math"] * 3
    assert sorted((r.case, r.backend) for r in rows) == sorted(
        (c, b) for c in {r.case for r in rows} for b in ("torch-math", "gated-import")) and len(rows) == 6
    assert all(r.status == "pass" for r in rows)
    run = json.loads((out / "run.json").read_text())
    assert run["backends"]["gated-import"]["available"] is True
    assert set(run["workers"][0]["import_by_backend_s"]) == {"torch-math", "gated-import"}


def test_worker_whose_parent_is_gone_exits_quietly(capfd):
    """An interrupted run closes its end of the pipe while a worker is still starting: the
    worker's first message finds no reader, and it must end without a traceback on the
    terminal it shares with the run (seen as a flaky Ctrl-C test before the fix)."""
    with _spawned_worker(parse_suite(yaml.safe_load(ONE_CASE))) as (proc, parent):
        parent.close()  # gone before the worker says it is ready
        proc.join(timeout=120)
        assert proc.exitcode == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
