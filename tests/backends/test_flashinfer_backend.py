"""FlashInfer adapter, CPU side: decode-first batches, CSR page metadata, capability rules and
support reasons, availability without the library, LSE base conversion. The kernel calls
themselves are checked on the GPU (docs/backends/flashinfer.md lists the commands)."""

import importlib.util
import math

import pytest
import torch

from attn_contract import CudaGraphSupport
from backends.flashinfer import (
    ALIBI_REASON,
    CUDA_CORE_DECODE_GROUPS,
    FlashInferBackend,
    run_into,
    hardware_reason,
    paged_kv_csr,
    segment_csr,
    uses_ragged_path,
)
from harness import registry
from attn_contract import AttentionConfig, decode_first_order, split_decodes_and_prefills
from harness.case.reference import attention_one_request
from harness.spec import CaseSpec, load_suite
from harness.case.workload import generate

LLAMA = dict(num_heads=32, num_kv_heads=8, head_size=128)


def mixed_case(block_size=4, **kw):
    base = dict(
        name="mixed", num_heads=4, num_kv_heads=2, head_size=16, block_size=block_size, seed=11,
        batch=[
            {"kind": "prefill", "count": 2, "query_len": {"dist": "uniform", "low": 2, "high": 9}},
            {"kind": "decode", "count": 3, "context_len": {"dist": "uniform", "low": 1, "high": 20}},
            {"kind": "extend", "count": 2, "query_len": 3, "context_len": 8},
            {"kind": "decode", "count": 2, "context_len": {"dist": "list", "values": [4, 7]}},
        ],
    )
    base.update(kw)
    return CaseSpec.model_validate(base)


