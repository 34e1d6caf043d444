"""The MLA library adapters' CPU-checkable parts (flashinfer-mla, flash-attn-mla, flashmla): what
they declare, why they refuse, the metadata they build, and the GPU probe's pure parts. The
library calls themselves run on the GPU (tools/mla_probe, suites/mla.yaml)."""

import importlib.util

import pytest
import torch

from attn_contract import MLA_ABSORBED, MLA_EXPANDED, AttentionConfig, CommonAttentionMetadata, MLADims
from attn_contract.status import reason_kind
from backends.mla import flash_attn as flash_attn_mla, flashinfer as flashinfer_mla, flashmla
from backends.mla.common import form_reason, packed_slots
from backends.mla.flash_attn import FlashAttnMLABackend, FlashAttnMLAMetadataBuilder, build_reason
from backends.mla.flashinfer import FlashInferMLABackend
from backends.mla.flashmla import FlashMLABackend, uniform_query_len

MLA_BACKENDS = (FlashInferMLABackend, FlashAttnMLABackend, FlashMLABackend)


def absorbed(**kw):
    base = dict(num_heads=16, num_kv_heads=1, head_size=576, v_head_size=512, attention_kind=MLA_ABSORBED,
                mla=MLADims(), dtype="bfloat16", block_size=64)
    return AttentionConfig(**{**base, **kw})


def expanded(**kw):
    base = dict(num_heads=16, num_kv_heads=16, head_size=192, v_head_size=128, attention_kind=MLA_EXPANDED,
                mla=MLADims(), dtype="bfloat16", block_size=64)
    return AttentionConfig(**{**base, **kw})


def common(query_lens, seq_lens, block_size, table):
    qsl = torch.tensor([0, *torch.cumsum(torch.tensor(query_lens), 0).tolist()], dtype=torch.int32)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=sl, seq_lens_cpu=sl, block_table=table,
        slot_mapping=torch.zeros(int(qsl[-1]), dtype=torch.int64), num_reqs=len(seq_lens),
        num_actual_tokens=int(qsl[-1]), max_query_len=max(query_lens), max_seq_len=max(seq_lens),
        causal=True, block_size=block_size)


def test_declared_forms_and_refusals():
    for backend in MLA_BACKENDS:
        caps = backend.capabilities()
        assert caps.mla_latent_dims == frozenset({(512, 64)}) and caps.returns_lse
        assert backend.check_support(absorbed(), {}, "cuda") is None, backend.name
        mha = AttentionConfig(num_heads=16, num_kv_heads=16, head_size=128, dtype="bfloat16", block_size=64)
        assert "attention kind mha not supported" in backend.check_support(mha, {}, "cuda")
        assert "runs on cuda" in backend.check_support(absorbed(), {}, "cpu")
        other = absorbed(head_size=288, v_head_size=256, mla=MLADims(kv_lora_rank=256, qk_rope_head_dim=32))
        assert "MLA latent 256+32 not supported" in backend.check_support(other, {}, "cuda")
    for backend in (FlashInferMLABackend, FlashAttnMLABackend):
        assert backend.check_support(expanded(), {}, "cuda") is None
    assert "mla_expanded not supported" in FlashMLABackend.check_support(expanded(), {}, "cuda")
    # lse bases as the libraries return them: FlashInfer base 2, FA and FlashMLA natural
    assert [b.capabilities().lse_base for b in MLA_BACKENDS] == [2, "e", "e"]


def test_fp8_latent_rules():
    fp8 = absorbed(kv_cache_dtype="fp8_e4m3")
    assert FlashInferMLABackend.check_support(fp8, {"mla_backend": "fa2"}, "cuda") is None
    # fa3 takes it too: run(ckv_scale=, kpe_scale=) with a bf16 query (the H200 probe passed both backends)
    assert FlashInferMLABackend.check_support(fp8, {"mla_backend": "fa3"}, "cuda") is None
    r = FlashAttnMLABackend.check_support(fp8, {"fa_build": "fa3-fwd"}, "cuda")
    assert "16-bit" in r and reason_kind(r) == "kernel"
    r = FlashMLABackend.check_support(fp8, {}, "cuda")
    assert "dense_decode_fwd gets no fp8" in r and reason_kind(r) == "build"
    assert reason_kind(flash_attn_mla.FA4_SM90_REASON) == "kernel"
    # the expanded form's key/value arrive in the model dtype, whatever the latent cache holds
    assert FlashAttnMLABackend.check_support(expanded(kv_cache_dtype="fp8_e4m3"), {}, "cuda") is None
    assert FlashInferMLABackend.check_support(expanded(kv_cache_dtype="fp8_e4m3"), {"mla_backend": "fa3"}, "cuda") is None


