"""prepare_cell: the one place a generated batch becomes a callable cell (runner, harness diag fidelity
and anything else that times a backend use it, so none of them mirrors the runner)."""

import pytest
import torch

from backends.cascade.torch_cascade import TorchCascadeBackend
from backends.torch_math import TorchMathBackend
from harness.case.reference import reference_attention
from harness.cell.prepare import CellStage, CellTrace, CellUnsupported, PreparedCell, prepare_cell
from harness.cell.accounting import Stopwatch
from harness.spec import CaseSpec
from harness.case.workload import generate

CPU = torch.device("cpu")


def _case(**kw):
    base = dict(name="p", num_heads=8, num_kv_heads=2, head_size=32, block_size=16, seed=1,
                batch=[{"kind": "decode", "count": 3, "context_len": 40},
                       {"kind": "extend", "count": 2, "query_len": 5, "context_len": 20}])
    base.update(kw)
    return CaseSpec.model_validate(base)


def test_a_prepared_cell_computes_the_reference():
    batch = generate(_case(), CPU)
    trace = CellTrace(Stopwatch(CPU))
    cell = prepare_cell(TorchMathBackend, {}, batch, CPU, trace)
    assert isinstance(cell, PreparedCell) and cell.token_index is None and cell.view.query_lens == batch.query_lens
    # The cell owns its inputs: a backend writing into them must not corrupt the case.
    assert torch.equal(cell.view.query, batch.query) and cell.view.query.data_ptr() != batch.query.data_ptr()
    assert cell.kv_cache.data_ptr() != batch.kv_cache.data_ptr()
    assert trace.stage == CellStage.BUILD and "build_ms" in trace.host
    assert torch.isnan(cell.out).all()  # nothing ran yet: every element still unwritten
    cell.forward(lse=cell.lse)
    ref_out, _ = reference_attention(batch)
    torch.testing.assert_close(cell.out.float(), ref_out.float(), atol=2e-2, rtol=2e-2)
    g = cell.graph_decision(enabled=True)
    assert not g.use and g.reason == "n/a on cpu"


def test_a_batch_the_backend_declines_is_unsupported_not_an_error():
    batch = generate(_case(), CPU)  # no shared prefix: nothing for a cascade to share
    with pytest.raises(CellUnsupported):
        prepare_cell(TorchCascadeBackend, {}, batch, CPU)
    shared = generate(_case(shared_prefix={"length": 32, "groups": 1}), CPU)
    cell = prepare_cell(TorchCascadeBackend, {}, shared, CPU)
    assert cell.cascade_rule is not None  # the vLLM rule's verdict, recorded in the row's call
    cell.timed_call()
    assert not torch.isnan(cell.out).any()