def expected_indices(block_table, seq_lens, page):
    out = []
    for row, s in zip(block_table.tolist(), seq_lens.tolist()):
        out += row[: -(-s // page)]
    return out


# ---------------------------------------------------------------- decode-first batches
def test_decode_first_reordering_on_generated_mixed_batch():
    batch = generate(mixed_case())
    caps = FlashInferBackend.capabilities()
    assert caps.reorder_batch_threshold == 1
    order = decode_first_order(batch.query_lens, caps.reorder_batch_threshold)
    assert order == [2, 3, 4, 7, 8, 0, 1, 5, 6]  # stable: decodes in batch order, then the rest
    view, token_index = batch.reordered(order)
    assert view.kinds[:5] == ["decode"] * 5 and "decode" not in view.kinds[5:]
    assert torch.equal(view.query, batch.query[token_index])

    common = view.common_metadata()
    split = split_decodes_and_prefills(common, decode_threshold=caps.reorder_batch_threshold)
    assert (split.num_decodes, split.num_decode_tokens) == (5, 5)
    assert split.num_prefills == 4
    assert split.num_prefill_tokens == sum(batch.query_lens) - 5

    # The two segments' CSR address exactly each request's pages, in the reordered order.
    bs = batch.config.block_size
    csr = paged_kv_csr(common.block_table, common.seq_lens_cpu, bs)
    dec, pre = segment_csr(csr, 0, split.num_decodes), segment_csr(csr, split.num_decodes, common.num_reqs)
    assert dec.kv_lens(bs).tolist() == view.seq_lens[:5]
    assert pre.kv_lens(bs).tolist() == view.seq_lens[5:]
    assert int(pre.indptr[0]) == 0 and int(dec.indptr[0]) == 0
    assert torch.equal(torch.cat([dec.indices, pre.indices]), csr.indices)
    for i in range(common.num_reqs):  # each request's pages hold its logical K
        seg, j = (dec, i) if i < 5 else (pre, i - 5)
        pages = seg.indices[seg.indptr[j] : seg.indptr[j + 1]].long()
        k = view.kv_cache[pages, 0].reshape(-1, *view.kv_cache.shape[3:])[: view.seq_lens[i]]
        assert torch.equal(k, view.k_logical[i])


# ---------------------------------------------------------------- CSR construction
def test_csr_hand_computed_example():
    # page 4; lengths 5 (2 pages, last 1), 8 (exact multiple: last page full), 1, 4 (exact)
    table = torch.tensor([[7, 3, 0], [2, 9, 6], [5, 0, 0], [1, 4, 0]], dtype=torch.int32)
    seq = torch.tensor([5, 8, 1, 4], dtype=torch.int32)
    csr = paged_kv_csr(table, seq, 4)
    assert csr.indptr.tolist() == [0, 2, 4, 5, 6]
    assert csr.indices.tolist() == [7, 3, 2, 9, 5, 1]
    assert csr.last_page_len.tolist() == [1, 4, 1, 4]
    assert all(t.dtype == torch.int32 for t in (csr.indptr, csr.indices, csr.last_page_len))
    assert csr.kv_lens(4).tolist() == [5, 8, 1, 4]
    seg = segment_csr(csr, 1, 3)
    assert seg.indptr.tolist() == [0, 2, 3]
    assert seg.indices.tolist() == [2, 9, 5]
    assert seg.last_page_len.tolist() == [4, 1]


@pytest.mark.parametrize("page", [1, 3, 16, 256])
def test_csr_reconstructs_kv_len_for_random_batches(page):
    g = torch.Generator().manual_seed(page)
    for _ in range(5):
        n = int(torch.randint(1, 40, (1,), generator=g))
        seq = torch.randint(1, 3 * page + 5, (n,), generator=g, dtype=torch.int32)
        seq[0] = page  # always one exact multiple
        cols = int((seq.max() + page - 1) // page) + 1
        table = torch.randperm(n * cols, generator=g).view(n, cols).to(torch.int32)
        csr = paged_kv_csr(table, seq, page)
        assert torch.equal(csr.kv_lens(page), seq)
        assert ((csr.last_page_len >= 1) & (csr.last_page_len <= page)).all()
        assert csr.indices.tolist() == expected_indices(table, seq, page)
        assert int(csr.indptr[-1]) == csr.indices.numel()


def test_csr_rejects_bad_input():
    table = torch.zeros((2, 2), dtype=torch.int32)
    with pytest.raises(ValueError, match="pages but the block table has 2 columns"):
        paged_kv_csr(table, torch.tensor([4, 9], dtype=torch.int32), 4)
    with pytest.raises(ValueError, match="seq_len >= 1"):
        paged_kv_csr(table, torch.tensor([0, 3], dtype=torch.int32), 4)
    with pytest.raises(ValueError, match="page_size"):
        paged_kv_csr(table, torch.tensor([1, 3], dtype=torch.int32), 0)


# ---------------------------------------------------------------- capabilities and support
def test_capabilities_declared():
    caps = FlashInferBackend.capabilities()
    assert caps.returns_lse and caps.reorder_batch_threshold == 1
    assert caps.cudagraph == CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE
    assert caps.kv_layouts == {"NHD", "HND"}
    assert caps.kv_cache_dtypes == {"auto", "fp8_e4m3", "fp8_e5m2", "nvfp4"}
    assert all(caps.block_size_allowed(b) for b in (1, 16, 32, 64, 128, 256, 512, 48))
    assert caps.devices == {"cuda"} and not caps.alibi and not caps.sinks
    # The wrapper families run by default (12: x call_form vllm/fastest); the other kernel
    # families are opt-in (test_flashinfer_families.py).
    assert len(FlashInferBackend.default_variants()) == 12
    # + verify_wrapper=decode, one variant (tensor cores, prefill_backend auto, call_form vllm)
    assert len(FlashInferBackend.variants()) == 2 * 6 * 2 + 3 * 6 + 1
    assert registry.resolve("flashinfer") is FlashInferBackend


def reason(variant=None, device="cuda", **kw):
    return FlashInferBackend.check_support(AttentionConfig(**{**LLAMA, **kw}), variant or {}, device)


def test_supported_configs():
    for kw in ({}, {"kv_layout": "HND", "block_size": 1}, {"kv_cache_dtype": "fp8_e4m3"},
               {"kv_cache_dtype": "fp8_e5m2", "dtype": "float16"}, {"sliding_window": 4096, "softcap": 30.0},
               {"causal": False}, {"head_size": 64}, {"head_size": 256, "block_size": 512}):
        for v in FlashInferBackend.default_variants():
            if v["prefill_backend"] == "fa3" and kw.get("kv_cache_dtype", "auto") != "auto":
                continue
            assert reason(v, **kw) is None, (kw, v)


def test_unsupported_reasons():
    assert reason(alibi=True) == ALIBI_REASON
    assert "sinks" in reason(sinks=True)
    assert "head_size 96" in reason(head_size=96)
    assert "runs on cuda" in reason(device="cpu")
    assert "dtype float32" in reason(dtype="float32")
    assert "fp8 queries" in reason({"prefill_backend": "fa3"}, kv_cache_dtype="fp8_e4m3")
    assert reason({"prefill_backend": "fa2"}, kv_cache_dtype="fp8_e4m3") is None
    assert "left-only" in reason(causal=False, sliding_window=128)
    # The CUDA-core decode kernel instantiates a few GQA groups only; tensor-core decode any.
    assert "GQA group" in reason({"decode_tensor_cores": False}, num_heads=64, num_kv_heads=4)
    assert reason({"decode_tensor_cores": True}, num_heads=64, num_kv_heads=4) is None
    for g in CUDA_CORE_DECODE_GROUPS:
        assert reason({"decode_tensor_cores": False}, num_heads=8 * g, num_kv_heads=8) is None


def test_noncausal_path_choice():
    # Non-causal without cached context runs the ragged wrapper; with context (or an fp8 cache,
    # which the ragged path would bypass) it stays on the paged prefill wrapper, planned non-causal.
    nc = AttentionConfig(**LLAMA, causal=False)
    assert uses_ragged_path(nc, torch.tensor([0, 0, 0]))
    assert not uses_ragged_path(nc, torch.tensor([0, 5, 0]))
    assert not uses_ragged_path(AttentionConfig(**LLAMA, causal=False, kv_cache_dtype="fp8_e4m3"), torch.tensor([0]))
    assert not uses_ragged_path(AttentionConfig(**LLAMA), torch.tensor([0, 0]))


def test_hardware_reasons():
    assert "8.0" in hardware_reason((7, 5), "12.4", "auto")
    assert hardware_reason((8, 0), "12.4", "auto") is None
    assert hardware_reason((8, 0), "12.4", "fa2") is None
    assert "sm90a" in hardware_reason((8, 0), "12.4", "fa3")
    assert "CUDA >= 12.3" in hardware_reason((9, 0), "12.2", "fa3")
    assert hardware_reason((9, 0), "13.0", "fa3") is None
    assert "sm100" in hardware_reason((10, 0), "13.0", "fa3")


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here")
def test_availability_without_library():
    for v in [None, *FlashInferBackend.variants()]:
        a = FlashInferBackend.availability(v)
        assert not a.available and "flashinfer is not installed" in a.reason


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here")
def test_page_size_suite_cells_skip_with_reason_on_cpu():
    from harness.plan.cells import RunOptions, group_by_case, plan_cells
    from harness.cell.case import iterate_case

    suite = load_suite("suites/page_sizes.yaml")
    opts = RunOptions(device=torch.device("cpu"))
    rows = [r for cells in group_by_case(plan_cells(suite, [FlashInferBackend], opts))
            for r in iterate_case(cells, suite, opts)]
    # The suite narrows prefill_backend to auto; decode_tensor_cores runs both ways where the
    # batch has decodes and once (it cannot apply) on prefill-only batches; call_form runs both
    # ways only where decodes and prefills share a batch (elsewhere the two are one call).
    from harness.case.layout import case_layout
    from harness.plan.cells import segment_kinds

    def expected(kinds: set[str]) -> int:
        if "decode" not in kinds:
            return 1
        return 4 if kinds & {"prefill", "extend"} else 2

    lays = [case_layout(c) for c in suite.cases]
    assert len(rows) == sum(expected(segment_kinds(lay.query_lens, lay.seq_lens)) for lay in lays)
    assert any(r.variant.get("call_form") == "fastest" for r in rows)
    assert all(r.variant.get("call_form") == "vllm" for r in rows  # one-kind batches: vLLM's form stands for both
               if r.variant_axes and "call_form" in r.variant_axes.not_applied)
    assert {r.status for r in rows} == {"skipped"}
    assert all("flashinfer is not installed" in r.reason for r in rows)


def test_page_size_suite_covers_the_sweep():
    suite = load_suite("suites/page_sizes.yaml")
    sizes = {c.block_size for c in suite.cases}
    assert {1, 16, 32, 64, 128, 256, 512} <= sizes
    assert {c.kv_layout for c in suite.cases} == {"NHD", "HND"}
    assert all((c.num_heads, c.num_kv_heads, c.head_size) == (32, 8, 128) for c in suite.cases)
    kinds = {g.kind for c in suite.cases for g in c.batch}
    assert {"decode", "prefill"} <= kinds


# ---------------------------------------------------------------- LSE plumbing
def test_run_into_keeps_base2_lse_and_fills_noncontiguous_outputs():
    """run_into with a real base-2 attention (torch) in place of the kernel: lse_out gets the
    library's base-2 LSE (the declared ``lse_base``), which ``lse_to_natural`` turns into the
    reference's natural-log LSE, and out the output, also through non-contiguous views."""
    from attn_contract import lse_to_natural

    assert FlashInferBackend.capabilities().lse_base == 2
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g) for s in ((5, 4, 8), (9, 2, 8), (9, 2, 8)))
    ref_o, ref_lse = attention_one_request(q, k, v, scale=8**-0.5, causal=True, compute_dtype=torch.float64)

    def base2_attention(out, lse, return_lse):
        o, l = attention_one_request(q, k, v, scale=8**-0.5, causal=True)
        out.copy_(o)
        if return_lse:
            lse.copy_(l / math.log(2))  # what FlashInfer returns
        return (out, lse) if return_lse else out

    out = torch.full((5, 4, 8), float("nan"))
    lse = torch.full((5, 4), float("nan"))
    run_into(base2_attention, out, lse)
    torch.testing.assert_close(lse_to_natural(lse, 2).double(), ref_lse, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), ref_o, atol=1e-5, rtol=1e-5)

    out_t = torch.full((8, 4, 5), float("nan")).permute(2, 1, 0)  # non-contiguous [5, 4, 8]
    lse_t = torch.full((4, 5), float("nan")).t()
    run_into(base2_attention, out_t, lse_t)
    torch.testing.assert_close(lse_to_natural(lse_t, 2).double(), ref_lse, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_t.double(), ref_o, atol=1e-5, rtol=1e-5)