def test_library_limits_as_reasons():
    assert "block_size 16 not allowed" in FlashMLABackend.check_support(absorbed(block_size=16), {}, "cuda")
    assert FlashInferMLABackend.check_support(absorbed(block_size=1), {"mla_backend": "fa2"}, "cuda") is None
    assert "dtype float16" in FlashAttnMLABackend.check_support(absorbed(dtype="float16"), {"fa_build": "fa3-fwd"},
                                                                "cuda")
    assert "dtype float16" in FlashMLABackend.check_support(absorbed(dtype="float16"), {}, "cuda")
    assert "head sizes 576/128" in form_reason(absorbed(v_head_size=128))
    assert "one (latent) KV head" in form_reason(absorbed(num_kv_heads=2))
    assert flashinfer_mla.arch_reason((9, 0), "fa3") is None and flashinfer_mla.arch_reason((8, 0), "fa2") is None
    assert "Hopper" in flashinfer_mla.arch_reason((8, 0), "fa3")
    assert "8.0" in flashinfer_mla.arch_reason((7, 5), "fa2")


def test_fa_build_flags_name_what_is_compiled_out():
    tokenspeed = {"FLASH_ATTENTION_DISABLE_HDIMDIFF64": True, "FLASH_ATTENTION_DISABLE_HDIMDIFF192": True}
    r = build_reason("fa3", tokenspeed)
    assert "different value head sizes compiled out" in r and "HDIMDIFF64" in r and "HDIMDIFF192" in r
    assert reason_kind(r) == "build"
    assert build_reason("fa3-fwd", {"FLASH_ATTENTION_DISABLE_HDIMDIFF64": False}) is None
    half = {"FLASH_ATTENTION_DISABLE_HDIMDIFF64": True}
    assert build_reason("fa3", half) is None  # the 192/128 prefill is left
    assert "qv (64/512)" in build_reason("fa3", half, MLA_ABSORBED)
    assert build_reason("fa3", half, MLA_EXPANDED) is None


@pytest.mark.parametrize("backend, variant, missing", [
    (FlashInferMLABackend, {"mla_backend": "fa3"}, "flashinfer"), (FlashMLABackend, {}, "flash_mla"),
    (FlashAttnMLABackend, {"fa_build": "fa3-fwd"}, "fa3_fwd_interface"),
    (FlashAttnMLABackend, {"fa_build": "fa3"}, "flash_attn_interface"),
    (FlashAttnMLABackend, {"fa_build": "fa4"}, "flash_attn")])
def test_availability_without_the_library_says_so(backend, variant, missing):
    if importlib.util.find_spec(missing) is not None:
        pytest.skip(f"{missing} is installed here")
    a = backend.availability(variant)
    assert not a.available and "not installed" in a.reason and "pip install" in a.reason


def test_packed_slots_follow_the_block_table():
    # 3 requests over pages of 4: lengths 1, 4 (one exact page), 9 (a page and a bit past two)
    table = torch.tensor([[5, 0, 0], [2, 0, 0], [7, 1, 3]], dtype=torch.int32)
    slots = packed_slots(table, torch.tensor([1, 4, 9]), 4, torch.device("cpu"))
    assert slots.tolist() == [20, 8, 9, 10, 11, 28, 29, 30, 31, 4, 5, 6, 7, 12]
    cache = torch.randn(8, 4, 576)
    packed = cache.reshape(-1, 576).index_select(0, slots)
    assert torch.equal(packed[5:14], torch.cat([cache[7], cache[1], cache[3, :1]]))
    with pytest.raises(ValueError, match="needs 4 pages"):
        packed_slots(table, torch.tensor([1, 4, 13]), 4, torch.device("cpu"))


def test_fa_builder_metadata_on_cpu():
    table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    md = FlashAttnMLAMetadataBuilder(absorbed(block_size=4), {"fa_build": "fa3-fwd"}, torch.device("cpu")).build(
        common([1, 2], [5, 8], 4, table))
    assert md.cu_seqlens_q.tolist() == [0, 1, 3] and md.cu_seqlens_k.tolist() == [0, 5, 13]
    assert (md.max_seqlen_q, md.max_seqlen_k, md.cached_tokens, md.causal) == (2, 8, 13, True)
    assert md.slots.tolist() == [12, 13, 14, 15, 4, 0, 1, 2, 3, 8, 9, 10, 11]
    ex = FlashAttnMLAMetadataBuilder(expanded(block_size=4), {}, torch.device("cpu")).build(common([1, 2], [5, 8], 4, table))
    assert ex.slots is None and ex.cu_seqlens_k.tolist() == [0, 5, 13]
    mem = FlashAttnMLABackend.batch_workspace_bytes(absorbed(), {}, [1, 1], [1000, 3000], 2)
    assert mem >= 4000 * 576 * 2 + flash_attn_mla.SPLIT_ALLOWANCE_BYTES


