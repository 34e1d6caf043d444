"""Resource errors are not correctness regressions: a cell that runs out of memory is recorded
as such (attn_contract.status.resource_kind), retried once (harness/execute/retry.py), and
compare/gate list it apart instead of failing ``pass -> error``; a real error still fails.

Real runs of one tiny CPU cell through test backends (tests/plugins/oom.py) that raise a real
``torch.OutOfMemoryError`` (or a plain RuntimeError) from their forward."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_contract.status import resource_kind
from harness.analysis.compare import compare_paths
from harness.cli import main
from harness.records.results import read_rows

SUITE = """
suite: resource
backends: [torch-math]
defaults: {dtype: bfloat16, kv_layout: NHD, causal: true, seed: 0}
cases:
  - name: tiny
    num_heads: 4
    num_kv_heads: 2
    head_size: 64
    block_size: 16
    batch:
      - kind: decode
        count: 2
        context_len: 64
"""
OOM, BROKEN = "plugins.oom:OomTorchMath", "plugins.oom:BrokenTorchMath"
FAST = ["--device", "cpu", "--quiet", "--no-time"]


def _run(tmp: Path, name: str, backend: str, monkeypatch, how: str | None, isolated: bool = False) -> Path:
    suite = tmp / "resource.yaml"
    suite.write_text(SUITE)
    if how is None:
        monkeypatch.delenv("ATTN_HARNESS_OOM", raising=False)
    else:
        monkeypatch.setenv("ATTN_HARNESS_OOM", how)
    out = tmp / name
    flags = FAST if isolated else [*FAST, "--no-isolation"]
    main(["run", str(suite), "--backends", backend, "--out", str(out), *flags])
    return out


def test_resource_kind_reads_status_and_reason():
    assert resource_kind("error", "forward: OutOfMemoryError: CUDA out of memory. Tried to allocate 3.95 GiB") == "memory"
    assert resource_kind("error", "first_call: MemoryError: ") == "memory"
    assert resource_kind("timeout", "cell exceeded --cell-timeout 600 s; worker killed") == "time"
    assert resource_kind("error", "forward: RuntimeError: index out of range") == ""
    assert resource_kind("mismatch", "out of memory") == ""  # wrong numbers are wrong numbers


def test_an_out_of_memory_row_is_not_a_correctness_regression(tmp_path, monkeypatch, capsys):
    base = _run(tmp_path, "base", OOM, monkeypatch, None)
    new = _run(tmp_path, "new", OOM, monkeypatch, "always")
    (row,) = read_rows(new)
    assert row.status == "error" and "OutOfMemoryError" in row.reason
    assert "retried once after freeing the case's memory; first attempt:" in row.reason
    comp = compare_paths(base, new)
    assert not comp.regressed
    (d,) = comp.diffs
    assert d.resource.startswith("resource (out of memory): not comparable; pass -> error")
    from harness.analysis.ci_output import junit_xml

    assert '<skipped message="resource (out of memory)' in junit_xml(comp)  # CI: skipped, not failed
    capsys.readouterr()
    assert main(["compare", str(base), str(new)]) == 0
    out = capsys.readouterr().out
    assert "Resource errors: not comparable" in out and "**OK**" in out


def test_a_real_error_still_fails(tmp_path, monkeypatch, capsys):
    base = _run(tmp_path, "base", BROKEN, monkeypatch, None)
    new = _run(tmp_path, "new", BROKEN, monkeypatch, "always")
    (row,) = read_rows(new)
    assert row.status == "error" and "RuntimeError" in row.reason and "retried" not in row.reason
    comp = compare_paths(base, new)
    assert [d.problem.split(" (")[0] for d in comp.regressions] == ["correctness: pass -> error"]
    assert main(["compare", str(base), str(new)]) == 1


def test_an_out_of_memory_cell_that_fits_on_retry_passes(tmp_path, monkeypatch):
    new = _run(tmp_path, "new", OOM, monkeypatch, str(tmp_path / "oom-once"))
    (row,) = read_rows(new)
    assert row.status == "pass" and (tmp_path / "oom-once").exists()  # the first forward did raise


@pytest.mark.slow  # worker processes (~10 s on the 2-core box)
def test_isolated_runs_retry_in_a_fresh_worker(tmp_path, monkeypatch):
    once = _run(tmp_path, "once", OOM, monkeypatch, str(tmp_path / "oom-once"), isolated=True)
    (row,) = read_rows(once)
    assert row.status == "pass" and (tmp_path / "oom-once").exists()
    always = _run(tmp_path, "always", OOM, monkeypatch, "always", isolated=True)
    (row,) = read_rows(always)
    assert row.status == "error" and "retried once in a fresh worker; first attempt:" in row.reason
    first_pid = row.worker.pid if row.worker else None
    assert first_pid is not None