def test_workspace_is_sized_from_the_layer_past_the_overflowing_128mb():
    """Issue 12: 16/2 heads, head 128 overflowed FlashInfer's 128 MB float workspace in plan()
    (batch_prefill_tmp_v). The split-KV bound of FlashInfer 0.6's PrefillPlan is above that."""
    from attn_contract import AttentionConfig
    from backends.flashinfer import (MAX_WORKSPACE_BYTES, MiB, FlashInferBackend, float_workspace_bound,
                                     is_workspace_overflow, workspace_size)

    assert float_workspace_bound(16, 2, 128, num_sms=132) > 128 * MiB
    cfg = AttentionConfig(num_heads=16, num_kv_heads=2, head_size=128)
    assert workspace_size(cfg) >= float_workspace_bound(16, 2, 128, num_sms=132)
    big = AttentionConfig(num_heads=64, num_kv_heads=4, head_size=256)
    assert workspace_size(big) > workspace_size(cfg) and workspace_size(big) < MAX_WORKSPACE_BYTES
    assert FlashInferBackend.workspace_bytes(cfg, {}) >= workspace_size(cfg)  # what the memory planner sees
    # The wrappers' own buffers (flashinfer 0.6.18 constructors: an 8 MiB int workspace each) and
    # the allowance measured on the H200 (78 MiB over the counted terms at the first cell of a
    # process); the peak did not depend on prefill_backend, so neither does the estimate.
    fa2 = FlashInferBackend.workspace_bytes(cfg, {"prefill_backend": "fa2"})
    assert FlashInferBackend.workspace_bytes(cfg, {"prefill_backend": "auto"}) == fa2
    assert fa2 - workspace_size(cfg) >= 2 * 8 * MiB + 78 * MiB
    noncausal = AttentionConfig(num_heads=16, num_kv_heads=2, head_size=128, causal=False)  # + ragged wrapper
    assert FlashInferBackend.workspace_bytes(noncausal, {}) - FlashInferBackend.workspace_bytes(cfg, {}) >= 8 * MiB
    msg = ("Buffer overflow when allocating memory for batch_prefill_tmp_v with size 138412032 and alignment 16, "
           "but only 134217728 bytes available in AlignedAllocator")
    assert is_workspace_overflow(RuntimeError(msg)) and not is_workspace_overflow(RuntimeError("CUDA out of memory"))