def test_flashmla_needs_one_query_length():
    table = torch.zeros(2, 2, dtype=torch.int32)
    assert FlashMLABackend.check_batch_support(common([2, 2], [70, 100], 64, table), {}) is None
    assert "one query length" in FlashMLABackend.check_batch_support(common([1, 3], [70, 100], 64, table), {})
    assert uniform_query_len(torch.tensor([4, 4, 4])) == 4 and uniform_query_len(torch.tensor([1, 2])) is None
    assert flashmla.PAGE == 64


def test_engine_names_are_mla_only():
    for backend in MLA_BACKENDS:
        for decl in backend.engine_names.values():
            assert decl.runs_kind(MLA_ABSORBED) and not decl.runs_kind("mha")
    assert "vllm" not in FlashInferMLABackend.engine_names  # vLLM's FLASHINFER_MLA is trtllm-gen, sm100 only
    assert FlashAttnMLABackend.engine_names["vllm"].name == "FLASH_ATTN_MLA"
    assert [FlashMLABackend.engine_names[e].name for e in ("vllm", "sglang")] == ["FLASHMLA", "flashmla"]


def test_probe_batch_and_reference_agree():
    """The probe's MLA reference (tools/mla_probe) is ordinary attention with k = [ckv, kpe],
    v = ckv and one KV head; its contiguous and packed gathers read the same tokens."""
    from tools.mla_probe.common import attention_reference, errors
    from tools.mla_probe.mla_batch import SM_SCALE, make_mla_batch

    b = make_mla_batch(4, 2, 16, [2, 15, 32, 33], seed=1, device="cpu")
    b.reference()
    ckv_c, _ = b.contiguous()
    packed = b.ckv.view(-1, 512)[b.token_slots()]
    at = 0
    for i in range(b.batch):
        ckv, kpe = b.logical(i)
        assert torch.equal(ckv_c[i, : b.kv_lens[i], 0].float(), ckv)
        assert torch.equal(packed[at: at + b.kv_lens[i]].float(), ckv)
        at += b.kv_lens[i]
        sl = slice(2 * i, 2 * i + 2)
        o, lse = attention_reference(torch.cat([b.q_nope[sl], b.q_pe[sl]], -1), torch.cat([ckv, kpe], -1)[:, None],
                                     ckv[:, None], SM_SCALE, True)
        assert errors(o, b.ref_out[sl], 1e-5)["passed"]
        assert torch.allclose(lse, b.ref_lse[sl], atol=1e-5)


def test_wrapped_mla_bugs_are_flagged_on_the_cpu():
    """tests/mutants/mla_gpu.py's bugs, wrapped around torch-math here (around the MLA library
    backends on a GPU): each is flagged on suites/mla.yaml's CPU cells, torch-math is not."""
    from mutants.mla_gpu import GPU_MLA_MUTANTS, MATH_MLA_MUTANTS, SPECS

    from harness.cell.case import iterate_case
    from harness.plan.cells import RunOptions, group_by_case, plan_cells
    from harness.registry import resolve
    from harness.spec import load_suite

    suite = load_suite("suites/mla.yaml")
    keep = ("cpu-mixed[mla_form=absorbed]", "cpu-mixed[mla_form=expanded]", "cpu-v2-lite")
    suite = suite.model_copy(update={"cases": [c for c in suite.cases if c.name in keep]})
    opts = RunOptions(device=torch.device("cpu"), time=False)
    by: dict[str, list] = {}
    for group in group_by_case(plan_cells(suite, [resolve("torch-math"), *MATH_MLA_MUTANTS], opts)):
        for row in iterate_case(group, suite, opts):
            by.setdefault(row.backend, []).append(row)
    assert len(by["torch-math"]) == 3 and all(r.status == "pass" for r in by["torch-math"])
    for m in MATH_MLA_MUTANTS:
        rows = by[m.name]
        assert not [r for r in rows if r.status == "error"], [r.reason for r in rows]
        assert any(r.status == "mismatch" for r in rows), f"{m.name} passed every cell"
    assert len(GPU_MLA_MUTANTS) == len(SPECS) == 4 * len(MATH_MLA_MUTANTS)  # FlashInfer fa3, fa2, FA3 qv, FlashMLA
    assert all(s.startswith("mutants.mla_gpu:") for s in SPECS)


def test_a_library_that_crashes_on_import_is_a_reason(tmp_path, monkeypatch):
    """FlashMLA's wheel is built for another torch: availability imports it in a child process
    first, so an abort on import becomes a reason instead of taking the worker down."""
    from backends.mla.common import import_reason, subprocess_import_reason

    (tmp_path / "crashes_on_import.py").write_text("import os\nos.abort()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    reason = import_reason("crashes_on_import", "n/a", probe_first=True)
    assert "crashes_on_import" in reason and "killed by signal 6" in reason
    assert subprocess_import_reason.cache_info().currsize >= 1  # once per process
