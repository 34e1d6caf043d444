"""The batched sdpa forward reads nothing from the device on the host, so its launches can be
hidden and the call graph-captured (docs/measurement.md, "The host-bound baseline"). On the
CPU the ops themselves are recorded (a TorchDispatchMode over the real forward): an op whose
output size or value the host must read from the device (nonzero, item, boolean indexing,
masked_select) would be a sync on a GPU."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attn_contract import CudaGraphSupport
from backends._paged import scatter_rows
from backends.sdpa import SDPABackend
from harness.case.reference import reference_attention
from harness.cell.prepare import prepare_cell
from harness.spec import CaseSpec
from harness.case.workload import generate

CPU = torch.device("cpu")
SYNCING = {"nonzero", "_local_scalar_dense", "masked_select", "unique", "_unique2", "item"}


class HostReads(TorchDispatchMode):
    """Records every op that needs device data on the host: by name, or indexing by a bool mask."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        name = func._schema.name.split("::")[-1]
        if name in SYNCING:
            self.found.append(name)
        if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
            idx = args[1] if len(args) > 1 else kwargs.get("indices", [])
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in idx or []):
                self.found.append(f"{name} by a bool mask")
        return func(*args, **(kwargs or {}))


def _case(**kw):
    base = dict(name="g", num_heads=8, num_kv_heads=2, head_size=32, block_size=16, seed=3,
                batch=[{"kind": "decode", "count": 5, "context_len": {"dist": "uniform", "low": 20, "high": 90}},
                       {"kind": "extend", "count": 2, "query_len": 7, "context_len": 33}])
    base.update(kw)
    return CaseSpec.model_validate(base)


@pytest.mark.parametrize("extra", [{}, {"sliding_window": 24}, {"alibi": True}])
def test_sdpa_forward_reads_no_device_data_on_the_host(extra):
    batch = generate(_case(**extra), CPU)
    cell = prepare_cell(SDPABackend, {}, batch, CPU)
    cell.forward()  # first call (ALiBi writes its mask here, before any capture)
    first = cell.out.clone()
    with HostReads() as rec:
        cell.timed_call()
    assert rec.found == [], f"host reads in forward: {rec.found}"
    assert rec.ops > 0
    assert torch.equal(cell.out, first)  # same call, same numbers
    ref_out, _ = reference_attention(batch)
    torch.testing.assert_close(cell.out.float(), ref_out.float(), atol=2e-2, rtol=2e-2)


def test_the_recorder_catches_a_boolean_index_scatter():
    """The old scatter (``out[tok[row_valid]] = o[row_valid]``) is what the recorder flags."""
    o, out = torch.randn(2, 3, 4), torch.zeros(6, 4)
    row_valid = torch.tensor([[True, True, False], [True, False, False]])
    tok = torch.tensor([[0, 1, 1], [2, 2, 2]])
    with HostReads() as rec:
        out[tok[row_valid]] = o[row_valid]
    assert rec.found


def test_sdpa_declares_graph_support_for_every_batch():
    assert SDPABackend.capabilities().cudagraph == CudaGraphSupport.ALWAYS
    assert scatter_rows.__doc__ and "precomputed" in scatter_rows.__doc__