def test_plan_growing_workspace_doubles_until_the_plan_fits_and_reraises_anything_else():
    """The grow-and-retry both FlashInfer backends share (flashinfer and flashinfer-cascade)."""
    from backends.flashinfer import MiB, plan_growing_workspace

    size = {"b": 128 * MiB}
    remade = []

    def plan():  # a plan needing 300 MiB, failing the way FlashInfer's AlignedAllocator does
        if size["b"] < 300 * MiB:
            raise RuntimeError("Buffer overflow when allocating memory for batch_prefill_tmp_v")
        return "planned"

    def remake(n):
        remade.append(n)
        size["b"] = n

    assert plan_growing_workspace(plan, lambda: size["b"], remake) == ("planned", 2)
    assert remade == [256 * MiB, 512 * MiB]
    size["b"] = 128 * MiB  # past the cap: the overflow is raised, not looped on
    with pytest.raises(RuntimeError, match="Buffer overflow"):
        plan_growing_workspace(plan, lambda: size["b"], remake, max_bytes=256 * MiB)

    def other():
        raise RuntimeError("CUDA error: invalid argument")
    with pytest.raises(RuntimeError, match="invalid argument"):
        plan_growing_workspace(other, lambda: size["b"], remake)


def test_cascade_backend_shares_the_workspace_sizing():
    import backends.cascade.flashinfer_cascade as fic

    assert not hasattr(fic, "WORKSPACE_BYTES")  # no fixed 128 MB of its own
    assert fic.plan_growing_workspace is __import__("backends.flashinfer").flashinfer.plan_growing_workspace
    assert fic.workspace_size is __import__("backends.flashinfer").flashinfer.workspace_size


