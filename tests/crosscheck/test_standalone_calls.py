"""The standalone call `harness repro` writes and `harness crosscheck` times is the call the row
measured (issue 40, defect 4): for the torch backends, the same torch ops on the same padded
shapes and dtypes as the adapter's timed call, giving the adapter's output. No timing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from harness.cli import main
from harness.records.results import read_rows

SUITE = """
suite: standalone
backends: [torch-math, sdpa]
defaults: {num_heads: 8, num_kv_heads: 2, head_size: 32, block_size: 16, dtype: bfloat16}
cases:
  - name: mixed-window
    sliding_window: 40
    batch:
      - {kind: prefill, count: 1, query_len: 50}
      - {kind: extend, count: 1, query_len: 17, context_len: 61}
      - {kind: decode, count: 3, context_len: {dist: list, values: [90, 5, 33]}}
  - name: alibi-fp8
    alibi: true
    kv_cache_dtype: fp8_e4m3
    k_scale: 0.025
    v_scale: 0.0125
    batch:
      - {kind: decode, count: 2, context_len: {dist: list, values: [70, 20]}}
  - name: non-causal
    causal: false
    batch:
      - {kind: prefill, count: 2, query_len: {dist: list, values: [30, 12]}}
"""
WATCHED = {F.scaled_dot_product_attention: "sdpa", torch.matmul: "matmul"}


class Ops(TorchFunctionMode):
    """Records the attention ops a call makes: which, on what shapes and dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in WATCHED:
            self.seen.append((WATCHED[func], *((tuple(a.shape), a.dtype) for a in args[:3] if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("standalone")
    (d / "s.yaml").write_text(SUITE)
    assert main(["run", str(d / "s.yaml"), "--device", "cpu", "--quiet", "--no-time", "--no-isolation",
                 "--out", str(d / "r")]) == 0
    return read_rows(d / "r")


def test_every_row_ran(rows):
    assert len(rows) == 6 and all(r.status == "pass" for r in rows), [(r.case, r.status, r.reason) for r in rows]


@pytest.mark.parametrize("i", range(6))
def test_the_standalone_call_is_the_adapters(rows, i):
    from harness.crosscheck import repro
    from harness.crosscheck.run import build_call_in
    from harness.crosscheck.inputs import backend_view, bind_from_batch, constants_part
    from harness.registry import resolve
    from harness.cell.prepare import prepare_cell
    from harness.case.workload import generate

    row = rows[i]
    case, spec = repro.case_of_row(row)
    backend, variant = resolve(spec), dict(row.variant)
    batch = generate(case, torch.device("cpu"))
    constants = constants_part(repro.inputs_source(row, repro.script_case(case, backend, variant), backend))
    ns = bind_from_batch(constants, backend_view(batch, backend, variant))
    call = build_call_in(ns, repro.call_source(backend, row, case, variant))
    prepared = prepare_cell(backend, variant, batch, torch.device("cpu"))
    with Ops() as adapter_ops:
        prepared.timed_call()
    with Ops() as standalone_ops:
        call()
    assert adapter_ops.seen and standalone_ops.seen == adapter_ops.seen
    if row.backend == "sdpa":  # one batched call, not one per request
        assert [op[0] for op in adapter_ops.seen] == ["sdpa"]
    torch.testing.assert_close(ns["out"].float(), prepared.out.float(), rtol=1e-2, atol=1e-2)