# ---------------------------------------------------------------- kernel families
from backends.flashinfer import families  # noqa: E402


def test_family_axes_are_opt_in_so_default_runs_keep_their_cells():
    """The families add no cell where no filter names their axes: the default variants are the
    wrapper's twelve, and a filter on another axis (page_sizes narrows prefill_backend only)
    still leaves decode_backend at the wrapper."""
    from harness.plan.cells import select_variants
    from harness.plan.cells import RunOptions

    opts = RunOptions(device=torch.device("cpu"))
    assert FlashInferBackend.opt_in_axes == {"decode_backend", "prefill_backend", "verify_wrapper"}
    for path in ("suites/decode.yaml", "suites/conformance.yaml", "suites/page_sizes.yaml"):
        picked = select_variants(FlashInferBackend, load_suite(path), opts)
        assert {v["decode_backend"] for v in picked} == {"wrapper"}, path
        assert {v["verify_wrapper"] for v in picked} == {"prefill"}, path
        assert {v["prefill_backend"] for v in picked} <= set(families.DEFAULT_PREFILL_BACKENDS), path
    assert len(select_variants(FlashInferBackend, load_suite("suites/decode.yaml"), opts)) == 12
    # Naming the axis (a suite's variants: or --variant) runs the families.
    ok = select_variants(FlashInferBackend, load_suite("suites/other_kernels.yaml"), opts)
    assert {v["decode_backend"] for v in ok} == set(families.DECODE_BACKENDS)
    assert {v["prefill_backend"] for v in ok} == set(families.PREFILL_BACKENDS)
    # The trtllm/cuDNN decode families ignore decode_tensor_cores and the fastest call form.
    assert all(v["decode_tensor_cores"] and v["call_form"] == "vllm"
               for v in FlashInferBackend.variants() if v["decode_backend"] != "wrapper")


def test_family_reasons_follow_flashinfer_rules():
    xqa, cudnn = {"decode_backend": "xqa"}, {"decode_backend": "cudnn"}
    assert reason(xqa) is None and reason(xqa, kv_cache_dtype="fp8_e4m3", sliding_window=512) is None
    assert "page size 256" in reason(xqa, block_size=256) and "16, 32, 64, 128" in reason(xqa, block_size=8)
    assert "fp8_e5m2 is not one" in reason(xqa, kv_cache_dtype="fp8_e5m2")
    assert "soft-cap" in reason(xqa, softcap=30.0)
    assert reason(cudnn) is None  # bf16 by default
    assert "BFLOAT16" in reason(cudnn, dtype="float16")
    assert "fp8" in reason(cudnn, kv_cache_dtype="fp8_e4m3")
    assert "window" in reason(cudnn, sliding_window=128)
    assert "ragged" in reason({"prefill_backend": "cutlass"})  # causal: the paged wrapper has no cutlass
    assert reason({"prefill_backend": "cutlass"}, causal=False) is None
    assert "not wired" not in (reason({"prefill_backend": "auto"}) or "")
    cudnn_p = {"prefill_backend": "cudnn"}
    assert reason(cudnn_p) is None and reason(cudnn_p, causal=False) is None  # wired: bf16, head 128
    assert "BFLOAT16" in reason(cudnn_p, dtype="float16")
    assert "fp8" in reason(cudnn_p, kv_cache_dtype="fp8_e4m3")
    assert "window" in reason(cudnn_p, sliding_window=128) and "soft-cap" in reason(cudnn_p, softcap=30.0)
    assert "head dim 128" in reason(cudnn_p, head_size=64)
    assert "unknown decode_backend" in reason({"decode_backend": "fa9"})


def test_family_architectures_as_flashinfer_checks_them():
    h200, b200, a100 = (9, 0), (10, 0), (8, 0)
    assert families.arch_reason(h200, "xqa", "auto") is None
    assert "SM90, SM100, SM120" in families.arch_reason(a100, "xqa", "auto")
    assert "Blackwell" in families.arch_reason(h200, "trtllm-gen", "auto")
    assert families.arch_reason(b200, "trtllm-gen", "trtllm-gen") is None
    assert "SM100a" in families.arch_reason(h200, "wrapper", "cutlass")
    assert families.arch_reason(b200, "wrapper", "cutlass") is None
    assert "Blackwell" in families.arch_reason(h200, "wrapper", "trtllm-gen")


def test_family_capabilities_and_memory():
    from backends.flashinfer.decode_kernels import TRTLLM_WORKSPACE_BYTES
    from backends.flashinfer.prefill_kernels import CUDNN_PREFILL_WORKSPACE_BYTES

    assert FlashInferBackend.capabilities().returns_lse
    for name in ("xqa", "trtllm-gen", "cudnn"):
        caps = FlashInferBackend.capabilities({"decode_backend": name})
        assert not caps.returns_lse and caps.split_kv is None  # no LSE out of these calls
    cfg = AttentionConfig(**LLAMA)
    assert (FlashInferBackend.workspace_bytes(cfg, {"decode_backend": "xqa"})
            - FlashInferBackend.workspace_bytes(cfg, {}) == TRTLLM_WORKSPACE_BYTES)
    assert FlashInferBackend.standalone_call(cfg, {"decode_backend": "xqa"}) is None
    assert FlashInferBackend.standalone_call(cfg, {"prefill_backend": "cudnn"}) is None
    assert not FlashInferBackend.capabilities({"prefill_backend": "cudnn"}).returns_lse
    assert (FlashInferBackend.workspace_bytes(cfg, {"prefill_backend": "cudnn"})
            - FlashInferBackend.workspace_bytes(cfg, {}) == CUDNN_PREFILL_WORKSPACE_BYTES)
    # non-causal: cudnn takes encoder-style batches on the paged cache (no ragged wrapper to count)
    nc = AttentionConfig(**LLAMA, causal=False)
    assert (FlashInferBackend.workspace_bytes(nc, {"prefill_backend": "cudnn"})
            < FlashInferBackend.workspace_bytes(nc, {}) + CUDNN_PREFILL_WORKSPACE_BYTES)
    src = FlashInferBackend.standalone_call(cfg, {"prefill_backend": "fa2", "call_form": "fastest"})
    assert "backend='fa2'" in src and "CALL_FORM = 'fastest'" in src and "use_tensor_cores=True" in src
    compile(src, "standalone", "exec")  # the template substitutes to valid Python


def test_cudnn_prefill_metadata_is_element_offsets_over_the_segment():
    from backends.flashinfer.prefill_kernels import prefill_call_args

    # A segment starting at token 5 of the batch (after the decodes): 3 and 12 query tokens over
    # 10 and 12 keys, page 4, 2 heads of 128 (value head 64 to tell the two offsets apart).
    bt = torch.tensor([[7, 3, 9, 1], [0, 2, 8, 6]], dtype=torch.int32)
    call = prefill_call_args(torch.tensor([5, 8, 20]), torch.tensor([10, 12]), bt, 4, 2, 128, 64, True,
                             torch.device("cpu"))
    assert call.offsets_q.tolist() == [0, 3 * 256, 15 * 256] and call.offsets_o.tolist() == [0, 3 * 128, 15 * 128]
    assert call.offsets_q.dtype == torch.int32 and call.seq_lens_q.shape == (2, 1, 1, 1)
    assert call.seq_lens_q.flatten().tolist() == [3, 12] and call.seq_lens_kv.flatten().tolist() == [10, 12]
    assert (call.max_q, call.max_kv, call.num_reqs, call.causal) == (12, 12, 2, True)
    assert call.block_table.tolist() == [[7, 3, 9], [0, 2, 8]] and call.block_table.is_contiguous()
    with pytest.raises(ValueError, match="more query tokens than keys"):
        prefill_call_args(torch.tensor([0, 13]), torch.tensor([12]), bt[:1], 4, 2, 128, 128, True, torch.device("cpu"))
    with pytest.raises(ValueError, match="needs 5 pages"):
        prefill_call_args(torch.tensor([0, 1]), torch.tensor([17]), bt[:1], 4, 2, 128, 128, True, torch.device("cpu"))


@pytest.mark.skipif(importlib.util.find_spec("cudnn") is not None, reason="cudnn-frontend is installed here")
def test_cudnn_prefill_needs_cudnn_frontend():
    assert "prefill_backend=cudnn: cudnn-frontend is not installed" in families.library_reason("wrapper", "cudnn")
    assert families.library_reason("wrapper", "fa3") is None


def test_cutlass_takes_only_batches_without_cached_context():
    batch = generate(mixed_case(causal=False))
    common = batch.common_metadata()
    assert "ragged" in FlashInferBackend.check_batch_support(common, {"prefill_backend": "cutlass"})
    assert FlashInferBackend.check_batch_support(common, {"prefill_backend": "fa2"}) is None


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is not None, reason="flashinfer is installed here")
def test_other_kernels_suite_family_cells_skip_with_reason_on_cpu():
    """Each family is its own cell (decode families on decode batches, prefill families on prefill
    batches), recorded with its variant; without FlashInfer every one is skipped with that reason."""
    from harness.plan.cells import RunOptions, group_by_case, plan_cells
    from harness.cell.case import iterate_case

    suite = load_suite("suites/other_kernels.yaml")
    opts = RunOptions(device=torch.device("cpu"))
    rows = [r for cells in group_by_case(plan_cells(suite, [FlashInferBackend], opts))
            for r in iterate_case(cells, suite, opts)]
    decode = [r for r in rows if r.case.startswith("decode")]
    prefill = [r for r in rows if r.case.startswith("prefill")]
    n_decode_cases = len({r.case for r in decode})
    assert len(decode) == 4 * n_decode_cases and len(prefill) == 6 * len({r.case for r in prefill})
    assert {r.variant["decode_backend"] for r in decode} == set(families.DECODE_BACKENDS)
    assert {r.variant["prefill_backend"] for r in prefill} == set(families.PREFILL_BACKENDS)
    assert {r.status for r in rows} == {"skipped"}
    assert all("flashinfer is not installed" in r.reason for r in rows)


def test_standalone_call_plans_a_pure_decode_batch_on_the_graph_wrapper():
    """`harness repro`/`crosscheck` time the standalone source as the adapter's call: a pure-decode
    batch on the use_cuda_graph=True decode wrapper the builder plans it on (the H100 crosscheck of
    2026-12-06 saw the plain wrapper's plan 8% faster than the adapter's on decode-mqa-b256)."""
    import ast

    from backends.flashinfer.standalone import standalone_source

    src = standalone_source(128, True, "auto", "vllm")
    tree = ast.parse(src)  # the substituted template is Python
    graph = [n for n in ast.walk(tree) if isinstance(n, ast.If) and "nd == n" in ast.unparse(n.test)]
    assert graph and "use_cuda_graph=True" in ast.unparse(graph[0])


# ---------------------------------------------------------------- verify_wrapper=decode
VERIFY = {"verify_wrapper": "decode"}


def verify_case(groups, **kw):
    return CaseSpec.model_validate({"name": "v", "num_heads": 8, "num_kv_heads": 2, "head_size": 64,
                                    "block_size": 16, "seed": 3, "batch": groups, **kw})


def test_verify_wrapper_is_one_opt_in_variant_and_default_runs_keep_their_cells():
    """The decode wrapper's q_len_per_req is one variant, planned only where a filter names the
    axis: suites/decode.yaml plans the 72 FlashInfer cells main planned before the axis existed."""
    from harness.plan.cells import RunOptions, plan_cells

    ours = [v for v in FlashInferBackend.variants() if v["verify_wrapper"] == "decode"]
    assert ours == [{"decode_tensor_cores": True, "prefill_backend": "auto", "call_form": "vllm",
                     "decode_backend": "wrapper", "verify_wrapper": "decode"}]
    assert all(v["verify_wrapper"] == "prefill" for v in FlashInferBackend.default_variants())
    assert FlashInferBackend.variant_axis_kinds["verify_wrapper"] == {"extend"}
    cells = plan_cells(load_suite("suites/decode.yaml"), [FlashInferBackend], RunOptions(device=torch.device("cpu")))
    assert len(cells) == 72 and {c.variant["verify_wrapper"] for c in cells} == {"prefill"}


def test_verify_wrapper_layer_reasons():
    assert reason(VERIFY) is None
    # The tensor-core decode's layer rules are the wrapper's: fp8, window and soft-cap pass.
    assert reason(VERIFY, kv_cache_dtype="fp8_e4m3") is None
    assert reason(VERIFY, sliding_window=512, softcap=30.0) is None
    assert "use_tensor_cores=True" in reason({**VERIFY, "decode_tensor_cores": False})
    assert "another decode family" in reason({**VERIFY, "decode_backend": "xqa"})
    assert "causal within each request" in reason(VERIFY, causal=False)
    assert "unknown verify_wrapper" in reason({"verify_wrapper": "ragged"})


def test_verify_wrapper_batch_reasons():
    def batch_reason(groups, variant=VERIFY):
        return FlashInferBackend.check_batch_support(generate(verify_case(groups)).common_metadata(), variant)

    ctx = {"dist": "uniform", "low": 20, "high": 90}
    assert batch_reason([{"kind": "decode", "count": 3, "query_len": 4, "context_len": ctx}]) is None
    assert "q = 1" in batch_reason([{"kind": "decode", "count": 3, "context_len": ctx}])
    assert "differ" in batch_reason([{"kind": "decode", "count": 2, "query_len": 2, "context_len": ctx},
                                     {"kind": "decode", "count": 2, "query_len": 4, "context_len": ctx}])
    # A verify beside a chunked prefill (suites/spec_decode.yaml's mixed steps) or a prefill alone.
    assert "differ" in batch_reason([{"kind": "decode", "count": 3, "query_len": 2, "context_len": ctx},
                                     {"kind": "extend", "query_len": 24, "context_len": 90}])
    assert "no cached context" in batch_reason([{"kind": "prefill", "count": 2, "query_len": 4}])
    assert "q = 1" in batch_reason([{"kind": "decode", "count": 2, "query_len": 3, "context_len": ctx},
                                    {"kind": "decode", "count": 2, "context_len": ctx}])
    # The prefill wrapper (today's behaviour) takes every one of them.
    assert batch_reason([{"kind": "decode", "count": 2, "query_len": 3, "context_len": ctx},
                         {"kind": "decode", "count": 2, "context_len": ctx}], {}) is None


def test_verify_wrapper_capabilities_and_graph_level():
    """UNIFORM_BATCH from FlashInfer's own graph-safe q_len_per_req path (not a vLLM declaration):
    a uniform verify batch is timed from a full graph, a mixed step is not."""
    from harness.records.graph_modes import vllm_graph_mode
    from harness.timing.graphs import graph_decision
    from backends.flashinfer import FlashInferImpl, FlashInferMetadata

    caps = FlashInferBackend.capabilities(VERIFY)
    assert caps.cudagraph == CudaGraphSupport.UNIFORM_BATCH and caps.returns_lse and caps.split_kv is None
    assert "q_len_per_req" in caps.cudagraph_source and "flashinfer#3871" in caps.cudagraph_source
    assert "not vLLM's FlashInfer backend" in caps.cudagraph_source
    plain = FlashInferBackend.capabilities({})
    assert plain.cudagraph == CudaGraphSupport.UNIFORM_SINGLE_TOKEN_DECODE and "vLLM v0.25.1" in plain.cudagraph_source
    assert graph_decision(caps.cudagraph, [4] * 8, None).use
    assert not graph_decision(plain.cudagraph, [4] * 8, None).use
    assert "UNIFORM_BATCH" in graph_decision(caps.cudagraph, [2, 2, 24], None).reason
    assert vllm_graph_mode(caps.cudagraph.name, [4] * 8).mode == "full"
    assert vllm_graph_mode(plain.cudagraph.name, [4] * 8).mode == "piecewise"
    # The builder's metadata for such a batch: the decode wrapper alone, which graph_safe passes.
    impl = FlashInferImpl(AttentionConfig(**LLAMA), {**VERIFY}, torch.device("cpu"), None)
    md = FlashInferMetadata(num_decodes=8, num_decode_tokens=32, num_prefills=0, num_prefill_tokens=0,
                            decode=object(), decode_graph_wrapper=True, decode_q_len_per_req=4)
    assert impl.graph_safe(md) is None
    assert impl.describe_call(md)["decode_q_len_per_req"] == 4
    md.prefill = object()
    assert "prefill plan" in impl.graph_safe(md)
    # No reproducer for a call the template does not plan.
    assert FlashInferBackend.standalone_call(AttentionConfig(**LLAMA), VERIFY) is None
    assert FlashInferBackend.standalone_call(AttentionConfig(**LLAMA), {}) is not None


def test_graph_wrappers_replan_the_same_wrapper_while_its_buffer_holds_the_pages():
    """The one policy both FlashInfer builders keep their use_cuda_graph=True wrappers by: a graph
    captured on a wrapper stays valid only while the next plan reuses that wrapper."""
    from backends.flashinfer import GraphWrappers

    made: list[int] = []

    def make(pages: int) -> object:
        made.append(pages)
        return object()

    w = GraphWrappers()
    a = w.get((8, 1), 100, make)
    assert w.get((8, 1), 60, make) is a and made == [100]  # fewer pages: the captured one serves
    assert w.get((8, 2), 60, make) is not a  # another frozen shape: its own wrapper
    b = w.get((8, 1), 120, make)
    assert b is not a and made == [100, 60, 120] and w.get((8, 1), 100, make) is b
    w.clear()
    assert w.get((8, 1), 100, make) is not b
